/* adaln_cpu.c: float32 CPU adaLN-Zero modulation and gated residual (adaln.h). The elementwise parts run over
 * (sample, token) rows in parallel; the modulation gradients' sums over tokens run per (sample, chunk of ADA_CHUNK
 * tokens) into partials [2][c] in double (the chunk's tokens in order), then per (sample, channel) the chunks in
 * order: fixed by the shape, so the bits do not depend on the thread count. */
#include <stdlib.h>

#include "adaln/adaln.h"
#include "common/cpu_op.h"

#define ADA_CHUNK 256L

static void check(const AdaLNShape *s) {
    if (s->n < 0 || s->tokens < 0 || s->c < 1 || s->mod_stride < s->c)
        vx_fatal("adaln: invalid shape n=%d tokens=%ld c=%d mod_stride=%ld", s->n, s->tokens, s->c, s->mod_stride);
}

static void cpu_modulate(const AdaLNShape *s, const void *xv, const void *shiftv, const void *scalev, void *yv) {
    cpu_need_f32(s->dtype, "adaln_modulate");
    check(s);
    const long rows = (long)s->n * s->tokens;
    const int c = s->c;
#pragma omp parallel for schedule(static) if (rows * c >= 16384)
    for (long r = 0; r < rows; r++) {
        const long b = r / (s->tokens ? s->tokens : 1);
        const float *x = (const float *)xv + r * c, *sh = (const float *)shiftv + b * s->mod_stride,
                    *sc = (const float *)scalev + b * s->mod_stride;
        float *y = (float *)yv + r * c;
        for (int j = 0; j < c; j++) y[j] = x[j] * (1.0f + sc[j]) + sh[j];
    }
}

static void cpu_gate(const AdaLNShape *s, const void *resv, const void *hv, const void *gatev, void *outv) {
    cpu_need_f32(s->dtype, "adaln_gate");
    check(s);
    const long rows = (long)s->n * s->tokens;
    const int c = s->c;
#pragma omp parallel for schedule(static) if (rows * c >= 16384)
    for (long r = 0; r < rows; r++) {
        const long b = r / (s->tokens ? s->tokens : 1);
        const float *res = (const float *)resv + r * c, *h = (const float *)hv + r * c,
                    *g = (const float *)gatev + b * s->mod_stride;
        float *out = (float *)outv + r * c;
        for (int j = 0; j < c; j++) out[j] = res[j] + g[j] * h[j];
    }
}

/* The shared backward: d_in = [beta_in*d_in +] dy * (add1 + v[b]) (v: scale with add1 = 1, or gate with 0);
 * sum0[b][j] = sum_t dy (dshift; NULL for the gate), sum1[b][j] = sum_t dy * w (dscale with w = x; dgate with
 * w = h), both [beta_mod*old +]. */
static void backward(const AdaLNShape *s, const float *dy, const float *w, const float *v, float add1, float *d_in,
                     float *sum0, float *sum1, float beta_in, float beta_mod) {
    const int c = s->c;
    const long nch = (s->tokens + ADA_CHUNK - 1) / ADA_CHUNK, jobs = (long)s->n * nch;
    double *part = calloc((size_t)(jobs > 0 ? jobs : 1) * 2 * (size_t)c, sizeof(double));
    if (!part) vx_fatal("adaln: out of memory for %ld partial sums of %d channels", jobs, c);
#pragma omp parallel for schedule(static) if ((long)s->n * s->tokens * c >= 16384)
    for (long job = 0; job < jobs; job++) {
        const long b = job / nch, t0 = (job % nch) * ADA_CHUNK;
        const long t1 = t0 + ADA_CHUNK < s->tokens ? t0 + ADA_CHUNK : s->tokens;
        const float *vb = v + b * s->mod_stride;
        double *p = part + job * 2 * c;
        for (long t = t0; t < t1; t++) {
            const long o = (b * s->tokens + t) * c;
            for (int j = 0; j < c; j++) {
                const float g = dy[o + j];
                p[j] += g;
                p[c + j] += (double)g * w[o + j];
                const float d = g * (add1 + vb[j]);
                d_in[o + j] = beta_in != 0.0f ? beta_in * d_in[o + j] + d : d;
            }
        }
    }
#pragma omp parallel for schedule(static) if ((long)s->n * c * nch >= 16384)
    for (long bj = 0; bj < (long)s->n * c; bj++) {
        const long b = bj / c;
        const int j = (int)(bj % c);
        double a0 = 0.0, a1 = 0.0;
        for (long ch = 0; ch < nch; ch++) a0 += part[((b * nch + ch) * 2) * c + j], a1 += part[((b * nch + ch) * 2 + 1) * c + j];
        const long o = b * s->mod_stride + j;
        if (sum0) sum0[o] = beta_mod != 0.0f ? beta_mod * sum0[o] + (float)a0 : (float)a0;
        sum1[o] = beta_mod != 0.0f ? beta_mod * sum1[o] + (float)a1 : (float)a1;
    }
    free(part);
}

static void cpu_modulate_backward(const AdaLNShape *s, const void *dy, const void *x, const void *scale, void *dx,
                                  void *dshift, void *dscale, float beta_dx, float beta_mod) {
    cpu_need_f32(s->dtype, "adaln_modulate_backward");
    check(s);
    backward(s, dy, x, scale, 1.0f, dx, dshift, dscale, beta_dx, beta_mod);
}

static void cpu_gate_backward(const AdaLNShape *s, const void *dout, const void *h, const void *gate, void *dh,
                              void *dgate, float beta_dh, float beta_mod) {
    cpu_need_f32(s->dtype, "adaln_gate_backward");
    check(s);
    backward(s, dout, h, gate, 0.0f, dh, NULL, dgate, beta_dh, beta_mod);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

const AdaLNOps adaln_ops_cpu = {{op_supports_f32}, cpu_modulate, cpu_modulate_backward, cpu_gate, cpu_gate_backward};

/* layernorm_cpu.c: float32 CPU LayerNorm (layernorm.h). Rows run in parallel, each row's sums in double in column
 * order; dgamma/dbeta: per fixed chunk of LN_CHUNK rows a partial [2][c] in double (the chunk's rows in order), then
 * per column the chunks' partials in chunk order: the chunks depend on the shape only, so the bits do not depend on
 * the thread count. The partials take 16*c bytes per chunk (3 MiB at 131072 rows of 384). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_op.h"
#include "layernorm/layernorm.h"

#define LN_CHUNK 128L

static void check(const LayerNormShape *s) {
    if (s->rows < 0 || s->c < 1 || !(s->eps >= 0.0f))
        vx_fatal("layernorm: invalid shape rows=%ld c=%d eps=%g", s->rows, s->c, (double)s->eps);
}

static void cpu_forward(const LayerNormShape *s, const void *xv, const float *gamma, const float *beta, void *yv,
                        float *mean, float *rstd) {
    cpu_need_f32(s->dtype, "layernorm_forward");
    check(s);
    const int c = s->c;
    const int aff = s->affine && gamma && beta;
#pragma omp parallel for schedule(static) if (s->rows * c >= 16384)
    for (long r = 0; r < s->rows; r++) {
        const float *x = (const float *)xv + r * c;
        float *y = (float *)yv + r * c;
        double sum = 0.0;
        for (int j = 0; j < c; j++) sum += x[j];
        const double m = sum / c;
        double sq = 0.0;
        for (int j = 0; j < c; j++) {
            const double d = x[j] - m;
            sq += d * d;
        }
        const float mf = (float)m, rs = (float)(1.0 / sqrt(sq / c + (double)s->eps));
        mean[r] = mf, rstd[r] = rs;
        if (aff)
            for (int j = 0; j < c; j++) y[j] = (x[j] - mf) * rs * gamma[j] + beta[j];
        else
            for (int j = 0; j < c; j++) y[j] = (x[j] - mf) * rs;
    }
}

static void cpu_backward(const LayerNormShape *s, const void *dyv, const void *xv, const float *gamma,
                         const float *mean, const float *rstd, void *dxv, float *dgamma, float *dbeta, float beta_dx,
                         float beta_param) {
    cpu_need_f32(s->dtype, "layernorm_backward");
    check(s);
    const int c = s->c;
    const int aff = s->affine && gamma;
    const int grads = aff && dgamma && dbeta;
    const long nch = (s->rows + LN_CHUNK - 1) / LN_CHUNK;
    double *part = grads ? calloc((size_t)(nch > 0 ? nch : 1) * 2 * (size_t)c, sizeof(double)) : NULL;
    if (grads && !part) vx_fatal("layernorm: out of memory for %ld partial sums of %d channels", nch, c);
#pragma omp parallel for schedule(static) if (s->rows * c >= 16384)
    for (long ch = 0; ch < nch; ch++) {
        double *p = grads ? part + ch * 2 * c : NULL;
        const long r1 = (ch + 1) * LN_CHUNK < s->rows ? (ch + 1) * LN_CHUNK : s->rows;
        for (long r = ch * LN_CHUNK; r < r1; r++) {
            const float *x = (const float *)xv + r * c, *dy = (const float *)dyv + r * c;
            float *dx = (float *)dxv + r * c;
            const float mf = mean[r], rs = rstd[r];
            double a = 0.0, b = 0.0;
            for (int j = 0; j < c; j++) {
                const float xh = (x[j] - mf) * rs, g = aff ? dy[j] * gamma[j] : dy[j];
                a += g;
                b += (double)g * xh;
                if (p) p[j] += (double)dy[j] * xh, p[c + j] += dy[j];
            }
            const float am = (float)(a / c), bm = (float)(b / c);
            for (int j = 0; j < c; j++) {
                const float xh = (x[j] - mf) * rs, g = aff ? dy[j] * gamma[j] : dy[j];
                const float v = rs * (g - am - xh * bm);
                dx[j] = beta_dx != 0.0f ? beta_dx * dx[j] + v : v;
            }
        }
    }
    if (!grads) return;
#pragma omp parallel for schedule(static) if (nch * c >= 16384)
    for (int j = 0; j < c; j++) {
        double g = 0.0, b = 0.0;
        for (long ch = 0; ch < nch; ch++) g += part[ch * 2 * c + j], b += part[ch * 2 * c + c + j];
        dgamma[j] = beta_param != 0.0f ? beta_param * dgamma[j] + (float)g : (float)g;
        dbeta[j] = beta_param != 0.0f ? beta_param * dbeta[j] + (float)b : (float)b;
    }
    free(part);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

const LayerNormOps layernorm_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

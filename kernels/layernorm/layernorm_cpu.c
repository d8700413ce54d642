/* layernorm_cpu.c: float32 CPU LayerNorm (layernorm.h). Rows run in parallel, each row's sums in double over LN_LANES
 * interleaved lanes added in lane order: a fixed order that vectorises (one chain in column order, a dependent add
 * per element, made the forward of 1024 x 384 take 0.31 ms, now 0.10; 2-core AVX-512 Xeon). dgamma/dbeta: per fixed
 * chunk of LN_CHUNK rows a partial [2][c] in double (the chunk's rows in order), then per column the chunks' partials
 * in chunk order: the chunks depend on the shape only, so the bits do not depend on the thread count. The partials
 * take 16*c bytes per chunk (3 MiB at 131072 rows of 384). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_op.h"
#include "layernorm/layernorm.h"

#define LN_CHUNK 128L
#define LN_LANES 8

/* sum over j < c of x[j] (shift 0) or of (x[j] - shift)^2 (square 1) in double: lane l takes j = l, l + LN_LANES, ...
 * and the lanes are added in order */
static inline double lane_sum(const float *x, int c, double shift, int square) {
    double acc[LN_LANES] = {0}, sum = 0.0;
    int j = 0;
    for (; j + LN_LANES <= c; j += LN_LANES)
        for (int l = 0; l < LN_LANES; l++) {
            const double d = (double)x[j + l] - shift;
            acc[l] += square ? d * d : d;
        }
    for (int l = 0; j < c; j++, l++) {
        const double d = (double)x[j] - shift;
        acc[l] += square ? d * d : d;
    }
    for (int l = 0; l < LN_LANES; l++) sum += acc[l];
    return sum;
}

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
        const double m = lane_sum(x, c, 0.0, 0) / c, sq = lane_sum(x, c, m, 1);
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
            /* a = sum g, b = sum g xh, each over LN_LANES lanes as in lane_sum */
            double la[LN_LANES] = {0}, lb[LN_LANES] = {0}, a = 0.0, b = 0.0;
            int j0 = 0;
            for (; j0 + LN_LANES <= c; j0 += LN_LANES)
                for (int l = 0; l < LN_LANES; l++) {
                    const int j = j0 + l;
                    const float xh = (x[j] - mf) * rs, g = aff ? dy[j] * gamma[j] : dy[j];
                    la[l] += g;
                    lb[l] += (double)g * xh;
                }
            for (int l = 0; j0 < c; j0++, l++) {
                const float xh = (x[j0] - mf) * rs, g = aff ? dy[j0] * gamma[j0] : dy[j0];
                la[l] += g;
                lb[l] += (double)g * xh;
            }
            for (int l = 0; l < LN_LANES; l++) a += la[l], b += lb[l];
            if (p)
                for (int j = 0; j < c; j++) {
                    const float xh = (x[j] - mf) * rs;
                    p[j] += (double)dy[j] * xh, p[c + j] += dy[j];
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

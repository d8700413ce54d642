/* groupnorm_cpu.c: float32 CPU GroupNorm (groupnorm.h) over NDHWC activations, forward and backward, with the
 * SiLU optionally fused (shape.silu): the forward applies it in the pass that writes y, the backward recomputes
 * the pre-activation from x wherever it needs the SiLU's derivative.
 * Statistics are accumulated in double. Every reduction is split into fixed blocks of GN_BLOCK spatial positions
 * per sample: each block writes per-channel partial sums, and the partials are then added in block order, so the
 * results are bit-identical whatever the OpenMP thread count. Accumulating per channel first keeps the inner
 * loops contiguous (and vectorizable) over the channels of one position. */
#include <math.h>
#include <stdlib.h>

#include "core/util.h"
#include "common/exp_cpu.h"
#include "groupnorm/groupnorm.h"
#include "common/cpu_op.h"

/* Spatial positions per partial-sum block (fixed: it defines the summation order). */
#define GN_BLOCK 256L

static void check_shape(const GroupNormShape *s) {
    if (s->groups < 1 || s->c % s->groups != 0)
        vx_fatal("groupnorm: %d channels do not split into %d groups", s->c, s->groups);
}

static long min_l(long a, long b) { return a < b ? a : b; }

void groupnorm_forward_cpu(const GroupNormShape *s, const float *x, const float *gamma, const float *beta, float *y,
                           float *mean, float *rstd) {
    check_shape(s);
    const int n = s->n, c = s->c, G = s->groups, cg = c / G;
    const long S = s->spatial, nb = (S + GN_BLOCK - 1) / GN_BLOCK;
    /* part [n][nb][2][c]: per-channel sum and sum of squares of each block */
    double *part = vx_calloc((size_t)n * nb * 2 * c, sizeof(double));
#pragma omp parallel for schedule(static)
    for (long t = 0; t < n * nb; t++) {
        const long b = t / nb, blk = t % nb;
        double *sum = part + t * 2 * c, *sq = sum + c;
        const long p1 = min_l(S, (blk + 1) * GN_BLOCK);
        for (long p = blk * GN_BLOCK; p < p1; p++) {
            const float *xr = x + (b * S + p) * c;
            for (int j = 0; j < c; j++) {
                const double v = xr[j];
                sum[j] += v;
                sq[j] += v * v;
            }
        }
    }
    /* per (sample, group): biased variance over spatial x channels-in-group */
    const double count = (double)S * cg;
    for (int b = 0; b < n; b++)
        for (int g = 0; g < G; g++) {
            double s1 = 0.0, s2 = 0.0;
            for (long blk = 0; blk < nb; blk++) {
                const double *sum = part + ((long)b * nb + blk) * 2 * c, *sq = sum + c;
                for (int j = g * cg; j < (g + 1) * cg; j++) {
                    s1 += sum[j];
                    s2 += sq[j];
                }
            }
            const double m = s1 / count;
            double var = s2 / count - m * m;
            if (var < 0.0) var = 0.0; /* rounding when the group is (nearly) constant */
            mean[b * G + g] = (float)m;
            rstd[b * G + g] = (float)(1.0 / sqrt(var + (double)s->eps));
        }
    free(part);

    /* y = (x - mean) * (rstd*gamma) + beta, with the group values expanded per channel so the inner loop is one
     * flat, vectorizable pass over the channels: cm, cs [n][c] */
    float *cm = vx_malloc(sizeof(float) * (size_t)n * c), *cs = vx_malloc(sizeof(float) * (size_t)n * c);
    for (int b = 0; b < n; b++)
        for (int j = 0; j < c; j++) {
            cm[b * c + j] = mean[b * G + j / cg];
            cs[b * c + j] = rstd[b * G + j / cg] * gamma[j];
        }
#pragma omp parallel for schedule(static)
    for (long r = 0; r < n * S; r++) {
        const long b = r / S;
        const float *xr = x + r * c, *m = cm + b * c, *sc = cs + b * c;
        float *yr = y + r * c;
        if (s->silu)
            for (int j = 0; j < c; j++) yr[j] = silu_vec((xr[j] - m[j]) * sc[j] + beta[j]);
        else
            for (int j = 0; j < c; j++) yr[j] = (xr[j] - m[j]) * sc[j] + beta[j];
    }
    free(cm);
    free(cs);
}

/* Fused with SiLU, the gradient of the normalised value at one row of c channels: dz * silu'(pre), the
 * pre-activation recomputed as the forward computed it, (x - mean) * (rstd*gamma) + beta. */
static inline void silu_row_grad(int c, const float *dz, const float *x, const float *m, const float *rg,
                                 const float *beta, float *g) {
    for (int j = 0; j < c; j++) g[j] = dz[j] * silu_grad_vec((x[j] - m[j]) * rg[j] + beta[j]);
}

void groupnorm_backward_cpu(const GroupNormShape *s, const float *dy, const float *x, const float *gamma,
                            const float *beta, const float *mean, const float *rstd, float *dx, float *dgamma,
                            float *dbeta, float beta_dx, float beta_dparam) {
    check_shape(s);
    const int n = s->n, c = s->c, G = s->groups, cg = c / G;
    const long S = s->spatial, nb = (S + GN_BLOCK - 1) / GN_BLOCK;
    /* per-channel copies of each sample's group mean, rstd and rstd*gamma: cm, cr, crg [n][c] */
    float *cm = vx_malloc(sizeof(float) * (size_t)n * c), *cr = vx_malloc(sizeof(float) * (size_t)n * c);
    float *crg = vx_malloc(sizeof(float) * (size_t)n * c);
    for (int b = 0; b < n; b++)
        for (int j = 0; j < c; j++) {
            cm[b * c + j] = mean[b * G + j / cg];
            cr[b * c + j] = rstd[b * G + j / cg];
            crg[b * c + j] = rstd[b * G + j / cg] * gamma[j];
        }
    /* Fused SiLU: when dx is overwritten (beta_dx 0), the first pass leaves the normalised value's gradient in dx and
     * the last pass reads it back from there, so the exp is evaluated once per element as in the unfused pair;
     * when dx accumulates it is recomputed (on the CPU the exp, not the memory traffic, is the cost). */
    float *stash = s->silu && beta_dx == 0.0f ? dx : NULL;
    /* part [n][nb][2][c]: per-channel sum of dy and of dy*xhat over each block (dy: the normalised value's) */
    double *part = vx_calloc((size_t)n * nb * 2 * c, sizeof(double));
#pragma omp parallel
    {
        float *g = s->silu && !stash ? vx_malloc(sizeof(float) * (size_t)c) : NULL;
#pragma omp for schedule(static)
        for (long t = 0; t < n * nb; t++) {
            const long b = t / nb, blk = t % nb;
            double *sdy = part + t * 2 * c, *sdyx = sdy + c;
            const float *m = cm + b * c, *rs = cr + b * c, *rg = crg + b * c;
            const long p1 = min_l(S, (blk + 1) * GN_BLOCK);
            for (long p = blk * GN_BLOCK; p < p1; p++) {
                const float *xr = x + (b * S + p) * c, *dyr = dy + (b * S + p) * c;
                const float *gr = dyr;
                if (s->silu) {
                    float *row = stash ? stash + (b * S + p) * c : g;
                    silu_row_grad(c, dyr, xr, m, rg, beta, row);
                    gr = row;
                }
                for (int j = 0; j < c; j++) {
                    const double d = gr[j];
                    sdy[j] += d;
                    sdyx[j] += d * (double)((xr[j] - m[j]) * rs[j]);
                }
            }
        }
        free(g);
    }
    /* per-channel totals over the blocks of each sample: [n][2][c] */
    double *tot = vx_calloc((size_t)n * 2 * c, sizeof(double));
    for (int b = 0; b < n; b++)
        for (long blk = 0; blk < nb; blk++) {
            const double *src = part + ((long)b * nb + blk) * 2 * c;
            for (int j = 0; j < 2 * c; j++) tot[(long)b * 2 * c + j] += src[j];
        }
    free(part);

    /* dgamma = sum dy*xhat, dbeta = sum dy over samples and positions */
    for (int j = 0; j < c; j++) {
        double sb = 0.0, sg = 0.0;
        for (int b = 0; b < n; b++) {
            sb += tot[(long)b * 2 * c + j];
            sg += tot[(long)b * 2 * c + c + j];
        }
        if (beta_dparam != 0.0f) {
            dgamma[j] = beta_dparam * dgamma[j] + (float)sg;
            dbeta[j] = beta_dparam * dbeta[j] + (float)sb;
        } else {
            dgamma[j] = (float)sg;
            dbeta[j] = (float)sb;
        }
    }

    /* dx = rstd*(dy*gamma - mean(dy*gamma) - xhat*mean(dy*gamma*xhat)) over each (sample, group). With
     * a1 = rstd*mean(dy*gamma) and a2 = rstd^2*mean(dy*gamma*xhat) per group, expanded per channel into
     * ca1, ca2 [n][c]:  dx = rstd*gamma*dy - a1 - a2*(x - mean). */
    float *ca1 = vx_malloc(sizeof(float) * (size_t)n * c), *ca2 = vx_malloc(sizeof(float) * (size_t)n * c);
    const double count = (double)S * cg;
    for (int b = 0; b < n; b++)
        for (int g = 0; g < G; g++) {
            double s1 = 0.0, s2 = 0.0;
            for (int j = g * cg; j < (g + 1) * cg; j++) {
                s1 += (double)gamma[j] * tot[(long)b * 2 * c + j];
                s2 += (double)gamma[j] * tot[(long)b * 2 * c + c + j];
            }
            const double rs = rstd[b * G + g];
            for (int j = g * cg; j < (g + 1) * cg; j++) {
                ca1[b * c + j] = (float)(rs * s1 / count);
                ca2[b * c + j] = (float)(rs * rs * s2 / count);
            }
        }
    free(tot);

#pragma omp parallel
    {
        float *g = s->silu && !stash ? vx_malloc(sizeof(float) * (size_t)c) : NULL;
#pragma omp for schedule(static)
        for (long r = 0; r < n * S; r++) {
            const long b = r / S;
            const float *xr = x + r * c, *dyr = dy + r * c;
            const float *m = cm + b * c, *rg = crg + b * c, *a1 = ca1 + b * c, *a2 = ca2 + b * c;
            float *dxr = dx + r * c;
            if (stash) dyr = dxr; /* the first pass's, overwritten element by element below */
            else if (g) {         /* the SiLU's gradient recomputed into g (unfused, dy is used as it is) */
                silu_row_grad(c, dyr, xr, m, rg, beta, g);
                dyr = g;
            }
            if (beta_dx != 0.0f)
                for (int j = 0; j < c; j++)
                    dxr[j] = beta_dx * dxr[j] + (rg[j] * dyr[j] - a1[j] - a2[j] * (xr[j] - m[j]));
            else
                for (int j = 0; j < c; j++) dxr[j] = rg[j] * dyr[j] - a1[j] - a2[j] * (xr[j] - m[j]);
        }
        free(g);
    }
    free(cm);
    free(cr);
    free(crg);
    free(ca1);
    free(ca2);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(const GroupNormShape *s, const void *x, const float *gamma, const float *beta, void *y,
                        float *mean, float *rstd) {
    cpu_need_f32(s->dtype, "groupnorm_forward");
    groupnorm_forward_cpu(s, x, gamma, beta, y, mean, rstd);
}
static void cpu_backward(const GroupNormShape *s, const void *dy, const void *x, const float *gamma, const float *beta,
                         const float *mean, const float *rstd, void *dx, float *dgamma, float *dbeta, float beta_dx,
                         float beta_dparam) {
    cpu_need_f32(s->dtype, "groupnorm_backward");
    groupnorm_backward_cpu(s, dy, x, gamma, beta, mean, rstd, dx, dgamma, dbeta, beta_dx, beta_dparam);
}
const GroupNormOps groupnorm_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

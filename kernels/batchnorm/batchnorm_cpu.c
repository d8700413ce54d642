/* batchnorm_cpu.c: the float32 CPU BatchNorm of batchnorm.h, in SyncBatchNorm's pieces: the per-channel sums of the
 * training statistics (stats), their finalisation with the running statistics' update (finalize), the normalisation
 * (forward), the gradient sums (backward_reduce) and the input gradient (backward).
 * Every sum is over the n*spatial rows of [rows][c] and runs in double over fixed blocks of BN_BLOCK rows: each
 * block writes per-channel partial sums (contiguous loops over the channels of a row), and the partials are added in
 * block order, so the bits do not depend on the OpenMP thread count. The elementwise passes use per-channel float
 * coefficients formed once: forward y = (x - mean) * (invstd*gamma) + beta; backward
 * dx = (invstd*gamma) * (dy - sum_dy/count - xhat * sum_dy_xhat/count), xhat = (x - mean) * invstd, as
 * batchnorm_cuda.cu forms them. With the fused ReLU (shape.relu) y is clamped as relu_cpu.c clamps it and dy is taken
 * where batchnorm_pre(x) > 0 in both backward passes, recomputed from x (batchnorm.h: y > 0, without reading y). Rows
 * of x and dx are shape.ldx apart (a channel prefix: batchnorm.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "batchnorm/batchnorm.h"
#include "common/cpu_op.h"
#include "core/util.h"

#define BN_BLOCK 256L /* rows per partial-sum block (fixed: it defines the summation order) */

static void check(const BatchNormShape *s) {
    if (s->n < 0 || s->spatial < 1 || s->c < 1 || batchnorm_ldx(s) < s->c)
        vx_fatal("batchnorm: invalid shape n=%d spatial=%ld c=%d ldx=%ld", s->n, s->spatial, s->c, s->ldx);
}

/* One block's partial sums, rows [r0, r1), into a[c] (and q[c]): the mode is decided once per block, each mode a
 * loop of its own. Why: with the mode tested per row, adding the fused ReLU's case made the plain passes run 7-19%
 * more instructions per call (ci/regress's callgrind counts, resnet-tiny's shapes). */
static void block_sums(int mode, int c, long ldx, long r0, long r1, const float *x, const float *dy, const float *sc,
                       const float *beta, const double *center, const float *mean, const float *invstd, double *a,
                       double *q) {
    if (mode == 0)
        for (long r = r0; r < r1; r++) {
            const float *xr = x + r * ldx;
            for (int j = 0; j < c; j++) a[j] += xr[j];
        }
    else if (mode == 1)
        for (long r = r0; r < r1; r++) {
            const float *xr = x + r * ldx;
            for (int j = 0; j < c; j++) {
                const double d = (double)xr[j] - center[j];
                a[j] += d * d;
            }
        }
    else if (sc) /* the fused ReLU's mask: its backward's dy where y > 0, else 0 (relu_cpu.c), from x (batchnorm.h) */
        for (long r = r0; r < r1; r++) {
            const float *xr = x + r * ldx, *dr = dy + r * c;
            for (int j = 0; j < c; j++) {
                const double g = batchnorm_pre(xr[j], mean[j], sc[j], beta[j]) > 0.0f ? dr[j] : 0.0f;
                a[j] += g;
                q[j] += g * (double)((xr[j] - mean[j]) * invstd[j]);
            }
        }
    else
        for (long r = r0; r < r1; r++) {
            const float *xr = x + r * ldx, *dr = dy + r * c;
            for (int j = 0; j < c; j++) {
                const double g = dr[j];
                a[j] += g;
                q[j] += g * (double)((xr[j] - mean[j]) * invstd[j]);
            }
        }
}

/* Per-channel sums over the rows of x (and dy): MODE 0 sum x; 1 sum (x - center)^2; 2 sum dy and sum dy*xhat (dy
 * taken where batchnorm_pre(x) > 0 when sc = invstd*gamma is given: the fused ReLU). out0[c] (and out1[c] for
 * mode 2) as float. */
static void reduce_rows(const BatchNormShape *s, int mode, const float *x, const float *dy, const float *sc,
                        const float *beta, const double *center, const float *mean, const float *invstd, float *out0,
                        float *out1) {
    const int c = s->c, two = mode == 2;
    const long rows = (long)s->n * s->spatial, nb = (rows + BN_BLOCK - 1) / BN_BLOCK;
    double *part = vx_calloc((size_t)(nb > 0 ? nb : 1) * (two + 1) * c, sizeof(double)); /* [nb][1 or 2][c] */
#pragma omp parallel for schedule(static)
    for (long blk = 0; blk < nb; blk++) {
        double *a = part + blk * (two + 1) * c;
        const long r1 = (blk + 1) * BN_BLOCK < rows ? (blk + 1) * BN_BLOCK : rows;
        block_sums(mode, c, batchnorm_ldx(s), blk * BN_BLOCK, r1, x, dy, sc, beta, center, mean, invstd, a, a + c);
    }
    for (int j = 0; j < c; j++) {
        double a = 0.0, q = 0.0;
        for (long blk = 0; blk < nb; blk++) {
            a += part[blk * (two + 1) * c + j];
            if (two) q += part[blk * (two + 1) * c + c + j];
        }
        out0[j] = (float)a;
        if (two) out1[j] = (float)q;
    }
    free(part);
}

static void bn_stats_cpu(const BatchNormShape *s, const float *x, const float *center, double count, float *out) {
    check(s);
    if (!center) {
        reduce_rows(s, 0, x, NULL, NULL, NULL, NULL, NULL, NULL, out, NULL);
        return;
    }
    double *m = vx_malloc(sizeof(double) * (size_t)s->c); /* the global mean, in double */
    for (int j = 0; j < s->c; j++) m[j] = (double)center[j] / count;
    reduce_rows(s, 1, x, NULL, NULL, NULL, m, NULL, NULL, out, NULL);
    free(m);
}

static void bn_finalize_cpu(int c, double count, float eps, float momentum, int train, const float *sum,
                            const float *sq, float *mean, float *invstd, float *running_mean, float *running_var) {
    for (int j = 0; j < c; j++) {
        if (!train) {
            mean[j] = running_mean[j];
            invstd[j] = (float)(1.0 / sqrt((double)running_var[j] + (double)eps));
            continue;
        }
        const double m = (double)sum[j] / count, var = (double)sq[j] / count;
        /* a single value per channel has no unbiased variance (PyTorch refuses such a batch): its biased one, 0 */
        const double unbiased = count > 1.0 ? (double)sq[j] / (count - 1.0) : var;
        mean[j] = (float)m;
        invstd[j] = (float)(1.0 / sqrt(var + (double)eps));
        running_mean[j] = (float)((double)running_mean[j] + (double)momentum * (m - (double)running_mean[j]));
        running_var[j] = (float)((double)running_var[j] + (double)momentum * (unbiased - (double)running_var[j]));
    }
}

static void bn_forward_cpu(const BatchNormShape *s, const float *x, const float *mean, const float *invstd,
                           const float *gamma, const float *beta, float *y) {
    check(s);
    const int c = s->c;
    const long ldx = batchnorm_ldx(s);
    float *sc = vx_malloc(sizeof(float) * (size_t)c);
    for (int j = 0; j < c; j++) sc[j] = invstd[j] * gamma[j];
    const long rows = (long)s->n * s->spatial;
    if (s->relu) { /* a loop each, as block_sums says why: a test per row cost the plain pass 19% more instructions */
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++) {
            const float *xr = x + r * ldx;
            float *yr = y + r * c;
            for (int j = 0; j < c; j++) {
                const float v = batchnorm_pre(xr[j], mean[j], sc[j], beta[j]);
                yr[j] = v < 0.0f ? 0.0f : v; /* relu_cpu.c's forward */
            }
        }
    } else {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++) {
            const float *xr = x + r * ldx;
            float *yr = y + r * c;
            for (int j = 0; j < c; j++) yr[j] = batchnorm_pre(xr[j], mean[j], sc[j], beta[j]);
        }
    }
    free(sc);
}

static void bn_backward_reduce_cpu(const BatchNormShape *s, const float *dy, const float *x, const float *mean,
                                   const float *invstd, const float *gamma, const float *beta, float *sum_dy,
                                   float *sum_dy_xhat) {
    check(s);
    batchnorm_need_affine(s, gamma, beta);
    float *sc = NULL;
    if (s->relu) { /* the forward's per-channel scale, formed as it forms it */
        sc = vx_malloc(sizeof(float) * (size_t)s->c);
        for (int j = 0; j < s->c; j++) sc[j] = invstd[j] * gamma[j];
    }
    reduce_rows(s, 2, x, dy, sc, beta, NULL, mean, invstd, sum_dy, sum_dy_xhat);
    free(sc);
}

static void bn_backward_cpu(const BatchNormShape *s, const float *dy, const float *x, const float *mean,
                            const float *invstd, const float *gamma, const float *beta, const float *sum_dy,
                            const float *sum_dy_xhat, double count, float *dx, float beta_dx) {
    check(s);
    batchnorm_need_affine(s, gamma, beta);
    const int c = s->c;
    const long ldx = batchnorm_ldx(s);
    float *k = vx_malloc(sizeof(float) * 3 * (size_t)c), *mdy = k + c, *mdyx = k + 2 * c;
    for (int j = 0; j < c; j++) {
        k[j] = invstd[j] * gamma[j];
        mdy[j] = (float)((double)sum_dy[j] / count);
        mdyx[j] = (float)((double)sum_dy_xhat[j] / count);
    }
    const long rows = (long)s->n * s->spatial;
    if (s->relu) { /* the fused ReLU: dy where bn(x) > 0, k being the forward's scale (a loop each, as there) */
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++) {
            const float *xr = x + r * ldx, *dr = dy + r * c;
            float *o = dx + r * ldx;
            for (int j = 0; j < c; j++) {
                const float g = batchnorm_pre(xr[j], mean[j], k[j], beta[j]) > 0.0f ? dr[j] : 0.0f;
                const float xhat = (xr[j] - mean[j]) * invstd[j];
                const float v = k[j] * (g - mdy[j] - xhat * mdyx[j]);
                o[j] = beta_dx != 0.0f ? beta_dx * o[j] + v : v;
            }
        }
    } else {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++) {
            const float *xr = x + r * ldx, *dr = dy + r * c;
            float *o = dx + r * ldx;
            for (int j = 0; j < c; j++) {
                const float xhat = (xr[j] - mean[j]) * invstd[j];
                const float v = k[j] * (dr[j] - mdy[j] - xhat * mdyx[j]);
                o[j] = beta_dx != 0.0f ? beta_dx * o[j] + v : v;
            }
        }
    }
    free(k);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_stats(const BatchNormShape *s, const void *x, const float *center, double count, float *out) {
    cpu_need_f32(s->dtype, "batchnorm_stats");
    bn_stats_cpu(s, x, center, count, out);
}
static void cpu_forward(const BatchNormShape *s, const void *x, const float *mean, const float *invstd,
                        const float *gamma, const float *beta, void *y) {
    cpu_need_f32(s->dtype, "batchnorm_forward");
    bn_forward_cpu(s, x, mean, invstd, gamma, beta, y);
}
static void cpu_backward_reduce(const BatchNormShape *s, const void *dy, const void *x, const float *mean,
                                const float *invstd, const float *gamma, const float *beta, float *sum_dy,
                                float *sum_dy_xhat) {
    cpu_need_f32(s->dtype, "batchnorm_backward_reduce");
    bn_backward_reduce_cpu(s, dy, x, mean, invstd, gamma, beta, sum_dy, sum_dy_xhat);
}
static void cpu_backward(const BatchNormShape *s, const void *dy, const void *x, const float *mean,
                         const float *invstd, const float *gamma, const float *beta, const float *sum_dy,
                         const float *sum_dy_xhat, double count, void *dx, float beta_dx) {
    cpu_need_f32(s->dtype, "batchnorm_backward");
    bn_backward_cpu(s, dy, x, mean, invstd, gamma, beta, sum_dy, sum_dy_xhat, count, dx, beta_dx);
}
const BatchNormOps batchnorm_ops_cpu = {{op_supports_f32}, cpu_stats, bn_finalize_cpu, cpu_forward, cpu_backward_reduce,
                                        cpu_backward};

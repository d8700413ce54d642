/* optim_cpu.c: float32 CPU optimizer ops (optim.h): AdamW over the flat parameter buffer, and the sum of squares
 * used for gradient-norm clipping. AdamW follows torch.optim.AdamW's single-tensor path operation by operation
 * (decay first, lerp for the first moment, scalar bias corrections in double: adamw_consts in optim.h) so the two
 * agree to float rounding.
 * sumsq reduces in double over fixed chunks added in order: the same bits whatever the thread count. */
#include <math.h>
#include <stdlib.h>

#include "core/util.h"
#include "optim/optim.h"

#define SUMSQ_CHUNK 16384L
/* independent accumulators per chunk: a fixed order that vectorises. 32 doubles are four AVX-512 registers whose adds
 * overlap; with 8 (one register) each add waited on the last: 5.4 ms for 20.8 M gradients, 4.2 ms with 16-64 lanes
 * (2-core AVX-512 Xeon; memory bandwidth is the rest) */
#define SUMSQ_LANES 32
#define OPTIM_PARALLEL_MIN 16384L

void adamw_cpu(long count, float *p, const float *g, float *m, float *v, const AdamWConsts *c) {
    /* p, g, m, v [count] */
    const float decay = c->decay, neg_step = c->neg_step, bc2_sqrt = c->bc2_sqrt, w1 = c->w1, w2 = c->w2, b2 = c->b2,
                eps = c->eps, gs = c->gs;
#pragma omp parallel for simd schedule(static) if (count >= OPTIM_PARALLEL_MIN)
    for (long i = 0; i < count; i++) {
        const float gi = g[i] * gs;
        const float pi = p[i] * decay; /* decoupled weight decay, before the Adam step */
        /* m = b1*m + (1-b1)*g written as torch's lerp(m, g, 1-b1) */
        const float mi = w1 < 0.5f ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0f - w1);
        const float vi = v[i] * b2 + w2 * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi + neg_step * mi / denom;
    }
}

static double sumsq_double(long count, const float *x) {
    if (count <= 0) return 0.0;
    const long nb = (count + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double *part = vx_malloc(sizeof(double) * (size_t)nb);
#pragma omp parallel for schedule(static)
    for (long blk = 0; blk < nb; blk++) {
        const long i0 = blk * SUMSQ_CHUNK, i1 = i0 + SUMSQ_CHUNK < count ? i0 + SUMSQ_CHUNK : count;
        double acc[SUMSQ_LANES] = {0};
        long i = i0;
        for (; i + SUMSQ_LANES <= i1; i += SUMSQ_LANES)
            for (int l = 0; l < SUMSQ_LANES; l++) acc[l] += (double)x[i + l] * x[i + l];
        for (int l = 0; i < i1; i++, l++) acc[l] += (double)x[i] * x[i];
        double s = 0.0;
        for (int l = 0; l < SUMSQ_LANES; l++) s += acc[l];
        part[blk] = s;
    }
    double total = 0.0;
    for (long blk = 0; blk < nb; blk++) total += part[blk];
    free(part);
    return total;
}

/* x [count]; out [1] = sum(x^2) */
void sumsq_cpu(long count, const float *x, float *out) { out[0] = (float)sumsq_double(count, x); }
void sumsq_part_cpu(long count, const float *x, double *out) { out[0] = sumsq_double(count, x); }
void sumsq_join_cpu(int n, const double *parts, float *out) {
    double total = 0.0;
    for (int i = 0; i < n; i++) total += parts[i];
    out[0] = (float)total;
}

/* ---- the CPU backend's table (ops.def): float32, and no low-precision parameter copy ------------------------ */

static void cpu_adamw(long count, float *p, const float *g, float *m, float *v, const OptimState *st, DType lp_dt,
                      void *p_lp) {
    if (p_lp) vx_fatal("the CPU backend keeps no low-precision parameter copy (asked for %s)", dtype_name(lp_dt));
    if (!st->skip) adamw_cpu(count, p, g, m, v, &st->c);
}
static void cpu_prepare(const OptimConfig *cfg, const float *sumsq, OptimState *st) {
    optim_prepare_step(cfg, sumsq[0], st);
}
const OptimOps optim_ops_cpu = {{op_supports_f32}, cpu_adamw, sumsq_cpu, cpu_prepare, sumsq_part_cpu, sumsq_join_cpu};

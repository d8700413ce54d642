/* optim_cuda.cu: the optimizer ops of optim.h on the GPU, over the flat parameter buffer.
 *   p, g, m, v [count]   float4 when count % 4 == 0 and all four pointers are 16-byte aligned
 *   out [1]              device float
 * adamw follows adamw_cpu operation by operation (decay first, lerp for the first moment, the scalar constants of
 * optim.h's adamw_consts, computed in double by optim_prepare), so the two agree to float rounding (the GPU may
 * contract a multiply and an add into one FMA). sumsq reduces sum(x^2) in double in a fixed order: pass 1 has
 * vx_red_blocks(count) blocks writing partial sums to the scratch, pass 2 adds them in order. */
#include <math.h>

#include "common/cuda_check.h"
#include "optim/optim.h"

/* AdamW reads its constants and the skip flag from the device-resident state (optim_prepare wrote them), so a
 * captured step replays with each step's own values; p_lp (LP = true) receives the updated parameters rounded to
 * the low-precision type, the compute copy of mixed precision, in the same pass. */
template <int V, typename L, bool LP>
__global__ void adamw_kernel(size_t nvec, float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                             float *__restrict__ v, const OptimState *__restrict__ st, L *__restrict__ p_lp) {
    if (st->skip) return; /* a non-finite gradient: nothing changes (torch.amp.GradScaler skips optimizer.step) */
    const AdamWConsts c = st->c;
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float pp[V], gg[V], mm[V], vv[V];
        vx_load<V>(p, i, pp);
        vx_load<V>(g, i, gg);
        vx_load<V>(m, i, mm);
        vx_load<V>(v, i, vv);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float gi = gg[k] * c.gs;
            const float pi = pp[k] * c.decay; /* decoupled weight decay, before the Adam step */
            /* m = b1*m + (1-b1)*g as torch's lerp(m, g, 1-b1) */
            const float mi = c.w1 < 0.5f ? mm[k] + c.w1 * (gi - mm[k]) : gi - (gi - mm[k]) * (1.0f - c.w1);
            const float vi = vv[k] * c.b2 + c.w2 * gi * gi;
            const float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
            mm[k] = mi;
            vv[k] = vi;
            pp[k] = pi + c.neg_step * mi / denom;
        }
        vx_store<V>(p, i, pp);
        vx_store<V>(m, i, mm);
        vx_store<V>(v, i, vv);
        if constexpr (LP) vx_store<V>(p_lp, i, pp);
    }
}

template <typename L, bool LP>
static void launch_adamw(size_t n, float *p, const float *g, float *m, float *v, const OptimState *st, void *p_lp) {
    cudaStream_t s = vx_cuda_stream();
    L *lp = (L *)p_lp;
    if (vx_vec4_ok(n, p, g, m, v) && (!LP || vx_aligned16(p_lp)))
        adamw_kernel<4, L, LP><<<vx_ew_blocks(n / 4), VX_THREADS, 0, s>>>(n / 4, p, g, m, v, st, lp);
    else adamw_kernel<1, L, LP><<<vx_ew_blocks(n), VX_THREADS, 0, s>>>(n, p, g, m, v, st, lp);
}

extern "C" void adamw_cuda(long count, float *p, const float *g, float *m, float *v, const OptimState *st, DType lp_dt,
                           void *p_lp) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    if (!p_lp) launch_adamw<float, false>(n, p, g, m, v, st, NULL);
    else VX_DTYPE_SWITCH(lp_dt, L, launch_adamw<L, true>(n, p, g, m, v, st, p_lp));
    LAUNCH_CHECK("adamw_kernel");
}

/* one thread: optim.h's optim_prepare_step, the same code the CPU backend runs */
__global__ void optim_prepare_kernel(OptimConfig cfg, const float *__restrict__ sumsq, OptimState *__restrict__ st) {
    optim_prepare_step(&cfg, sumsq[0], st);
}

extern "C" void optim_prepare_cuda(const OptimConfig *cfg, const float *sumsq, OptimState *st) {
    optim_prepare_kernel<<<1, 1, 0, vx_cuda_stream()>>>(*cfg, sumsq, st);
    LAUNCH_CHECK("optim_prepare_kernel");
}

template <int V> __global__ void sumsq_kernel(size_t nvec, const float *__restrict__ x, double *__restrict__ partials) {
    __shared__ double sh[VX_THREADS / 32];
    double acc = 0.0;
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float u[V];
        vx_load<V>(x, i, u);
#pragma unroll
        for (int k = 0; k < V; k++) acc += (double)u[k] * u[k];
    }
    acc = vx_block_sum(acc, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

extern "C" void sumsq_cuda(long count, const float *x, float *out) {
    if (count <= 0) {
        CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), vx_cuda_stream())); /* 0.0f, as sumsq_cpu */
        return;
    }
    const size_t n = (size_t)count;
    double *partials = (double *)vx_cuda_scratch();
    const int blocks = vx_red_blocks(n);
    if (vx_vec4_ok(n, x)) sumsq_kernel<4><<<blocks, VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, x, partials);
    else sumsq_kernel<1><<<blocks, VX_THREADS, 0, vx_cuda_stream()>>>(n, x, partials);
    LAUNCH_CHECK("sumsq_kernel");
    vx_reduce_finalize(partials, blocks, 1.0, out);
}

/* sharded: the shard's partials (pass 1 above) added in double as the second pass does, but written unrounded */
__global__ void sum_partials_kernel(const double *__restrict__ partials, int count, double *__restrict__ out) {
    __shared__ double sh[VX_THREADS / 32];
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += VX_THREADS) s += partials[i];
    s = vx_block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = s;
}

extern "C" void sumsq_part_cuda(long count, const float *x, double *out) {
    if (count <= 0) {
        CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), vx_cuda_stream())); /* +0.0 */
        return;
    }
    const size_t n = (size_t)count;
    double *partials = (double *)vx_cuda_scratch();
    const int blocks = vx_red_blocks(n);
    if (vx_vec4_ok(n, x)) sumsq_kernel<4><<<blocks, VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, x, partials);
    else sumsq_kernel<1><<<blocks, VX_THREADS, 0, vx_cuda_stream()>>>(n, x, partials);
    LAUNCH_CHECK("sumsq_kernel");
    sum_partials_kernel<<<1, VX_THREADS, 0, vx_cuda_stream()>>>(partials, blocks, out);
    LAUNCH_CHECK("sum_partials_kernel");
}

/* one thread, in order: the same sum on every rank from the same gathered parts */
__global__ void sumsq_join_kernel(int n, const double *__restrict__ parts, float *__restrict__ out) {
    double total = 0.0;
    for (int i = 0; i < n; i++) total += parts[i];
    out[0] = (float)total;
}

extern "C" void sumsq_join_cuda(int n, const double *parts, float *out) {
    sumsq_join_kernel<<<1, 1, 0, vx_cuda_stream()>>>(n, parts, out);
    LAUNCH_CHECK("sumsq_join_kernel");
}

/* ---- the CUDA backend's table (ops.def): adamw writes a low-precision copy of any type; the rest is float32 --- */

static int cuda_supports(int fn, DType dt) { return fn == OPTIM_ADAMW ? op_supports_all_types(fn, dt) : dt == DT_F32; }
extern "C" const OptimOps optim_ops_cuda = {{cuda_supports}, adamw_cuda,      sumsq_cuda,
                                            optim_prepare_cuda, sumsq_part_cuda, sumsq_join_cuda};

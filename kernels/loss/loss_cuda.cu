/* loss_cuda.cu: the reconstruction loss of loss.h on the GPU, forward and gradient in one pass.
 *   pred, dpred [count]           flat, storage type T (dtype_cuda.cuh); target [count] float32 (the model's input);
 *                                 vectors of 4 when count % 4 == 0 and the pointers are 16-byte aligned
 *   loss_out [1]                  device float: mean of |pred-target| (L1) or (pred-target)^2 (MSE)
 * The mean is reduced in double in a fixed order (deterministic run to run): pass 1 has vx_red_blocks(count)
 * blocks, a function of the count only, each writing its sum to the backend's scratch; pass 2 adds those in a
 * fixed order and writes (float)(sum / count). dpred (may be NULL) is overwritten with grad_scale x loss_scale[0]
 * times the derivative of the mean: sign(d)/count (0 at d == 0, as torch.sign) or 2*d/count. The multipliers are
 * formed in each thread from loss_scale[0], read when the kernel runs (a captured graph follows the scale). */
#include "common/cuda_check.h"
#include "loss/loss.h"

template <typename T, int V, bool L1, bool GRAD>
__global__ void recon_loss_kernel(size_t nvec, const T *__restrict__ pred, const float *__restrict__ target,
                                  T *__restrict__ dpred, float grad_scale, const float *__restrict__ loss_scale,
                                  double count, double *__restrict__ partials) {
    __shared__ double sh[VX_THREADS / 32];
    /* the CPU's constants, computed the same way (loss_scale is a power of two: the product is exact) */
    const float gs = grad_scale * (loss_scale ? loss_scale[0] : 1.0f);
    const float g1 = (float)((double)gs / count), g2 = (float)(2.0 * (double)gs / count);
    double acc = 0.0;
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float p[V], t[V], g[V];
        vx_load<V>(pred, i, p);
        vx_load<V>(target, i, t);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float d = p[k] - t[k];
            if constexpr (L1) {
                acc += (double)fabsf(d);
                g[k] = g1 * (float)((d > 0.0f) - (d < 0.0f));
            } else {
                acc += (double)d * d;
                g[k] = g2 * d;
            }
        }
        if constexpr (GRAD) vx_store<V>(dpred, i, g);
    }
    acc = vx_block_sum(acc, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <typename T, int V, bool L1>
static void launch_loss(int blocks, size_t nvec, const T *pred, const float *target, T *dpred, float grad_scale,
                        const float *loss_scale, double count, double *partials) {
    cudaStream_t st = vx_cuda_stream();
    if (dpred)
        recon_loss_kernel<T, V, L1, true><<<blocks, VX_THREADS, 0, st>>>(nvec, pred, target, dpred, grad_scale,
                                                                         loss_scale, count, partials);
    else
        recon_loss_kernel<T, V, L1, false><<<blocks, VX_THREADS, 0, st>>>(nvec, pred, target, dpred, grad_scale,
                                                                          loss_scale, count, partials);
    LAUNCH_CHECK("recon_loss_kernel");
}

extern "C" void recon_loss_cuda(ReconLoss kind, DType dt, long count, const void *pred, const float *target,
                                float *loss_out, void *dpred, float grad_scale, const float *loss_scale) {
    if (count <= 0) {
        CUDA_CHECK(cudaMemsetAsync(loss_out, 0, sizeof(float), vx_cuda_stream())); /* 0.0f, as recon_loss_cpu */
        return;
    }
    const size_t n = (size_t)count;
    double *partials = (double *)vx_cuda_scratch(); /* [blocks] */
    const bool vec = vx_vec4_ok(n, pred, target, dpred);
    const size_t nvec = vec ? n / 4 : n;
    const int blocks = vx_red_blocks(n); /* from the element count, whichever path */
#define LOSS_ARGS blocks, nvec, p, target, g, grad_scale, loss_scale, (double)count, partials
    VX_DTYPE_SWITCH(dt, T, {
        const T *p = (const T *)pred;
        T *g = (T *)dpred;
        if (kind == LOSS_L1) {
            if (vec) launch_loss<T, 4, true>(LOSS_ARGS);
            else launch_loss<T, 1, true>(LOSS_ARGS);
        } else {
            if (vec) launch_loss<T, 4, false>(LOSS_ARGS);
            else launch_loss<T, 1, false>(LOSS_ARGS);
        }
    });
#undef LOSS_ARGS
    vx_reduce_finalize(partials, blocks, (double)count, loss_out);
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const LossOps loss_ops_cuda = {{op_supports_all_types}, recon_loss_cuda};

/* loss_cuda.cu: the reconstruction loss of loss.h on the GPU, forward and gradient in one pass.
 *   pred, target, dpred [count]   flat; float4 when count % 4 == 0 and the pointers are 16-byte aligned
 *   loss_out [1]                  device float: mean of |pred-target| (L1) or (pred-target)^2 (MSE)
 * The mean is reduced in double in a fixed order (deterministic run to run): pass 1 has vx_red_blocks(count)
 * blocks, a function of the count only, each writing its sum to the backend's scratch; pass 2 adds those in a
 * fixed order and writes (float)(sum / count). dpred (may be NULL) is overwritten with grad_scale times the
 * derivative of the mean: sign(d)/count (0 at d == 0, as torch.sign) or 2*d/count. */
#include "cuda_check.h"
#include "loss.h"

template <int V, bool L1, bool GRAD>
__global__ void recon_loss_kernel(size_t nvec, const float *__restrict__ pred, const float *__restrict__ target,
                                  float *__restrict__ dpred, float g1, float g2, double *__restrict__ partials) {
    __shared__ double sh[VX_THREADS / 32];
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

template <int V, bool L1>
static void launch_loss(int blocks, size_t nvec, const float *pred, const float *target, float *dpred, float g1,
                        float g2, double *partials) {
    if (dpred)
        recon_loss_kernel<V, L1, true><<<blocks, VX_THREADS, 0, vx_cuda_stream()>>>(nvec, pred, target, dpred, g1, g2,
                                                                                    partials);
    else
        recon_loss_kernel<V, L1, false><<<blocks, VX_THREADS, 0, vx_cuda_stream()>>>(nvec, pred, target, dpred, g1,
                                                                                     g2, partials);
    LAUNCH_CHECK("recon_loss_kernel");
}

extern "C" void recon_loss_cuda(ReconLoss kind, long count, const float *pred, const float *target, float *loss_out,
                                float *dpred, float grad_scale) {
    if (count <= 0) {
        CUDA_CHECK(cudaMemsetAsync(loss_out, 0, sizeof(float), vx_cuda_stream())); /* 0.0f, as recon_loss_cpu */
        return;
    }
    const size_t n = (size_t)count;
    /* the CPU's constants, computed the same way */
    const float g1 = (float)((double)grad_scale / (double)count);
    const float g2 = (float)(2.0 * (double)grad_scale / (double)count);
    double *partials = (double *)vx_cuda_scratch(); /* [blocks] */
    const bool vec = vx_vec4_ok(n, pred, target, dpred);
    const size_t nvec = vec ? n / 4 : n;
    const int blocks = vx_red_blocks(n); /* from the element count, whichever path */
    if (kind == LOSS_L1) {
        if (vec) launch_loss<4, true>(blocks, nvec, pred, target, dpred, g1, g2, partials);
        else launch_loss<1, true>(blocks, nvec, pred, target, dpred, g1, g2, partials);
    } else {
        if (vec) launch_loss<4, false>(blocks, nvec, pred, target, dpred, g1, g2, partials);
        else launch_loss<1, false>(blocks, nvec, pred, target, dpred, g1, g2, partials);
    }
    vx_reduce_finalize(partials, blocks, (double)count, loss_out);
}

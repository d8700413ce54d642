/* ema_cuda.cu: the weights' moving average (ema.h) on the GPU, one grid-stride elementwise kernel reading decay and
 * skip from device memory when it runs (a captured graph follows both). Float32. */
#include "common/cuda_check.h"
#include "ema/ema.h"

__global__ void ema_kernel(size_t count, const float *__restrict__ decay, const int32_t *__restrict__ skip,
                           const float *__restrict__ param, float *__restrict__ ema) {
    if (skip && skip[0]) return;
    const float w = 1.0f - decay[0];
    for (size_t i = vx_global_thread(); i < count; i += vx_grid_threads()) ema[i] += w * (param[i] - ema[i]);
}

static void ema_update_cuda(long count, const float *decay, const int32_t *skip, const float *param, float *ema) {
    if (count < 0) vx_fatal("ema: a negative count %ld", count);
    if (!count) return;
    ema_kernel<<<vx_ew_blocks((size_t)count), VX_THREADS, 0, vx_cuda_stream()>>>((size_t)count, decay, skip, param, ema);
    LAUNCH_CHECK("ema_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const EmaOps ema_ops_cuda = {{op_supports_f32}, ema_update_cuda};

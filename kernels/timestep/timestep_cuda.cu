/* timestep_cuda.cu: the sinusoidal timestep embedding (timestep.h) on the GPU, one thread per element, in double
 * (timestep_math.h), stored as T. */
#include "common/cuda_check.h"
#include "timestep/timestep.h"
#include "timestep/timestep_math.h"

template <typename T>
__global__ void timestep_kernel(size_t items, int dim, double max_period, const float *__restrict__ t,
                                T *__restrict__ emb) {
    for (size_t i = vx_global_thread(); i < items; i += vx_grid_threads())
        emb[i] = vx_to<T>((float)timestep_value(t[i / dim], (int)(i % dim), dim, max_period));
}

static void timestep_embed_cuda(const TimestepShape *s, const float *t, void *emb) {
    if (s->n < 0 || s->dim < 1 || !(s->max_period > 1.0f))
        vx_fatal("timestep: invalid shape n=%d dim=%d max_period=%g", s->n, s->dim, (double)s->max_period);
    const size_t items = (size_t)s->n * s->dim;
    if (!items) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        timestep_kernel<T><<<vx_ew_blocks(items), VX_THREADS, 0, st>>>(items, s->dim, (double)s->max_period, t, (T *)emb);
    });
    LAUNCH_CHECK("timestep_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const TimestepOps timestep_ops_cuda = {{op_supports_all_types}, timestep_embed_cuda};

/* dropout_cuda.cu: keyed dropout (dropout.h) on the GPU: the mask and scale of dropout_mask.h, the definitions the
 * CPU uses (integer hashing, one float comparison, one float multiply), so float32 results are the CPU's bits.
 *   x, y, dy, dx [n][per_sample]   flat, storage type T (dtype_cuda.cuh), computed in float; vectors of 4 when the
 *                                  count % 4 == 0 and every pointer is 16-byte aligned
 *   first [1]                      uint64 in device memory, read by every thread when the kernel runs (a captured
 *                                  step follows it, as normal_cuda.cu's offset)
 * beta 0 overwrites dx without reading it (dx may hold NaN). */
#include "common/cuda_check.h"
#include "dropout/dropout.h"
#include "dropout/dropout_mask.h"

/* out = [beta*out +] (keep ? in*scale : 0): forward (x -> y, ACC false) and backward (dy -> dx) alike */
template <typename T, int V, bool ACC>
__global__ void dropout_kernel(size_t nvec, uint64_t seed, uint64_t stream, uint64_t per_sample, float p, float scale,
                               const uint64_t *__restrict__ first_p, const T *__restrict__ in, T *__restrict__ out,
                               float beta) {
    const uint64_t first = *first_p;
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float a[V], r[V];
        vx_load<V>(in, i, a);
        if constexpr (ACC) vx_load<V>(out, i, r);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float v = dropout_keep(seed, stream, first, per_sample, (uint64_t)(i * V + k), p) ? a[k] * scale : 0.0f;
            if constexpr (ACC) r[k] = beta * r[k] + v;
            else r[k] = v;
        }
        vx_store<V>(out, i, r);
    }
}

static void launch(const DropoutShape *s, bool bwd, const uint64_t *first, const void *in, void *out, float beta) {
    if (s->n < 0 || s->per_sample < 0 || !(s->p >= 0.0f && s->p <= 1.0f))
        vx_fatal("dropout: invalid shape n=%d per_sample=%ld p=%g", s->n, s->per_sample, (double)s->p);
    const size_t n = (size_t)s->n * (size_t)s->per_sample;
    if (n == 0) return;
    const bool vec = vx_vec4_ok(n, in, out), acc = bwd && beta != 0.0f;
    const size_t nvec = vec ? n / 4 : n;
    const unsigned blocks = vx_ew_blocks(nvec);
    const float scale = dropout_scale(s->p);
    cudaStream_t st = vx_cuda_stream();
#define DROPOUT_ARGS nvec, s->seed, s->stream, (uint64_t)s->per_sample, s->p, scale, first, (const T *)in, (T *)out, beta
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (vec) {
            if (acc) dropout_kernel<T, 4, true><<<blocks, VX_THREADS, 0, st>>>(DROPOUT_ARGS);
            else dropout_kernel<T, 4, false><<<blocks, VX_THREADS, 0, st>>>(DROPOUT_ARGS);
        } else {
            if (acc) dropout_kernel<T, 1, true><<<blocks, VX_THREADS, 0, st>>>(DROPOUT_ARGS);
            else dropout_kernel<T, 1, false><<<blocks, VX_THREADS, 0, st>>>(DROPOUT_ARGS);
        }
    });
#undef DROPOUT_ARGS
    LAUNCH_CHECK("dropout_kernel");
}

static void dropout_forward_cuda(const DropoutShape *s, const uint64_t *first, const void *x, void *y) {
    launch(s, false, first, x, y, 0.0f);
}
static void dropout_backward_cuda(const DropoutShape *s, const uint64_t *first, const void *dy, void *dx, float beta) {
    launch(s, true, first, dy, dx, beta);
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const DropoutOps dropout_ops_cuda = {{op_supports_all_types}, dropout_forward_cuda, dropout_backward_cuda};

/* relu_cuda.cu: ReLU (relu.h) on the GPU with the expressions of relu_cpu.c: the CPU's bits, but for beta 1, whose
 * multiply-add nvcc may fuse:
 *   forward   y = x < 0 ? 0 : x          (NaN passes through)
 *   backward  dx = [beta*dx +] (y > 0 ? dy : 0)
 *   x, y, dy, dx [count]   flat, storage type T (dtype_cuda.cuh), computed in float; vectors of 4 when
 *                          count % 4 == 0 and every pointer is 16-byte aligned, else scalar.
 * beta 0 overwrites dx without reading it (dx may hold NaN). */
#include "common/cuda_check.h"
#include "relu/relu.h"

template <typename T, int V>
__global__ void relu_forward_kernel(size_t nvec, const T *__restrict__ x, T *__restrict__ y) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float a[V];
        vx_load<V>(x, i, a);
#pragma unroll
        for (int k = 0; k < V; k++) a[k] = a[k] < 0.0f ? 0.0f : a[k];
        vx_store<V>(y, i, a);
    }
}

template <typename T, int V, bool ACC>
__global__ void relu_backward_kernel(size_t nvec, const T *__restrict__ y, const T *__restrict__ dy, T *__restrict__ dx,
                                     float beta) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float a[V], g[V], r[V];
        vx_load<V>(y, i, a);
        vx_load<V>(dy, i, g);
        if constexpr (ACC) vx_load<V>(dx, i, r);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float d = a[k] > 0.0f ? g[k] : 0.0f;
            if constexpr (ACC) r[k] = beta * r[k] + d;
            else r[k] = d;
        }
        vx_store<V>(dx, i, r);
    }
}

static void relu_forward_cuda(DType dt, long count, const void *x, void *y) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        if (vx_vec4_ok(n, x, y))
            relu_forward_kernel<T, 4><<<vx_ew_blocks(n / 4), VX_THREADS, 0, st>>>(n / 4, (const T *)x, (T *)y);
        else relu_forward_kernel<T, 1><<<vx_ew_blocks(n), VX_THREADS, 0, st>>>(n, (const T *)x, (T *)y);
    });
    LAUNCH_CHECK("relu_forward_kernel");
}

static void relu_backward_cuda(DType dt, long count, const void *y, const void *dy, void *dx, float beta) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    const bool acc = beta != 0.0f;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        const T *ty = (const T *)y, *tdy = (const T *)dy;
        T *tdx = (T *)dx;
        if (vx_vec4_ok(n, y, dy, dx)) {
            const unsigned b = vx_ew_blocks(n / 4);
            if (acc) relu_backward_kernel<T, 4, true><<<b, VX_THREADS, 0, st>>>(n / 4, ty, tdy, tdx, beta);
            else relu_backward_kernel<T, 4, false><<<b, VX_THREADS, 0, st>>>(n / 4, ty, tdy, tdx, beta);
        } else {
            const unsigned b = vx_ew_blocks(n);
            if (acc) relu_backward_kernel<T, 1, true><<<b, VX_THREADS, 0, st>>>(n, ty, tdy, tdx, beta);
            else relu_backward_kernel<T, 1, false><<<b, VX_THREADS, 0, st>>>(n, ty, tdy, tdx, beta);
        }
    });
    LAUNCH_CHECK("relu_backward_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const ReluOps relu_ops_cuda = {{op_supports_all_types}, relu_forward_cuda, relu_backward_cuda};

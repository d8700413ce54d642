/* silu_cuda.cu: SiLU (silu.h) on the GPU, y = x / (1 + exp(-x)) and its backward from the saved input x, with
 * the formulas of silu_cpu.c (exp's argument clamped to [-87, 88], so exp never overflows); CUDA's expf and the
 * CPU's vectorised exp differ by a few ulp, and nvcc fuses multiply-adds, so the results agree to ~1e-7, not bit
 * for bit.
 *   x, y, dy, dx [count]   flat, storage type T (dtype_cuda.cuh), computed in float; vectors of 4 when
 *                          count % 4 == 0 and every pointer is 16-byte aligned, else scalar.
 * beta 0 overwrites dx without reading it (dx may hold NaN); beta 1 adds. */
#include "common/cuda_check.h"
#include "silu/silu.h"
#include "silu/silu_device.cuh"

/* y = x / (1 + exp(-x)); nvec vectors of V floats */
template <typename T, int V>
__global__ void silu_forward_kernel(size_t nvec, const T *__restrict__ x, T *__restrict__ y) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float a[V], r[V];
        vx_load<V>(x, i, a);
#pragma unroll
        for (int k = 0; k < V; k++) r[k] = a[k] / (1.0f + silu_exp_neg(a[k]));
        vx_store<V>(y, i, r);
    }
}

/* dx = beta*dx + dy * s*(1 + x*(1 - s)), s = sigmoid(x); ACC = (beta != 0) */
template <typename T, int V, bool ACC>
__global__ void silu_backward_kernel(size_t nvec, const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dx,
                                     float beta) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float a[V], g[V], r[V];
        vx_load<V>(x, i, a);
        vx_load<V>(dy, i, g);
        if constexpr (ACC) vx_load<V>(dx, i, r);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float s = 1.0f / (1.0f + silu_exp_neg(a[k]));
            const float d = g[k] * (s * (1.0f + a[k] * (1.0f - s)));
            if constexpr (ACC) r[k] = beta * r[k] + d;
            else r[k] = d;
        }
        vx_store<V>(dx, i, r);
    }
}

extern "C" void silu_forward_cuda(DType dt, long count, const void *x, void *y) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        if (vx_vec4_ok(n, x, y))
            silu_forward_kernel<T, 4><<<vx_ew_blocks(n / 4), VX_THREADS, 0, st>>>(n / 4, (const T *)x, (T *)y);
        else silu_forward_kernel<T, 1><<<vx_ew_blocks(n), VX_THREADS, 0, st>>>(n, (const T *)x, (T *)y);
    });
    LAUNCH_CHECK("silu_forward_kernel");
}

extern "C" void silu_backward_cuda(DType dt, long count, const void *x, const void *dy, void *dx, float beta) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    const bool acc = beta != 0.0f;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        const T *tx = (const T *)x, *tdy = (const T *)dy;
        T *tdx = (T *)dx;
        if (vx_vec4_ok(n, x, dy, dx)) {
            const unsigned b = vx_ew_blocks(n / 4);
            if (acc) silu_backward_kernel<T, 4, true><<<b, VX_THREADS, 0, st>>>(n / 4, tx, tdy, tdx, beta);
            else silu_backward_kernel<T, 4, false><<<b, VX_THREADS, 0, st>>>(n / 4, tx, tdy, tdx, beta);
        } else {
            const unsigned b = vx_ew_blocks(n);
            if (acc) silu_backward_kernel<T, 1, true><<<b, VX_THREADS, 0, st>>>(n, tx, tdy, tdx, beta);
            else silu_backward_kernel<T, 1, false><<<b, VX_THREADS, 0, st>>>(n, tx, tdy, tdx, beta);
        }
    });
    LAUNCH_CHECK("silu_backward_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const SiluOps silu_ops_cuda = {{op_supports_all_types}, silu_forward_cuda, silu_backward_cuda};

/* silu_cuda.cu: SiLU (silu.h) on the GPU, y = x / (1 + exp(-x)) and its backward from the saved input x, with
 * the formulas of silu_cpu.c (exp's argument clamped to [-87, 88], so exp never overflows); CUDA's expf and the
 * CPU's vectorised exp differ by a few ulp, and nvcc fuses multiply-adds, so the results agree to ~1e-7, not bit
 * for bit.
 *   x, y, dy, dx [count]   flat; float4 when count % 4 == 0 and every pointer is 16-byte aligned, else scalar.
 * beta 0 overwrites dx without reading it (dx may hold NaN); beta 1 adds. */
#include "cuda_check.h"
#include "silu_device.cuh"

/* y = x / (1 + exp(-x)); nvec vectors of V floats */
template <int V> __global__ void silu_forward_kernel(size_t nvec, const float *__restrict__ x, float *__restrict__ y) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float a[V], r[V];
        vx_load<V>(x, i, a);
#pragma unroll
        for (int k = 0; k < V; k++) r[k] = a[k] / (1.0f + silu_exp_neg(a[k]));
        vx_store<V>(y, i, r);
    }
}

/* dx = beta*dx + dy * s*(1 + x*(1 - s)), s = sigmoid(x); ACC = (beta != 0) */
template <int V, bool ACC>
__global__ void silu_backward_kernel(size_t nvec, const float *__restrict__ x, const float *__restrict__ dy,
                                     float *__restrict__ dx, float beta) {
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

extern "C" void silu_forward_cuda(long count, const float *x, float *y) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    if (vx_vec4_ok(n, x, y)) {
        silu_forward_kernel<4><<<vx_ew_blocks(n / 4), VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, x, y);
    } else {
        silu_forward_kernel<1><<<vx_ew_blocks(n), VX_THREADS, 0, vx_cuda_stream()>>>(n, x, y);
    }
    LAUNCH_CHECK("silu_forward_kernel");
}

extern "C" void silu_backward_cuda(long count, const float *x, const float *dy, float *dx, float beta) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    const bool acc = beta != 0.0f;
    if (vx_vec4_ok(n, x, dy, dx)) {
        const unsigned b = vx_ew_blocks(n / 4);
        if (acc) silu_backward_kernel<4, true><<<b, VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, x, dy, dx, beta);
        else silu_backward_kernel<4, false><<<b, VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, x, dy, dx, beta);
    } else {
        const unsigned b = vx_ew_blocks(n);
        if (acc) silu_backward_kernel<1, true><<<b, VX_THREADS, 0, vx_cuda_stream()>>>(n, x, dy, dx, beta);
        else silu_backward_kernel<1, false><<<b, VX_THREADS, 0, vx_cuda_stream()>>>(n, x, dy, dx, beta);
    }
    LAUNCH_CHECK("silu_backward_kernel");
}

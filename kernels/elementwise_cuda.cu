/* elementwise_cuda.cu: the vector ops of elementwise.h on the GPU: residual add, gradient accumulation, scale.
 *   a, b, y, src, dst, x [count]   flat; float4 when count % 4 == 0 and every pointer is 16-byte aligned.
 * accumulate with beta 0 copies src without reading dst (which may hold NaN), as accumulate_cpu. */
#include "cuda_check.h"

/* y = a + b */
template <int V> __global__ void add_kernel(size_t nvec, const float *__restrict__ a, const float *__restrict__ b,
                                            float *__restrict__ y) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float u[V], v[V];
        vx_load<V>(a, i, u);
        vx_load<V>(b, i, v);
#pragma unroll
        for (int k = 0; k < V; k++) u[k] += v[k];
        vx_store<V>(y, i, u);
    }
}

/* dst = beta*dst + src (ACC), dst = src (!ACC) */
template <int V, bool ACC>
__global__ void accumulate_kernel(size_t nvec, const float *__restrict__ src, float *__restrict__ dst, float beta) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float s[V], d[V];
        vx_load<V>(src, i, s);
        if constexpr (ACC) {
            vx_load<V>(dst, i, d);
#pragma unroll
            for (int k = 0; k < V; k++) s[k] = beta * d[k] + s[k];
        }
        vx_store<V>(dst, i, s);
    }
}

/* x *= scale */
template <int V> __global__ void scale_kernel(size_t nvec, float *__restrict__ x, float scale) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float u[V];
        vx_load<V>(x, i, u);
#pragma unroll
        for (int k = 0; k < V; k++) u[k] *= scale;
        vx_store<V>(x, i, u);
    }
}

extern "C" void add_forward_cuda(long count, const float *a, const float *b, float *y) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    if (vx_vec4_ok(n, a, b, y)) add_kernel<4><<<vx_ew_blocks(n / 4), VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, a, b, y);
    else add_kernel<1><<<vx_ew_blocks(n), VX_THREADS, 0, vx_cuda_stream()>>>(n, a, b, y);
    LAUNCH_CHECK("add_kernel");
}

extern "C" void accumulate_cuda(long count, const float *src, float *dst, float beta) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    const bool acc = beta != 0.0f;
    if (vx_vec4_ok(n, src, dst)) {
        const unsigned b = vx_ew_blocks(n / 4);
        if (acc) accumulate_kernel<4, true><<<b, VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, src, dst, beta);
        else accumulate_kernel<4, false><<<b, VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, src, dst, beta);
    } else {
        const unsigned b = vx_ew_blocks(n);
        if (acc) accumulate_kernel<1, true><<<b, VX_THREADS, 0, vx_cuda_stream()>>>(n, src, dst, beta);
        else accumulate_kernel<1, false><<<b, VX_THREADS, 0, vx_cuda_stream()>>>(n, src, dst, beta);
    }
    LAUNCH_CHECK("accumulate_kernel");
}

extern "C" void scale_cuda(long count, float *x, float scale) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    if (vx_vec4_ok(n, x)) scale_kernel<4><<<vx_ew_blocks(n / 4), VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, x, scale);
    else scale_kernel<1><<<vx_ew_blocks(n), VX_THREADS, 0, vx_cuda_stream()>>>(n, x, scale);
    LAUNCH_CHECK("scale_kernel");
}

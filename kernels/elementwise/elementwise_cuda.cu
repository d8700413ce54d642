/* elementwise_cuda.cu: the vector ops of elementwise.h on the GPU: residual add, gradient accumulation, scale, the
 * cast between storage types and its channel-padding form (pad_channels: one thread per output element, src and dst
 * [rows][c] with small c; it runs on the first convolution's input and weights only).
 *   a, b, y, src, dst, x [count]   flat, of storage type T (dtype_cuda.cuh), computed in float; vectors of 4 when
 *                                  count % 4 == 0 and every pointer is 16-byte aligned.
 * accumulate with beta 0 copies src without reading dst (which may hold NaN), as accumulate_cpu. */
#include "common/cuda_check.h"
#include "elementwise/elementwise.h"

/* y = a + b */
template <typename T, int V>
__global__ void add_kernel(size_t nvec, const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ y) {
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
template <typename T, int V, bool ACC>
__global__ void accumulate_kernel(size_t nvec, const T *__restrict__ src, T *__restrict__ dst, float beta) {
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

/* dst = (To)src */
template <typename From, typename To, int V>
__global__ void cast_kernel(size_t nvec, const From *__restrict__ src, To *__restrict__ dst) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float u[V];
        vx_load<V>(src, i, u);
        vx_store<V>(dst, i, u);
    }
}

/* dst[r][c] = beta*dst[r][c] (ACC) + (c < c_from ? src[r][c] : 0), over n = rows * c_to output elements */
template <typename From, typename To, bool ACC>
__global__ void pad_channels_kernel(size_t n, int c_from, int c_to, const From *__restrict__ src, To *__restrict__ dst,
                                    float beta) {
    const int c_copy = c_from < c_to ? c_from : c_to;
    for (size_t i = vx_global_thread(); i < n; i += vx_grid_threads()) {
        const size_t r = i / (size_t)c_to;
        const int c = (int)(i - r * (size_t)c_to);
        float v = c < c_copy ? vx_f32(src[r * (size_t)c_from + (size_t)c]) : 0.0f;
        if constexpr (ACC) v = beta * vx_f32(dst[i]) + v;
        dst[i] = vx_to<To>(v);
    }
}

extern "C" void add_forward_cuda(DType dt, long count, const void *a, const void *b, void *y) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        const T *ta = (const T *)a, *tb = (const T *)b;
        T *ty = (T *)y;
        if (vx_vec4_ok(n, a, b, y)) add_kernel<T, 4><<<vx_ew_blocks(n / 4), VX_THREADS, 0, st>>>(n / 4, ta, tb, ty);
        else add_kernel<T, 1><<<vx_ew_blocks(n), VX_THREADS, 0, st>>>(n, ta, tb, ty);
    });
    LAUNCH_CHECK("add_kernel");
}

extern "C" void accumulate_cuda(DType dt, long count, const void *src, void *dst, float beta) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    const bool acc = beta != 0.0f;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        const T *s = (const T *)src;
        T *d = (T *)dst;
        if (vx_vec4_ok(n, src, dst)) {
            const unsigned b = vx_ew_blocks(n / 4);
            if (acc) accumulate_kernel<T, 4, true><<<b, VX_THREADS, 0, st>>>(n / 4, s, d, beta);
            else accumulate_kernel<T, 4, false><<<b, VX_THREADS, 0, st>>>(n / 4, s, d, beta);
        } else {
            const unsigned b = vx_ew_blocks(n);
            if (acc) accumulate_kernel<T, 1, true><<<b, VX_THREADS, 0, st>>>(n, s, d, beta);
            else accumulate_kernel<T, 1, false><<<b, VX_THREADS, 0, st>>>(n, s, d, beta);
        }
    });
    LAUNCH_CHECK("accumulate_kernel");
}

extern "C" void scale_cuda(long count, float *x, float scale) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    if (vx_vec4_ok(n, x)) scale_kernel<4><<<vx_ew_blocks(n / 4), VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, x, scale);
    else scale_kernel<1><<<vx_ew_blocks(n), VX_THREADS, 0, vx_cuda_stream()>>>(n, x, scale);
    LAUNCH_CHECK("scale_kernel");
}

extern "C" void cast_cuda(long count, DType from, const void *src, DType to, void *dst) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    cudaStream_t st = vx_cuda_stream();
    if (from == to) {
        if (src != dst) CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(from), cudaMemcpyDeviceToDevice, st));
        return;
    }
    VX_DTYPE_SWITCH(from, F, VX_DTYPE_SWITCH(to, D, {
        const F *s = (const F *)src;
        D *d = (D *)dst;
        if (vx_vec4_ok(n, src, dst)) cast_kernel<F, D, 4><<<vx_ew_blocks(n / 4), VX_THREADS, 0, st>>>(n / 4, s, d);
        else cast_kernel<F, D, 1><<<vx_ew_blocks(n), VX_THREADS, 0, st>>>(n, s, d);
    }));
    LAUNCH_CHECK("cast_kernel");
}

extern "C" void pad_channels_cuda(long rows, DType from, int c_from, const void *src, DType to, int c_to, void *dst,
                                  float beta) {
    if (rows <= 0 || c_to <= 0) return;
    const size_t n = (size_t)rows * (size_t)c_to;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(from, F, VX_DTYPE_SWITCH(to, D, {
        const F *s = (const F *)src;
        D *d = (D *)dst;
        const unsigned b = vx_ew_blocks(n);
        if (beta != 0.0f) pad_channels_kernel<F, D, true><<<b, VX_THREADS, 0, st>>>(n, c_from, c_to, s, d, beta);
        else pad_channels_kernel<F, D, false><<<b, VX_THREADS, 0, st>>>(n, c_from, c_to, s, d, beta);
    }));
    LAUNCH_CHECK("pad_channels_kernel");
}

/* dst[r][dst_off + j] = beta*dst (ACC) + src[r][src_off + j], over n = rows * width elements */
template <typename T, bool ACC>
__global__ void copy_channels_kernel(size_t total, int width, int c_src, int src_off, const T *__restrict__ src,
                                     int c_dst, int dst_off, T *__restrict__ dst, float beta) {
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const size_t r = i / (size_t)width;
        const int j = (int)(i - r * (size_t)width);
        const size_t o = r * (size_t)c_dst + (size_t)(dst_off + j);
        float v = vx_f32(src[r * (size_t)c_src + (size_t)(src_off + j)]);
        if constexpr (ACC) v = beta * vx_f32(dst[o]) + v;
        dst[o] = vx_to<T>(v);
    }
}

extern "C" void copy_channels_cuda(long rows, DType dt, int c_src, int src_off, const void *src, int c_dst, int dst_off,
                                   void *dst, int n, float beta) {
    if (rows <= 0 || n <= 0) return;
    const size_t total = (size_t)rows * (size_t)n;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        const T *s = (const T *)src;
        T *d = (T *)dst;
        const unsigned b = vx_ew_blocks(total);
        if (beta != 0.0f)
            copy_channels_kernel<T, true><<<b, VX_THREADS, 0, st>>>(total, n, c_src, src_off, s, c_dst, dst_off, d, beta);
        else
            copy_channels_kernel<T, false><<<b, VX_THREADS, 0, st>>>(total, n, c_src, src_off, s, c_dst, dst_off, d, beta);
    });
    LAUNCH_CHECK("copy_channels_kernel");
}

/* ---- the CUDA backend's table (ops.def): every storage type, except scale (float32 gradients only) ----------- */

static int cuda_supports(int fn, DType dt) { return fn == EW_SCALE ? dt == DT_F32 : op_supports_all_types(fn, dt); }
extern "C" const ElementwiseOps elementwise_ops_cuda = {{cuda_supports}, add_forward_cuda, accumulate_cuda, scale_cuda,
                                                        cast_cuda, pad_channels_cuda, copy_channels_cuda};

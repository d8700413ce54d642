/* pool_window_cuda.cu: average pooling over non-overlapping windows on the GPU (pool_window.h): one thread per output
 * element (forward: its window summed in order) or per input element (backward: its window's gradient / K), every
 * storage type, float32 math. */
#include "common/cuda_check.h"
#include "pool_window/pool_window.h"

template <typename T>
__global__ void pw_forward_kernel(PoolWindowShape s, const T *__restrict__ x, T *__restrict__ y, size_t total) {
    const float inv = 1.0f / (float)(s.k[0] * s.k[1] * s.k[2]);
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const int j = (int)(i % (size_t)s.c);
        size_t r = i / (size_t)s.c;
        const int ox = (int)(r % (size_t)s.ow), oy = (int)(r / (size_t)s.ow % (size_t)s.oh);
        const int oz = (int)(r / ((size_t)s.ow * s.oh) % (size_t)s.od);
        const size_t b = r / ((size_t)s.ow * s.oh * s.od);
        float acc = 0.0f;
        for (int a = 0; a < s.k[0]; a++)
            for (int e = 0; e < s.k[1]; e++)
                for (int f = 0; f < s.k[2]; f++) {
                    const size_t p = ((b * s.d + (size_t)oz * s.k[0] + a) * s.h + (size_t)oy * s.k[1] + e) * s.w +
                                     (size_t)ox * s.k[2] + f;
                    acc += vx_f32(x[p * s.c + j]);
                }
        y[i] = vx_to<T>(acc * inv);
    }
}

template <typename T, bool ACC>
__global__ void pw_backward_kernel(PoolWindowShape s, const T *__restrict__ dy, T *__restrict__ dx, float beta,
                                   size_t total) {
    const float inv = 1.0f / (float)(s.k[0] * s.k[1] * s.k[2]);
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const int j = (int)(i % (size_t)s.c);
        const size_t p = i / (size_t)s.c;
        const int x = (int)(p % (size_t)s.w), y = (int)(p / (size_t)s.w % (size_t)s.h);
        const int z = (int)(p / ((size_t)s.w * s.h) % (size_t)s.d);
        const size_t b = p / ((size_t)s.w * s.h * s.d);
        const int oz = z / s.k[0], oy = y / s.k[1], ox = x / s.k[2];
        float v = 0.0f;
        if (oz < s.od && oy < s.oh && ox < s.ow)
            v = vx_f32(dy[(((b * s.od + oz) * s.oh + oy) * s.ow + ox) * s.c + j]) * inv;
        if constexpr (ACC) v = beta * vx_f32(dx[i]) + v;
        dx[i] = vx_to<T>(v);
    }
}

static void pw_forward_cuda(const PoolWindowShape *s, const void *x, void *y) {
    const size_t total = (size_t)s->n * s->od * s->oh * s->ow * s->c;
    if (total == 0) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        pw_forward_kernel<T><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(*s, (const T *)x, (T *)y, total);
    });
    LAUNCH_CHECK("pw_forward_kernel");
}

static void pw_backward_cuda(const PoolWindowShape *s, const void *dy, void *dx, float beta) {
    const size_t total = (size_t)s->n * s->d * s->h * s->w * s->c;
    if (total == 0) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (beta != 0.0f)
            pw_backward_kernel<T, true><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(*s, (const T *)dy, (T *)dx, beta, total);
        else
            pw_backward_kernel<T, false><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(*s, (const T *)dy, (T *)dx, beta, total);
    });
    LAUNCH_CHECK("pw_backward_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const PoolWindowOps pool_window_ops_cuda = {{op_supports_all_types}, pw_forward_cuda, pw_backward_cuda};

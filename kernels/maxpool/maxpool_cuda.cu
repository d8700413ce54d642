/* maxpool_cuda.cu: 3-D max pooling (maxpool.h) on the GPU with the rules of maxpool_cpu.c, one thread per element
 * (channels fastest, so a warp reads consecutive memory):
 *   forward   thread per output: the window in order (kd, kh, kw), padding skipped, the first maximum wins a tie,
 *             the first NaN wins over numbers; y = the winner, arg = kd*k*k + kh*k + kw
 *   backward  thread per input: dx = [beta*dx +] the sum, in output order (od, oh, ow ascending, in float, from 0),
 *             of the dy whose arg points at this input: a gather, no atomics, the CPU's bits for float32
 *   x, y, dy, dx of storage type T (dtype_cuda.cuh); arg int32. Element indices are size_t. */
#include "common/cuda_check.h"
#include "maxpool/maxpool.h"

template <typename T>
__global__ void maxpool_forward_kernel(MaxPoolShape s, size_t items, const T *__restrict__ x, T *__restrict__ y,
                                       int32_t *__restrict__ arg) {
    for (size_t t = vx_global_thread(); t < items; t += vx_grid_threads()) {
        size_t q = t;
        const int j = (int)(q % s.c);
        q /= s.c;
        const int ox = (int)(q % s.ow);
        q /= s.ow;
        const int oy = (int)(q % s.oh);
        q /= s.oh;
        const int oz = (int)(q % s.od);
        const size_t b = q / s.od;
        float best = 0.0f;
        int32_t at = -1;
        for (int kd = 0; kd < s.k; kd++) {
            const int z = oz * s.stride - s.pad + kd;
            if (z < 0 || z >= s.d) continue;
            for (int kh = 0; kh < s.k; kh++) {
                const int yy = oy * s.stride - s.pad + kh;
                if (yy < 0 || yy >= s.h) continue;
                for (int kw = 0; kw < s.k; kw++) {
                    const int xx = ox * s.stride - s.pad + kw;
                    if (xx < 0 || xx >= s.w) continue;
                    const float v = vx_f32(x[(((b * s.d + z) * s.h + yy) * s.w + xx) * s.c + j]);
                    if (at < 0 || v > best || (v != v && best == best)) best = v, at = (kd * s.k + kh) * s.k + kw;
                }
            }
        }
        y[t] = vx_to<T>(best);
        arg[t] = at;
    }
}

/* outputs along one axis whose window holds input position z: [*lo, *hi) */
__device__ __forceinline__ void mp_out_range(int z, int k, int stride, int pad, int size_out, int *lo, int *hi) {
    const int top = z + pad;
    const int a = top - k + 1 <= 0 ? 0 : (top - k + 1 + stride - 1) / stride;
    int b = top / stride + 1;
    if (b > size_out) b = size_out;
    *lo = a, *hi = b > a ? b : a;
}

template <typename T, bool ACC>
__global__ void maxpool_backward_kernel(MaxPoolShape s, size_t items, const T *__restrict__ dy,
                                        const int32_t *__restrict__ arg, T *__restrict__ dx, float beta) {
    for (size_t t = vx_global_thread(); t < items; t += vx_grid_threads()) {
        size_t q = t;
        const int j = (int)(q % s.c);
        q /= s.c;
        const int xx = (int)(q % s.w);
        q /= s.w;
        const int yy = (int)(q % s.h);
        q /= s.h;
        const int z = (int)(q % s.d);
        const size_t b = q / s.d;
        int z0, z1, y0, y1, x0, x1;
        mp_out_range(z, s.k, s.stride, s.pad, s.od, &z0, &z1);
        mp_out_range(yy, s.k, s.stride, s.pad, s.oh, &y0, &y1);
        mp_out_range(xx, s.k, s.stride, s.pad, s.ow, &x0, &x1);
        float g = 0.0f;
        for (int oz = z0; oz < z1; oz++)
            for (int oy = y0; oy < y1; oy++)
                for (int ox = x0; ox < x1; ox++) {
                    const int32_t want =
                        ((z + s.pad - oz * s.stride) * s.k + (yy + s.pad - oy * s.stride)) * s.k + (xx + s.pad - ox * s.stride);
                    const size_t o = (((b * s.od + oz) * s.oh + oy) * s.ow + ox) * s.c + j;
                    if (arg[o] == want) g += vx_f32(dy[o]);
                }
        if constexpr (ACC) g = beta * vx_f32(dx[t]) + g;
        dx[t] = vx_to<T>(g);
    }
}

static void check(const MaxPoolShape *s) {
    if (s->n < 0 || s->c < 1 || s->k < 1 || s->stride < 1 || s->pad < 0 || 2 * s->pad > s->k || s->od < 1 ||
        s->oh < 1 || s->ow < 1)
        vx_fatal("maxpool: invalid shape (make it with maxpool_shape): n=%d c=%d k=%d stride=%d pad=%d", s->n, s->c,
                 s->k, s->stride, s->pad);
}

static void maxpool_forward_cuda(const MaxPoolShape *s, const void *x, void *y, int32_t *arg) {
    check(s);
    const size_t items = (size_t)s->n * s->od * s->oh * s->ow * s->c;
    if (!items) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        maxpool_forward_kernel<T><<<vx_ew_blocks(items), VX_THREADS, 0, st>>>(*s, items, (const T *)x, (T *)y, arg);
    });
    LAUNCH_CHECK("maxpool_forward_kernel");
}

static void maxpool_backward_cuda(const MaxPoolShape *s, const void *dy, const int32_t *arg, void *dx, float beta) {
    check(s);
    const size_t items = (size_t)s->n * s->d * s->h * s->w * s->c;
    if (!items) return;
    const unsigned blocks = vx_ew_blocks(items);
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tdy = (const T *)dy;
        T *tdx = (T *)dx;
        if (beta != 0.0f) maxpool_backward_kernel<T, true><<<blocks, VX_THREADS, 0, st>>>(*s, items, tdy, arg, tdx, beta);
        else maxpool_backward_kernel<T, false><<<blocks, VX_THREADS, 0, st>>>(*s, items, tdy, arg, tdx, beta);
    });
    LAUNCH_CHECK("maxpool_backward_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const MaxPoolOps maxpool_ops_cuda = {{op_supports_all_types}, maxpool_forward_cuda, maxpool_backward_cuda};

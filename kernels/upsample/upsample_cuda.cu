/* upsample_cuda.cu: nearest-neighbour x2 upsampling (upsample.h) on the GPU, NDHWC.
 *   x, dx [n][d][h][w][c]   ->   y, dy [n][2d][2h][2w][c]
 * Storage type T (dtype_cuda.cuh), sums in float.
 * One thread per input vector of V channels (V = 4 when c % 4 == 0 and the pointers are 16-byte aligned):
 * blockIdx.y walks the input rows r = (b, z, yy) (strided by gridDim.y, at most 65535), blockIdx.x/threadIdx.x
 * the w*c/V vectors of a row. Forward reads the vector once and writes its 8 copies; backward sums the 8 output
 * gradients in upsample2x_backward_cpu's order, so the result is bit-identical to the CPU's for beta 0 and 1 (0
 * overwrites dx without reading it, 1 adds; another beta may differ in the last bit, nvcc fusing beta*dx + s into
 * one FMA). Every output element has exactly one writer: no races. */
#include <limits.h>

#include "common/cuda_check.h"
#include "upsample/upsample.h"

/* Index arithmetic shared by both directions, in vectors of V floats:
 *   input vector  (r, t)        at r*L + t, with L = w*cv vectors per input row, cv = c/V, t = xx*cv + jv
 *   output vector (r, dz, dy, dx) at (((bz*2 + dz)*2h + 2*yy + dy)*2L) + (2*xx + dx)*cv + jv, bz = r / h, yy = r % h */
__device__ __forceinline__ size_t up_out_index(size_t bz, size_t yy, int h, size_t L, int xx, int cv, int jv, int dz,
                                               int dy, int dx) {
    return ((bz * 2 + dz) * (2 * (size_t)h) + 2 * yy + dy) * (2 * L) + (size_t)(2 * xx + dx) * cv + jv;
}

template <typename T, int V>
__global__ void upsample2x_forward_kernel(size_t rows, int h, int L, int cv, const T *__restrict__ x,
                                          T *__restrict__ y) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= L) return;
    const int xx = t / cv, jv = t - xx * cv;
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const size_t bz = r / h, yy = r % h;
        float v[V];
        vx_load<V>(x, r * L + t, v);
#pragma unroll
        for (int dz = 0; dz < 2; dz++)
#pragma unroll
            for (int dy = 0; dy < 2; dy++)
#pragma unroll
                for (int dx = 0; dx < 2; dx++) vx_store<V>(y, up_out_index(bz, yy, h, L, xx, cv, jv, dz, dy, dx), v);
    }
}

template <typename T, int V, bool ACC>
__global__ void upsample2x_backward_kernel(size_t rows, int h, int L, int cv, const T *__restrict__ dy,
                                           T *__restrict__ dx, float beta) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= L) return;
    const int xx = t / cv, jv = t - xx * cv;
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const size_t bz = r / h, yy = r % h;
        /* a = (2z, 2yy), b = (2z, 2yy+1), e = (2z+1, 2yy), f = (2z+1, 2yy+1); [0] at 2xx, [1] at 2xx+1 */
        float a0[V], a1[V], b0[V], b1[V], e0[V], e1[V], f0[V], f1[V], o[V];
        vx_load<V>(dy, up_out_index(bz, yy, h, L, xx, cv, jv, 0, 0, 0), a0);
        vx_load<V>(dy, up_out_index(bz, yy, h, L, xx, cv, jv, 0, 0, 1), a1);
        vx_load<V>(dy, up_out_index(bz, yy, h, L, xx, cv, jv, 0, 1, 0), b0);
        vx_load<V>(dy, up_out_index(bz, yy, h, L, xx, cv, jv, 0, 1, 1), b1);
        vx_load<V>(dy, up_out_index(bz, yy, h, L, xx, cv, jv, 1, 0, 0), e0);
        vx_load<V>(dy, up_out_index(bz, yy, h, L, xx, cv, jv, 1, 0, 1), e1);
        vx_load<V>(dy, up_out_index(bz, yy, h, L, xx, cv, jv, 1, 1, 0), f0);
        vx_load<V>(dy, up_out_index(bz, yy, h, L, xx, cv, jv, 1, 1, 1), f1);
        const size_t di = r * L + t;
        if constexpr (ACC) vx_load<V>(dx, di, o);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float g = ((a0[k] + a1[k]) + (b0[k] + b1[k])) + ((e0[k] + e1[k]) + (f0[k] + f1[k]));
            if constexpr (ACC) o[k] = beta * o[k] + g;
            else o[k] = g;
        }
        vx_store<V>(dx, di, o);
    }
}

/* Launch geometry; returns 0 when there is nothing to do. */
static int up_geometry(int n, int d, int h, int w, int c, int V, size_t *rows, int *L, int *cv, dim3 *grid) {
    if (n <= 0 || d <= 0 || h <= 0 || w <= 0 || c <= 0) return 0;
    if ((long)w * c > INT_MAX / 2) vx_fatal("upsample2x: a row of %d x %d floats is too long", w, c);
    *cv = c / V;
    *L = w * *cv;
    *rows = (size_t)n * d * h;
    const size_t gy = *rows < VX_GRID_Y_MAX ? *rows : VX_GRID_Y_MAX;
    *grid = dim3((unsigned)((*L + VX_THREADS - 1) / VX_THREADS), (unsigned)gy, 1);
    return 1;
}

extern "C" void upsample2x_forward_cuda(DType dt, int n, int d, int h, int w, int c, const void *x, void *y) {
    const int V = c % 4 == 0 && vx_aligned16(x) && vx_aligned16(y) ? 4 : 1;
    size_t rows;
    int L, cv;
    dim3 grid;
    if (!up_geometry(n, d, h, w, c, V, &rows, &L, &cv, &grid)) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        if (V == 4) upsample2x_forward_kernel<T, 4><<<grid, VX_THREADS, 0, st>>>(rows, h, L, cv, (const T *)x, (T *)y);
        else upsample2x_forward_kernel<T, 1><<<grid, VX_THREADS, 0, st>>>(rows, h, L, cv, (const T *)x, (T *)y);
    });
    LAUNCH_CHECK("upsample2x_forward_kernel");
}

extern "C" void upsample2x_backward_cuda(DType dt, int n, int d, int h, int w, int c, const void *dy, void *dx,
                                         float beta) {
    const int V = c % 4 == 0 && vx_aligned16(dy) && vx_aligned16(dx) ? 4 : 1;
    size_t rows;
    int L, cv;
    dim3 grid;
    if (!up_geometry(n, d, h, w, c, V, &rows, &L, &cv, &grid)) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        const T *g = (const T *)dy;
        T *o = (T *)dx;
        if (beta != 0.0f) {
            if (V == 4) upsample2x_backward_kernel<T, 4, true><<<grid, VX_THREADS, 0, st>>>(rows, h, L, cv, g, o, beta);
            else upsample2x_backward_kernel<T, 1, true><<<grid, VX_THREADS, 0, st>>>(rows, h, L, cv, g, o, beta);
        } else {
            if (V == 4) upsample2x_backward_kernel<T, 4, false><<<grid, VX_THREADS, 0, st>>>(rows, h, L, cv, g, o, beta);
            else upsample2x_backward_kernel<T, 1, false><<<grid, VX_THREADS, 0, st>>>(rows, h, L, cv, g, o, beta);
        }
    });
    LAUNCH_CHECK("upsample2x_backward_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const UpsampleOps upsample_ops_cuda = {{op_supports_all_types}, upsample2x_forward_cuda, upsample2x_backward_cuda};

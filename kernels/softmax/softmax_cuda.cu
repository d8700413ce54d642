/* softmax_cuda.cu: softmax over the last axis (softmax.h) on the GPU: one block per row (grid-stride over rows),
 * thread t taking columns t, t + 256, ...; the row's max by a fixed tree in shared memory, its sums (of the
 * exponentials, of dy*y) per thread in double and then by vx_block_sum, both fixed orders. x, y, dy, dx of storage
 * type T, computed in float; beta 0 overwrites dx without reading it. */
#include "common/cuda_check.h"
#include "softmax/softmax.h"

#define SOFTMAX_MAX_BLOCKS 65535u

/* the max of v over the block (every thread gets it); sh: VX_THREADS floats */
__device__ __forceinline__ float sm_block_max(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = VX_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

template <typename T>
__global__ void softmax_forward_kernel(long rows, int cols, const T *__restrict__ x, T *__restrict__ y) {
    __shared__ float shm[VX_THREADS];
    __shared__ double shs[VX_THREADS / 32];
    __shared__ float bcast;
    for (long r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + (size_t)r * cols;
        T *yr = y + (size_t)r * cols;
        float m = -INFINITY;
        for (int j = threadIdx.x; j < cols; j += VX_THREADS) m = fmaxf(m, vx_f32(xr[j]));
        m = sm_block_max(m, shm);
        double sum = 0.0;
        for (int j = threadIdx.x; j < cols; j += VX_THREADS) sum += (double)expf(vx_f32(xr[j]) - m);
        sum = vx_block_sum(sum, shs);
        if (threadIdx.x == 0) bcast = (float)(1.0 / sum);
        __syncthreads();
        const float inv = bcast;
        for (int j = threadIdx.x; j < cols; j += VX_THREADS) yr[j] = vx_to<T>(expf(vx_f32(xr[j]) - m) * inv);
        __syncthreads(); /* bcast is rewritten by the next row */
    }
}

template <typename T, bool ACC>
__global__ void softmax_backward_kernel(long rows, int cols, const T *__restrict__ y, const T *__restrict__ dy,
                                        T *__restrict__ dx, float beta) {
    __shared__ double shs[VX_THREADS / 32];
    __shared__ float bcast;
    for (long r = blockIdx.x; r < rows; r += gridDim.x) {
        const size_t o = (size_t)r * cols;
        double dot = 0.0;
        for (int j = threadIdx.x; j < cols; j += VX_THREADS) dot += (double)vx_f32(dy[o + j]) * vx_f32(y[o + j]);
        dot = vx_block_sum(dot, shs);
        if (threadIdx.x == 0) bcast = (float)dot;
        __syncthreads();
        const float d = bcast;
        for (int j = threadIdx.x; j < cols; j += VX_THREADS) {
            const float v = vx_f32(y[o + j]) * (vx_f32(dy[o + j]) - d);
            dx[o + j] = vx_to<T>(ACC ? beta * vx_f32(dx[o + j]) + v : v);
        }
        __syncthreads();
    }
}

static void check(const SoftmaxShape *s) {
    if (s->rows < 0 || s->cols < 1) vx_fatal("softmax: invalid shape rows=%ld cols=%d", s->rows, s->cols);
}
static unsigned blocks_of(long rows) { return rows < (long)SOFTMAX_MAX_BLOCKS ? (unsigned)rows : SOFTMAX_MAX_BLOCKS; }

static void softmax_forward_cuda(const SoftmaxShape *s, const void *x, void *y) {
    check(s);
    if (s->rows == 0) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        softmax_forward_kernel<T><<<blocks_of(s->rows), VX_THREADS, 0, st>>>(s->rows, s->cols, (const T *)x, (T *)y);
    });
    LAUNCH_CHECK("softmax_forward_kernel");
}

static void softmax_backward_cuda(const SoftmaxShape *s, const void *y, const void *dy, void *dx, float beta) {
    check(s);
    if (s->rows == 0) return;
    cudaStream_t st = vx_cuda_stream();
    const unsigned blocks = blocks_of(s->rows);
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *ty = (const T *)y, *tdy = (const T *)dy;
        T *tdx = (T *)dx;
        if (beta != 0.0f) softmax_backward_kernel<T, true><<<blocks, VX_THREADS, 0, st>>>(s->rows, s->cols, ty, tdy, tdx, beta);
        else softmax_backward_kernel<T, false><<<blocks, VX_THREADS, 0, st>>>(s->rows, s->cols, ty, tdy, tdx, beta);
    });
    LAUNCH_CHECK("softmax_backward_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const SoftmaxOps softmax_ops_cuda = {{op_supports_all_types}, softmax_forward_cuda, softmax_backward_cuda};

/* avgpool_cuda.cu: the global average pool of avgpool.h on the GPU, the sums in double in a fixed order (no
 * atomics; a partition that depends on the shape only), the results rounded as avgpool_cpu.c rounds them.
 *   x, dx [n][S][c]; y, dy [n][c]   storage type T (dtype_cuda.cuh), computed in float, summed in double
 * forward, two passes through the reduction scratch:
 *   partial: grid (nblk, n): block (blk, b) sums rows [blk*SB, (blk+1)*SB) of sample b per channel into
 *            part[b][blk][c]; thread (tx, ty) = (threadIdx % CW, threadIdx / CW) owns channel tx (+ CW, ...) of rows
 *            ty, ty + RY, ..., and a block's threads are added in ty order
 *   final:   one thread per (b, j) adds part[b][.][j] over the blocks in order: y = (float)(sum / S)
 * backward: one thread per element (vectors of 4 when c % 4 == 0 and the pointers are 16-byte aligned):
 *   dx = [beta*dx +] dy[b][j] / (float)S, the CPU's float division. */
#include "avgpool/avgpool.h"
#include "common/cuda_check.h"

#define AP_TARGET_BLOCKS 1024 /* partial-pass blocks over all samples, at most */
#define AP_MIN_ROWS 32        /* spatial positions per partial-pass block, at least */

typedef struct {
    int CW, RY;   /* threads across channels, rows per block step */
    int nblk;     /* partial-pass blocks per sample */
    size_t SB;    /* rows per partial-pass block */
} ApGeom;

static ApGeom ap_geometry(int n, long S, int c) {
    ApGeom g;
    g.CW = c < VX_THREADS ? c : VX_THREADS;
    g.RY = VX_THREADS / g.CW;
    const size_t cap = VX_SCRATCH_BYTES / sizeof(double), per = (size_t)n * c; /* part [n][nblk][c] */
    if (per > cap) vx_fatal("avgpool: %d samples x %d channels do not fit the reduction scratch", n, c);
    size_t nb = ((size_t)S + AP_MIN_ROWS - 1) / AP_MIN_ROWS;
    const size_t target = AP_TARGET_BLOCKS / n > 0 ? AP_TARGET_BLOCKS / n : 1;
    if (nb > target) nb = target;
    if (nb > cap / per) nb = cap / per;
    if (nb < 1) nb = 1;
    g.SB = ((size_t)S + nb - 1) / nb;
    g.nblk = (int)(((size_t)S + g.SB - 1) / g.SB); /* no empty block */
    return g;
}

template <typename T>
__global__ void ap_partial_kernel(int n, size_t S, int c, int CW, int RY, size_t SB, int nblk, const T *__restrict__ x,
                                  double *__restrict__ part) {
    __shared__ double sh[VX_THREADS];
    const int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
    const size_t blk = blockIdx.x, p0 = blk * SB, p1 = p0 + SB < S ? p0 + SB : S;
    for (int b = blockIdx.y; b < n; b += gridDim.y)
        for (int j0 = 0; j0 < c; j0 += CW) {
            const int j = j0 + tx;
            double s = 0.0;
            if (ty < RY && j < c)
                for (size_t p = p0 + ty; p < p1; p += RY) s += (double)vx_f32(x[((size_t)b * S + p) * c + j]);
            sh[threadIdx.x] = s;
            __syncthreads();
            if (ty == 0 && j < c) {
                double a = 0.0;
                for (int r = 0; r < RY; r++) a += sh[r * CW + tx];
                part[((size_t)b * nblk + blk) * c + j] = a;
            }
            __syncthreads();
        }
}

template <typename T>
__global__ void ap_final_kernel(size_t nc, int c, int nblk, double S, const double *__restrict__ part,
                                T *__restrict__ y) {
    for (size_t i = vx_global_thread(); i < nc; i += vx_grid_threads()) {
        const size_t b = i / (size_t)c, j = i % (size_t)c;
        double s = 0.0;
        for (int blk = 0; blk < nblk; blk++) s += part[(b * nblk + blk) * c + j];
        y[i] = vx_to<T>((float)(s / S));
    }
}

static void avgpool_forward_cuda(DType dt, int n, long spatial, int c, const void *x, void *y) {
    if (spatial < 1 || c < 1 || n < 0) vx_fatal("avgpool: invalid shape n=%d spatial=%ld c=%d", n, spatial, c);
    if (n == 0) return;
    const ApGeom g = ap_geometry(n, spatial, c);
    double *part = (double *)vx_cuda_scratch();
    const dim3 grid((unsigned)g.nblk, (unsigned)(n < (int)VX_GRID_Y_MAX ? n : (int)VX_GRID_Y_MAX), 1);
    const size_t nc = (size_t)n * c;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        ap_partial_kernel<T><<<grid, VX_THREADS, 0, st>>>(n, (size_t)spatial, c, g.CW, g.RY, g.SB, g.nblk,
                                                          (const T *)x, part);
        LAUNCH_CHECK("ap_partial_kernel");
        ap_final_kernel<T><<<vx_ew_blocks(nc), VX_THREADS, 0, st>>>(nc, c, g.nblk, (double)spatial, part, (T *)y);
        LAUNCH_CHECK("ap_final_kernel");
    });
}

/* dx[b][p][j] = [beta*dx +] dy[b][j] / (float)S over nvec vectors of V elements (V divides c) */
template <typename T, int V, bool ACC>
__global__ void ap_backward_kernel(size_t nvec, size_t S, int c, float fS, const T *__restrict__ dy,
                                   T *__restrict__ dx, float beta) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        const size_t e = i * V, b = e / (S * (size_t)c), j = e % (size_t)c;
        float g[V], r[V];
#pragma unroll
        for (int k = 0; k < V; k++) g[k] = vx_f32(dy[b * c + j + k]) / fS;
        if constexpr (ACC) {
            vx_load<V>(dx, i, r);
#pragma unroll
            for (int k = 0; k < V; k++) r[k] = beta * r[k] + g[k];
            vx_store<V>(dx, i, r);
        } else {
            vx_store<V>(dx, i, g);
        }
    }
}

static void avgpool_backward_cuda(DType dt, int n, long spatial, int c, const void *dy, void *dx, float beta) {
    if (spatial < 1 || c < 1 || n < 0) vx_fatal("avgpool: invalid shape n=%d spatial=%ld c=%d", n, spatial, c);
    if (n == 0) return;
    const size_t count = (size_t)n * spatial * c;
    const bool vec = c % 4 == 0 && vx_aligned16(dx), acc = beta != 0.0f;
    const size_t nvec = vec ? count / 4 : count;
    const unsigned blocks = vx_ew_blocks(nvec);
    const float fS = (float)spatial;
    cudaStream_t st = vx_cuda_stream();
#define AP_BWD_ARGS nvec, (size_t)spatial, c, fS, (const T *)dy, (T *)dx, beta
    VX_DTYPE_SWITCH(dt, T, {
        if (vec) {
            if (acc) ap_backward_kernel<T, 4, true><<<blocks, VX_THREADS, 0, st>>>(AP_BWD_ARGS);
            else ap_backward_kernel<T, 4, false><<<blocks, VX_THREADS, 0, st>>>(AP_BWD_ARGS);
        } else {
            if (acc) ap_backward_kernel<T, 1, true><<<blocks, VX_THREADS, 0, st>>>(AP_BWD_ARGS);
            else ap_backward_kernel<T, 1, false><<<blocks, VX_THREADS, 0, st>>>(AP_BWD_ARGS);
        }
    });
#undef AP_BWD_ARGS
    LAUNCH_CHECK("ap_backward_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const AvgPoolOps avgpool_ops_cuda = {{op_supports_all_types}, avgpool_forward_cuda, avgpool_backward_cuda};

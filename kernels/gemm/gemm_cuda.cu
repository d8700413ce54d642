/* gemm_cuda.cu: the batched GEMM with epilogues and the bias gradient (gemm.h) on the GPU.
 *   matmul     cuBLASLt first (gemm_lt.cu: tensor cores, fused bias / GELU / DGELU epilogues where it has them; an
 *              erf GELU gets the plain product and then gemm_epilogue_kernel); where cuBLASLt is not loaded or offers
 *              no algorithm, and always under the host emulation, the own tiled kernel: 64x64 tiles of C per block of
 *              256 threads, each thread 4x4 outputs (rows ty*4.., columns tx + 16j), K in steps of 16 through shared
 *              memory in float, every output's sum over k in order, the epilogue fused. grid (n tiles, m tiles,
 *              batch). SIMT float32 math whatever the storage type: a fallback for correctness, not speed.
 *   bias_grad  block blk sums rows [blk*SB, ...) per column in double into the scratch, then per column the blocks
 *              in order (layernorm_cuda.cu's scheme); with one block of rows (few rows, or columns too many for the
 *              scratch: pos_embed's gradient is [tokens*C] columns over the batch's rows, 12.6M at 256^3) one pass,
 *              a thread per column, the same bits and no scratch. No atomics anywhere. */
#include "common/cuda_check.h"
#include "gelu/gelu_math.h"
#include "gemm/gemm.h"
#include "gemm/gemm_lt.h"

#define GT_M 64
#define GT_N 64
#define GT_K 16
#define GB_TARGET_BLOCKS 1024
#define GB_MIN_ROWS 32

typedef struct {
    int m, n, k, trans_a, trans_b, has_bias;
    long stride_a, stride_b, stride_c;
    float alpha, beta;
} GemmArgs;

/* pre -> C (and aux) for epilogue EPI: the one definition the tiled kernel and the post-cuBLASLt pass share */
template <int EPI> __device__ __forceinline__ float gemm_epi(float pre, float auxv, float *aux_out) {
    if constexpr (EPI == GEMM_EPI_GELU_TANH || EPI == GEMM_EPI_GELU_ERF) {
        *aux_out = pre;
        return gelu_value(EPI == GEMM_EPI_GELU_TANH ? 0 : 1, pre);
    } else if constexpr (EPI == GEMM_EPI_DGELU_TANH || EPI == GEMM_EPI_DGELU_ERF) {
        return pre * gelu_grad(EPI == GEMM_EPI_DGELU_TANH ? 0 : 1, auxv);
    } else {
        return pre;
    }
}

template <typename T, typename TC, int EPI>
__global__ void gemm_tile_kernel(GemmArgs p, const T *__restrict__ a, const T *__restrict__ b,
                                 const float *__restrict__ bias, TC *__restrict__ c, T *__restrict__ aux) {
    __shared__ float As[GT_K][GT_M + 4]; /* As[kk][row] */
    __shared__ float Bs[GT_K][GT_N + 4]; /* Bs[kk][col] */
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int row0 = blockIdx.y * GT_M, col0 = blockIdx.x * GT_N;
    const size_t bi = blockIdx.z;
    const T *A = a + bi * p.stride_a, *B = b + bi * p.stride_b;
    const int lda = p.trans_a ? p.m : p.k, ldb = p.trans_b ? p.k : p.n;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < p.k; k0 += GT_K) {
        for (int e = tid; e < GT_M * GT_K; e += VX_THREADS) {
            /* consecutive threads along the stored rows: k when A is [m][k], m when A is [k][m] */
            const int r = p.trans_a ? e % GT_M : e / GT_K, kk = p.trans_a ? e / GT_M : e % GT_K;
            const int gr = row0 + r, gk = k0 + kk;
            float v = 0.0f;
            if (gr < p.m && gk < p.k) v = vx_f32(p.trans_a ? A[(size_t)gk * lda + gr] : A[(size_t)gr * lda + gk]);
            As[kk][r] = v;
        }
        for (int e = tid; e < GT_N * GT_K; e += VX_THREADS) {
            const int cc = p.trans_b ? e / GT_K : e % GT_N, kk = p.trans_b ? e % GT_K : e / GT_N;
            const int gc = col0 + cc, gk = k0 + kk;
            float v = 0.0f;
            if (gc < p.n && gk < p.k) v = vx_f32(p.trans_b ? B[(size_t)gc * ldb + gk] : B[(size_t)gk * ldb + gc]);
            Bs[kk][cc] = v;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GT_K; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) av[i] = As[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
    TC *C = c + bi * p.stride_c;
    T *X = aux ? aux + bi * p.stride_c : NULL;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = row0 + ty * 4 + i;
        if (r >= p.m) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int col = col0 + tx + 16 * j;
            if (col >= p.n) continue;
            const size_t o = (size_t)r * p.n + col;
            float v = p.alpha * acc[i][j];
            if (p.beta != 0.0f) v += p.beta * vx_f32(C[o]);
            if (p.has_bias) v += bias[col];
            float pre_out = 0.0f;
            v = gemm_epi<EPI>(v, (EPI >= GEMM_EPI_DGELU_TANH) ? vx_f32(X[o]) : 0.0f, &pre_out);
            if constexpr (EPI == GEMM_EPI_GELU_TANH || EPI == GEMM_EPI_GELU_ERF)
                if (X) X[o] = vx_to<T>(pre_out);
            C[o] = vx_to<TC>(v);
        }
    }
}

/* after cuBLASLt's plain product (alpha AB + beta C already in C): bias and the erf epilogue, elementwise */
template <typename T, int EPI>
__global__ void gemm_epilogue_kernel(size_t items, int n, long stride_c, size_t per_batch, const float *__restrict__ bias,
                                     T *__restrict__ c, T *__restrict__ aux) {
    for (size_t t = vx_global_thread(); t < items; t += vx_grid_threads()) {
        const size_t o = t / per_batch * stride_c + t % per_batch;
        float v = vx_f32(c[o]), pre_out = 0.0f;
        if (bias && EPI < GEMM_EPI_DGELU_TANH) v += bias[t % per_batch % n];
        v = gemm_epi<EPI>(v, (EPI >= GEMM_EPI_DGELU_TANH) ? vx_f32(aux[o]) : 0.0f, &pre_out);
        if constexpr (EPI == GEMM_EPI_GELU_TANH || EPI == GEMM_EPI_GELU_ERF)
            if (aux) aux[o] = vx_to<T>(pre_out);
        c[o] = vx_to<T>(v);
    }
}

template <typename T, typename TC>
static void launch_tiles(const GemmShape *s, const GemmArgs &p, const void *a, const void *b, const float *bias,
                         void *c, void *aux) {
    const dim3 grid((unsigned)((s->n + GT_N - 1) / GT_N), (unsigned)((s->m + GT_M - 1) / GT_M), (unsigned)s->batch);
    cudaStream_t st = vx_cuda_stream();
    const T *ta = (const T *)a, *tb = (const T *)b;
    TC *tc = (TC *)c;
    T *tx = (T *)aux;
    switch (s->epilogue) {
    case GEMM_EPI_GELU_TANH: gemm_tile_kernel<T, TC, GEMM_EPI_GELU_TANH><<<grid, VX_THREADS, 0, st>>>(p, ta, tb, bias, tc, tx); break;
    case GEMM_EPI_GELU_ERF: gemm_tile_kernel<T, TC, GEMM_EPI_GELU_ERF><<<grid, VX_THREADS, 0, st>>>(p, ta, tb, bias, tc, tx); break;
    case GEMM_EPI_DGELU_TANH: gemm_tile_kernel<T, TC, GEMM_EPI_DGELU_TANH><<<grid, VX_THREADS, 0, st>>>(p, ta, tb, bias, tc, tx); break;
    case GEMM_EPI_DGELU_ERF: gemm_tile_kernel<T, TC, GEMM_EPI_DGELU_ERF><<<grid, VX_THREADS, 0, st>>>(p, ta, tb, bias, tc, tx); break;
    default: gemm_tile_kernel<T, TC, GEMM_EPI_NONE><<<grid, VX_THREADS, 0, st>>>(p, ta, tb, bias, tc, tx); break;
    }
    LAUNCH_CHECK("gemm_tile_kernel");
}

template <typename T>
static void launch_epilogue(const GemmShape *s, const float *bias, void *c, void *aux) {
    const size_t per = (size_t)s->m * s->n, items = per * s->batch;
    if (!items) return;
    cudaStream_t st = vx_cuda_stream();
    const unsigned blocks = vx_ew_blocks(items);
    T *tc = (T *)c, *tx = (T *)aux;
    if (s->epilogue == GEMM_EPI_GELU_ERF)
        gemm_epilogue_kernel<T, GEMM_EPI_GELU_ERF><<<blocks, VX_THREADS, 0, st>>>(items, s->n, s->stride_c, per, bias, tc, tx);
    else if (s->epilogue == GEMM_EPI_DGELU_ERF)
        gemm_epilogue_kernel<T, GEMM_EPI_DGELU_ERF><<<blocks, VX_THREADS, 0, st>>>(items, s->n, s->stride_c, per, bias, tc, tx);
    else gemm_epilogue_kernel<T, GEMM_EPI_NONE><<<blocks, VX_THREADS, 0, st>>>(items, s->n, s->stride_c, per, bias, tc, tx);
    LAUNCH_CHECK("gemm_epilogue_kernel");
}

static void gemm_matmul_cuda(const GemmShape *s, const void *a, const void *b, const float *bias, void *c, void *aux,
                             float beta) {
    const char *bad = gemm_shape_error(s);
    if (*bad) vx_fatal("gemm: %s (batch %d, m %d, n %d, k %d)", bad, s->batch, s->m, s->n, s->k);
    const int dgelu = s->epilogue == GEMM_EPI_DGELU_TANH || s->epilogue == GEMM_EPI_DGELU_ERF;
    if (dgelu && (!aux || beta != 0.0f || bias)) vx_fatal("gemm: the DGELU epilogue needs aux, beta 0 and no bias");
    if (s->batch > 65535 || (s->m + GT_M - 1) / GT_M > 65535)
        vx_fatal("gemm: batch %d or %d rows beyond the launch's 65535 x 64", s->batch, s->m);
    if (!s->m || !s->n || !s->batch) return;
    int pending = 0;
    if (gemm_lt_matmul(s, a, b, bias, c, aux, beta, &pending)) {
        if (pending) VX_DTYPE_SWITCH(s->dtype, T, { launch_epilogue<T>(s, bias, c, aux); });
        return;
    }
    const GemmArgs p = {s->m, s->n, s->k, s->trans_a, s->trans_b, bias != NULL, s->stride_a, s->stride_b, s->stride_c,
                        s->alpha, beta};
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (s->c_f32) launch_tiles<T, float>(s, p, a, b, bias, c, aux);
        else launch_tiles<T, T>(s, p, a, b, bias, c, aux);
    });
}

/* ---- bias_grad --------------------------------------------------------------------------------------------- */

template <typename T>
__global__ void gemm_bias_partial_kernel(long rows, int cols, size_t SB, const T *__restrict__ dy,
                                         double *__restrict__ part) {
    const size_t blk = blockIdx.x, r0 = blk * SB, r1 = r0 + SB < (size_t)rows ? r0 + SB : (size_t)rows;
    for (int j = threadIdx.x; j < cols; j += VX_THREADS) {
        double acc = 0.0;
        for (size_t r = r0; r < r1; r++) acc += (double)vx_f32(dy[r * cols + j]);
        part[blk * cols + j] = acc;
    }
}

/* the two passes' result when they would have one block of rows: the column's rows in order in double, then once
 * into db (the final pass adds that one partial to 0.0: the same double), a thread per column */
template <typename T, bool ACC>
__global__ void gemm_bias_direct_kernel(long rows, int cols, const T *__restrict__ dy, float *__restrict__ db,
                                        float beta) {
    for (size_t j = vx_global_thread(); j < (size_t)cols; j += vx_grid_threads()) {
        double acc = 0.0;
        for (long r = 0; r < rows; r++) acc += (double)vx_f32(dy[(size_t)r * cols + j]);
        db[j] = ACC ? beta * db[j] + (float)acc : (float)acc;
    }
}

template <bool ACC>
__global__ void gemm_bias_final_kernel(int cols, int nblk, const double *__restrict__ part, float *__restrict__ db,
                                       float beta) {
    const size_t j = vx_global_thread();
    if (j >= (size_t)cols) return;
    double acc = 0.0;
    for (int blk = 0; blk < nblk; blk++) acc += part[(size_t)blk * cols + j];
    db[j] = ACC ? beta * db[j] + (float)acc : (float)acc;
}

/* blocks of rows of the first pass: about one per GB_MIN_ROWS rows, at most GB_TARGET_BLOCKS, and as many as the
 * scratch holds partials of `cols` columns (`cap` doubles); 1 (the one-pass kernel) when not even two fit */
static size_t gemm_bias_grad_blocks(long rows, int cols, size_t cap) {
    size_t nb = ((size_t)rows + GB_MIN_ROWS - 1) / GB_MIN_ROWS;
    if (nb > GB_TARGET_BLOCKS) nb = GB_TARGET_BLOCKS;
    if (nb > cap / (size_t)cols) nb = cap / (size_t)cols;
    return nb < 1 ? 1 : nb;
}

static void gemm_bias_grad_cuda(DType dt, long rows, int cols, const void *dy, float *db, float beta) {
    if (rows < 0 || cols < 1) vx_fatal("gemm: bias_grad of %ld rows of %d columns", rows, cols);
    const size_t nb = gemm_bias_grad_blocks(rows, cols, VX_SCRATCH_BYTES / sizeof(double));
    cudaStream_t st = vx_cuda_stream();
    if (nb == 1) { /* one block of rows: one pass, no scratch (however many columns) */
        const unsigned blocks = vx_ew_blocks((size_t)cols);
        VX_DTYPE_SWITCH(dt, T, {
            if (beta != 0.0f) gemm_bias_direct_kernel<T, true><<<blocks, VX_THREADS, 0, st>>>(rows, cols, (const T *)dy, db, beta);
            else gemm_bias_direct_kernel<T, false><<<blocks, VX_THREADS, 0, st>>>(rows, cols, (const T *)dy, db, beta);
        });
        LAUNCH_CHECK("gemm_bias_direct_kernel");
        return;
    }
    const size_t SB = ((size_t)rows + nb - 1) / nb;
    const int nblk = (int)(((size_t)rows + SB - 1) / SB);
    double *part = (double *)vx_cuda_scratch();
    VX_DTYPE_SWITCH(dt, T, { gemm_bias_partial_kernel<T><<<nblk, VX_THREADS, 0, st>>>(rows, cols, SB, (const T *)dy, part); });
    LAUNCH_CHECK("gemm_bias_partial_kernel");
    const unsigned fb = (unsigned)((cols + VX_THREADS - 1) / VX_THREADS);
    if (beta != 0.0f) gemm_bias_final_kernel<true><<<fb, VX_THREADS, 0, st>>>(cols, nblk, part, db, beta);
    else gemm_bias_final_kernel<false><<<fb, VX_THREADS, 0, st>>>(cols, nblk, part, db, beta);
    LAUNCH_CHECK("gemm_bias_final_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const GemmOps gemm_ops_cuda = {{op_supports_all_types}, gemm_matmul_cuda, gemm_bias_grad_cuda,
                                                 nullptr /* bf16 is a storage type here */};

/* cpu_tile_gemm.h: a register-blocked float32 product for operands that are already in cache (attention's tiles):
 * rows of C in blocks of CPU_TILE_MR, columns in vectors of CPU_TILE_W, A read one element at a time by broadcast
 * through two strides, so A may be stored either way round (A or A^T) without a copy.
 *
 * Why not cpu_sgemm: attention's products are small (64-128 rows, k = 64 or 512) and each call repacks both
 * operands; on a 2-core AVX-512 Xeon oneDNN's sgemm ran them at 97-111 GFLOP/s a thread with both cores busy, this
 * kernel at 133-165 (a 64 x 512 x 64 and a 64 x 64 x 512 product, the same run).
 *
 * The width is the build's: 16 floats (AVX-512F), 8 (AVX2 + FMA), else CPU_TILE_W is 0 and the caller keeps its
 * cpu_sgemm path (the x86-64-v2 fuzz build). The sums run k in order, each element's own chain of FMAs, so a
 * result depends on the shape and the build only: not on the thread count, not on where the tile starts. */
#pragma once
#include <stddef.h>

#if defined(__AVX512F__)
#define CPU_TILE_W 16
#elif defined(__AVX2__) && defined(__FMA__)
#define CPU_TILE_W 8
#else
#define CPU_TILE_W 0
#endif

/* C[r][c] = alpha * sum_{kk < k} A[r*ars + kk*aks] * B[kk*ldb + c] (+ C[r][c] where accumulate), r < m, c < n.
 * n must be a multiple of CPU_TILE_W (> 0). Without accumulate C is written without being read (NaN there is
 * fine); k == 0 gives zeros. */
void cpu_tile_gemm(int m, int n, int k, float alpha, const float *A, long ars, long aks, const float *B, long ldb,
                   float *C, long ldc, int accumulate);

/* dst[c][j] = src[j*lds + c] for j < rows, c < cols; dst's columns rows..pad-1 are set to 0 (a tile padded to pad
 * columns, pad >= rows): the transposed copy of a block of token rows that the products above read as B. */
void cpu_tile_transpose(int rows, int cols, const float *src, long lds, float *dst, long ldd, int pad);

/* dst[i] = src[i], i < n, with streaming stores where dst is aligned to the vector (a copy that is not read again
 * soon: it does not evict the caller's tiles, and its lines are not read before they are written) */
void cpu_tile_copy_stream(float *dst, const float *src, size_t n);

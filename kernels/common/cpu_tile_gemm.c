/* cpu_tile_gemm.c: the register-blocked tile product and transpose of cpu_tile_gemm.h. */
#include "common/cpu_tile_gemm.h"

#include <stdint.h>
#include <string.h>

#include "core/util.h"

#if CPU_TILE_W
#include <immintrin.h>

/* rows of C per block; vectors of CPU_TILE_W columns per block: 6 x 4 accumulators + 4 of B + 1 of A = 29 of the 32
 * AVX-512 registers, 6 x 2 + 2 + 1 = 15 of AVX2's 16 */
#define MR 6
#if CPU_TILE_W == 16
#define NV 4
typedef __m512 vf;
#define vf_load _mm512_loadu_ps
#define vf_store _mm512_storeu_ps
#define vf_set1 _mm512_set1_ps
#define vf_zero _mm512_setzero_ps
#define vf_fma _mm512_fmadd_ps
#define vf_mul _mm512_mul_ps
#define vf_add _mm512_add_ps
#define vf_stream _mm512_stream_ps
#else
#define NV 2
typedef __m256 vf;
#define vf_load _mm256_loadu_ps
#define vf_store _mm256_storeu_ps
#define vf_set1 _mm256_set1_ps
#define vf_zero _mm256_setzero_ps
#define vf_fma _mm256_fmadd_ps
#define vf_mul _mm256_mul_ps
#define vf_add _mm256_add_ps
#define vf_stream _mm256_stream_ps
#endif

/* one block of `rows` x `nv` vectors; inlined with both constant, so the accumulators live in registers */
static inline __attribute__((always_inline)) void block(const int rows, const int nv, int k, float alpha,
                                                        const float *A, long ars, long aks, const float *B, long ldb,
                                                        float *C, long ldc, int accumulate) {
    vf c[MR][NV];
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < nv; v++) c[r][v] = vf_zero();
    /* unrolled 4 times: attention's products have k = 64 or 128, where the loop's own counter and branch were a
     * measurable share (vit3d-diffusion-64's self-attention, forward + backward, 3-6% faster alternated in one
     * process, 2-core AVX-512 Xeon); each accumulator's sequence of FMAs is the same, so are the bits */
#pragma GCC unroll 4
    for (int kk = 0; kk < k; kk++, A += aks, B += ldb) {
        vf b[NV];
        for (int v = 0; v < nv; v++) b[v] = vf_load(B + v * CPU_TILE_W);
        for (int r = 0; r < rows; r++) {
            const vf a = vf_set1(A[r * ars]);
            for (int v = 0; v < nv; v++) c[r][v] = vf_fma(a, b[v], c[r][v]);
        }
    }
    const vf al = vf_set1(alpha);
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < nv; v++) {
            float *dst = C + r * ldc + v * CPU_TILE_W;
            vf x = vf_mul(c[r][v], al);
            if (accumulate) x = vf_add(x, vf_load(dst));
            vf_store(dst, x);
        }
}

#define BLOCK_ARGS k, alpha, A, ars, aks, B, ldb, C, ldc, accumulate
#define ROWS(nv)                                                                                                       \
    switch (rows) {                                                                                                    \
    case 1: block(1, nv, BLOCK_ARGS); break;                                                                           \
    case 2: block(2, nv, BLOCK_ARGS); break;                                                                           \
    case 3: block(3, nv, BLOCK_ARGS); break;                                                                           \
    case 4: block(4, nv, BLOCK_ARGS); break;                                                                           \
    case 5: block(5, nv, BLOCK_ARGS); break;                                                                           \
    default: block(MR, nv, BLOCK_ARGS); break;                                                                         \
    }

static void dispatch(int rows, int nv, int k, float alpha, const float *A, long ars, long aks, const float *B,
                     long ldb, float *C, long ldc, int accumulate) {
    switch (nv) {
    case 1: ROWS(1); break;
#if NV == 4
    case 2: ROWS(2); break;
    case 3: ROWS(3); break;
#endif
    default: ROWS(NV); break;
    }
}

void cpu_tile_gemm(int m, int n, int k, float alpha, const float *A, long ars, long aks, const float *B, long ldb,
                   float *C, long ldc, int accumulate) {
    if (n % CPU_TILE_W) vx_fatal("cpu_tile_gemm: %d columns, not a multiple of %d", n, CPU_TILE_W);
    /* a chunk of columns across all row blocks: its k rows of B stay in L1/L2 while A's rows stream (chunking k as
     * well, 128 at a time, measured within noise at attention's k = 512) */
    for (int c0 = 0; c0 < n; c0 += NV * CPU_TILE_W) {
        const int nv = (n - c0) / CPU_TILE_W < NV ? (n - c0) / CPU_TILE_W : NV;
        for (int r0 = 0; r0 < m; r0 += MR)
            dispatch(m - r0 < MR ? m - r0 : MR, nv, k, alpha, A + r0 * ars, ars, aks, B + c0, ldb, C + r0 * ldc + c0,
                     ldc, accumulate);
    }
}

void cpu_tile_copy_stream(float *dst, const float *src, size_t n) {
    if (((uintptr_t)dst & (CPU_TILE_W * sizeof(float) - 1)) != 0) {
        memcpy(dst, src, sizeof(float) * n);
        return;
    }
    size_t i = 0;
    for (; i + CPU_TILE_W <= n; i += CPU_TILE_W) vf_stream(dst + i, vf_load(src + i));
    for (; i < n; i++) dst[i] = src[i];
    _mm_sfence(); /* streaming stores are weakly ordered: visible before any later store (a barrier's) */
}

#else /* no vector width of ours: callers check CPU_TILE_W and keep their cpu_sgemm path */

void cpu_tile_gemm(int m, int n, int k, float alpha, const float *A, long ars, long aks, const float *B, long ldb,
                   float *C, long ldc, int accumulate) {
    vx_fatal("cpu_tile_gemm: this build has no AVX2 or AVX-512 (CPU_TILE_W is 0)");
}
void cpu_tile_copy_stream(float *dst, const float *src, size_t n) { memcpy(dst, src, sizeof(float) * n); }

#endif

#if CPU_TILE_W == 16
/* one full 16 x 16 block: three rounds of shuffles (pairs of rows, pairs of pairs, then 128-bit lanes) */
static void transpose_block(const float *src, long lds, float *dst, long ldd) {
    __m512 r[16], a[16], b[16];
    for (int j = 0; j < 16; j++) r[j] = _mm512_loadu_ps(src + j * lds);
    for (int i = 0; i < 8; i++) { /* lane k of a[2i], a[2i+1]: rows 2i, 2i+1 at columns 4k, 4k+1 and 4k+2, 4k+3 */
        a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* lane k of b[4i+m]: rows 4i..4i+3 at column 4k+m */
        const __m512d a0 = _mm512_castps_pd(a[4 * i]), a1 = _mm512_castps_pd(a[4 * i + 1]);
        const __m512d a2 = _mm512_castps_pd(a[4 * i + 2]), a3 = _mm512_castps_pd(a[4 * i + 3]);
        b[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
        b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
        b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
        b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
    }
    for (int m = 0; m < 4; m++) { /* column 4k+m: lane k of b[m], b[4+m], b[8+m], b[12+m] */
        const __m512 c0 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0x88), c1 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0xDD);
        const __m512 d0 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0x88);
        const __m512 d1 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0xDD);
        _mm512_storeu_ps(dst + (m + 0) * ldd, _mm512_shuffle_f32x4(c0, d0, 0x88));
        _mm512_storeu_ps(dst + (m + 4) * ldd, _mm512_shuffle_f32x4(c1, d1, 0x88));
        _mm512_storeu_ps(dst + (m + 8) * ldd, _mm512_shuffle_f32x4(c0, d0, 0xDD));
        _mm512_storeu_ps(dst + (m + 12) * ldd, _mm512_shuffle_f32x4(c1, d1, 0xDD));
    }
}
#elif CPU_TILE_W == 8
/* one full 8 x 8 block */
static void transpose_block(const float *src, long lds, float *dst, long ldd) {
    __m256 r[8], t[8], u[8];
    for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(src + j * lds);
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        _mm256_storeu_ps(dst + m * ldd, _mm256_permute2f128_ps(u[m], u[4 + m], 0x20));
        _mm256_storeu_ps(dst + (m + 4) * ldd, _mm256_permute2f128_ps(u[m], u[4 + m], 0x31));
    }
}
#endif

void cpu_tile_transpose(int rows, int cols, const float *src, long lds, float *dst, long ldd, int pad) {
    enum { T = CPU_TILE_W ? CPU_TILE_W : 8 }; /* blocks of T x T; full ones in vector registers */
    for (int j0 = 0; j0 < rows; j0 += T)
        for (int c0 = 0; c0 < cols; c0 += T) {
            const int jn = rows - j0 < T ? rows - j0 : T, cn = cols - c0 < T ? cols - c0 : T;
#if CPU_TILE_W
            if (jn == T && cn == T) {
                transpose_block(src + (long)j0 * lds + c0, lds, dst + (long)c0 * ldd + j0, ldd);
                continue;
            }
#endif
            for (int c = 0; c < cn; c++)
                for (int j = 0; j < jn; j++) dst[(long)(c0 + c) * ldd + j0 + j] = src[(long)(j0 + j) * lds + c0 + c];
        }
    if (pad > rows)
        for (int c = 0; c < cols; c++) memset(dst + (long)c * ldd + rows, 0, sizeof(float) * (size_t)(pad - rows));
}

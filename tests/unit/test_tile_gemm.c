/* test_tile_gemm.c: cmocka tests of cpu_tile_gemm.h, the register-tile product, transpose and streaming copy that
 * the CPU attention's tile path is built from, against plain double loops: every row count around the block of 6
 * (full blocks and each remainder), column counts of 1 to 5 vectors (a full chunk and each partial one), A read
 * either way round through its two strides, alpha, accumulate on and off (off: NaN in C is overwritten), k = 0;
 * transposes of full and partial blocks with their zero padding; the copy at aligned and misaligned addresses.
 * In a build without AVX2 or AVX-512 (CPU_TILE_W 0) there is nothing to test and each test says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_tile_gemm.h"

static float *filled(long n, unsigned seed) {
    float *x = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    unsigned s = seed * 2654435761u + 1;
    for (long i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return x;
}

/* one product of m x n x k with A stored row-major (transposed 0: ars = lda, aks = 1) or column-major (1: ars = 1,
 * aks = lda), against double; C has a border column on each side that must stay untouched */
static void check_product(int m, int n, int k, int a_transposed, int accumulate, float alpha) {
    const int lda = (a_transposed ? m : k) + 3, ldb = n + 5, ldc = n + 2;
    float *A = filled((long)(a_transposed ? k : m) * lda, 1), *B = filled((long)k * ldb, 2);
    float *C = filled((long)m * ldc + 2, 3), *C0 = malloc(sizeof(float) * (size_t)(m * ldc + 2));
    memcpy(C0, C, sizeof(float) * (size_t)(m * ldc + 2));
    if (!accumulate)
        for (int r = 0; r < m; r++)
            for (int c = 0; c < n; c++) C[1 + (long)r * ldc + c] = NAN;
    const long ars = a_transposed ? 1 : lda, aks = a_transposed ? lda : 1;
    cpu_tile_gemm(m, n, k, alpha, A, ars, aks, B, ldb, C + 1, ldc, accumulate);
    double worst = 0;
    for (int r = 0; r < m; r++)
        for (int c = 0; c < ldc; c++) {
            const long at = 1 + (long)r * ldc + c;
            if (c >= n) { /* past the n columns: untouched */
                assert_memory_equal(&C[at], &C0[at], sizeof(float));
                continue;
            }
            double sum = 0;
            for (int kk = 0; kk < k; kk++) sum += (double)A[r * ars + kk * aks] * B[(long)kk * ldb + c];
            const double want = alpha * sum + (accumulate ? C0[at] : 0.0), e = fabs(want - C[at]);
            worst = e > worst || e != e ? e : worst;
        }
    assert_memory_equal(&C[0], &C0[0], sizeof(float)); /* the element before the first row */
    if (!(worst <= 1e-5 * (k + 1)))
        fail_msg("m %d n %d k %d transposed %d accumulate %d: max error %.3g", m, n, k, a_transposed, accumulate,
                 worst);
    free(A), free(B), free(C), free(C0);
}

static void test_product(void **state) {
    if (!CPU_TILE_W) {
        printf("CPU_TILE_W is 0 in this build (no AVX2, no AVX-512): nothing to test\n");
        return;
    }
    const int W = CPU_TILE_W;
    for (int m = 1; m <= 13; m++)               /* 1-5 (a partial block), 6, 7-11, 12, 13 */
        for (int nv = 1; nv <= 5; nv++)         /* a partial chunk of vectors, a full one (4 or 2), more */
            for (int t = 0; t <= 1; t++) check_product(m, nv * W, 9, t, t, t ? 0.125f : 1.0f);
    check_product(64, 4 * W, 512, 1, 0, 1.0f); /* attention's shapes: P V (A = P^T), S^T = K Q^T */
    check_product(512, 64, 64, 0, 0, 0.125f);
    check_product(7, 2 * W, 0, 0, 0, 1.0f);     /* k = 0: zeros */
    check_product(7, 2 * W, 0, 1, 1, 1.0f);     /* k = 0 accumulating: C unchanged */
}

static void test_transpose(void **state) {
    const int sizes[][2] = {{16, 16}, {64, 64}, {7, 16}, {16, 5}, {37, 48}, {8, 8}, {1, 1}, {0, 16}};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        const int rows = sizes[t][0], cols = sizes[t][1], lds = cols + 3, pad = rows + 5, ldd = pad + 2;
        float *src = filled((long)(rows > 0 ? rows : 1) * lds, 4), *dst = filled((long)cols * ldd, 5);
        float *dst0 = malloc(sizeof(float) * (size_t)(cols * ldd + 1));
        memcpy(dst0, dst, sizeof(float) * (size_t)(cols * ldd));
        cpu_tile_transpose(rows, cols, src, lds, dst, ldd, pad);
        for (int c = 0; c < cols; c++)
            for (int j = 0; j < ldd; j++) {
                const float got = dst[(long)c * ldd + j];
                if (j < rows) assert_true(got == src[(long)j * lds + c]);
                else if (j < pad) assert_true(got == 0.0f);
                else assert_true(got == dst0[(long)c * ldd + j]); /* past the padding: untouched */
            }
        free(src), free(dst), free(dst0);
    }
}

static void test_copy_stream(void **state) {
    float *src = filled(1000, 6), *buf = aligned_alloc(64, sizeof(float) * 1088);
    for (int offset = 0; offset <= 3; offset++) /* 0: aligned (streaming stores), else misaligned (memcpy) */
        for (int n = 0; n <= 1000; n += 37) {
            memset(buf, 0xff, sizeof(float) * 1088);
            cpu_tile_copy_stream(buf + offset, src, (size_t)n);
            assert_memory_equal(buf + offset, src, sizeof(float) * (size_t)n);
            const uint32_t *tail = (const uint32_t *)(buf + offset + n);
            assert_int_equal(tail[0], 0xffffffffu); /* nothing written past n */
        }
    free(src);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_product), cmocka_unit_test(test_transpose),
                                       cmocka_unit_test(test_copy_stream)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_gemm_lt.c: what gemm_lt.cu tells cuBLASLt's heuristic of each matrix's alignment (gemm_lt_alignment, gemm_lt.h)
 * without a GPU: the largest power of two dividing the address, capped at 256 (the heuristic's default, which it
 * would otherwise assume of every matrix), and the alignment a bf16 weight really has in the model: the parameters'
 * 16-bit copy puts view v at offset * 2 bytes, offset a multiple of MODEL_PARAM_ALIGN floats, so every other weight
 * starts at an odd multiple of 128 bytes (which an algorithm chosen for 256 may refuse). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/dtype.h"
#include "gemm/gemm_lt.h"
#include "graph/model.h"

static const void *at(uintptr_t a) { return (const void *)a; }

static void test_alignment(void **state) {
    (void)state;
    assert_int_equal(gemm_lt_alignment(NULL), 256);
    assert_int_equal(gemm_lt_alignment(at(0x7f0000001000u)), 256);
    assert_int_equal(gemm_lt_alignment(at(0x7f0000001100u)), 256);
    assert_int_equal(gemm_lt_alignment(at(0x7f0000001080u)), 128);
    assert_int_equal(gemm_lt_alignment(at(0x7f0000001040u)), 64);
    assert_int_equal(gemm_lt_alignment(at(0x7f0000001010u)), 16);
    assert_int_equal(gemm_lt_alignment(at(0x7f0000001008u)), 8);
    assert_int_equal(gemm_lt_alignment(at(0x7f0000001002u)), 2);
    assert_int_equal(gemm_lt_alignment(at(0x7f0000001001u)), 1);
}

/* the weights of a bf16 model: base 256-byte aligned (cudaMalloc), views at multiples of MODEL_PARAM_ALIGN elements */
static void test_bf16_weights(void **state) {
    (void)state;
    const uintptr_t base = 0x7f0000000000u;
    int below = 0;
    for (long view = 0; view < 8; view++) {
        const long offset = view * MODEL_PARAM_ALIGN;
        const uint32_t a = gemm_lt_alignment(at(base + (uintptr_t)offset * dtype_size(DT_BF16)));
        assert_true(a >= 128);
        below += a < 256;
        /* the float32 master weights and gradients stay 256-byte aligned */
        assert_int_equal(gemm_lt_alignment(at(base + (uintptr_t)offset * dtype_size(DT_F32))), 256);
    }
    assert_int_equal(below, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_alignment), cmocka_unit_test(test_bf16_weights)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_gemm_bf16.c: the CPU's bf16 GEMM math (common/cpu_gemm_bf16.h, GemmShape.bf16_math in gemm_cpu.c).
 * The rounding to bf16 (dtype.h's, which the GEMM uses) against hand-made cases; then each product form a
 * transformer's Linear runs (x W^T with bias and with GELU, dX = dY W, dW += dY^T X into float32, alpha, a batch with
 * strides) against a float64 reference of the inputs rounded to bf16: bf16 math computes exactly that product in
 * float32, so the bound is float32's accumulation error (k * 2^-23 of sum |a b|), far below bf16's rounding, which the
 * same cases must show against the unrounded inputs (so a path that silently ran float32 fails, and so does one that
 * rounded wrongly). The bits must not depend on the thread count. Skipped where the CPU cannot run bf16 (no
 * AVX512-BF16 or AMX-BF16). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_isa.h"
#include "common/dtype.h"
#include "common/rng.h"
#include "gelu/gelu_math.h"
#include "gemm/gemm.h"

static void test_rounding_is_nearest_even(void **state) {
    (void)state;
    assert_int_equal(dtype_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(dtype_f32_to_bf16(dtype_bits_f32(0x3f808000u)), 0x3f80); /* a tie, even below: down */
    assert_int_equal(dtype_f32_to_bf16(dtype_bits_f32(0x3f818000u)), 0x3f82); /* a tie, odd below: up */
    assert_int_equal(dtype_f32_to_bf16(dtype_bits_f32(0x3f808001u)), 0x3f81); /* above the tie: up */
    assert_int_equal(dtype_f32_to_bf16(dtype_bits_f32(0x3f807fffu)), 0x3f80); /* below it: down */
    assert_int_equal(dtype_f32_to_bf16(-2.0f), 0xc000);
    assert_int_equal(dtype_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(dtype_f32_to_bf16(dtype_bits_f32(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to infinity */
    const uint16_t nan = dtype_f32_to_bf16(dtype_bits_f32(0x7f800001u)); /* a NaN whose payload is in the low bits */
    assert_true((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
    assert_true(isnan(dtype_bf16_to_f32(dtype_f32_to_bf16(-NAN))));
    assert_true(dtype_bf16_to_f32(dtype_f32_to_bf16(3.14159f)) == 3.140625f);
}

typedef struct {
    GemmShape s;
    int bias;
    float beta;
} Case;

static float *filled(long n, unsigned seed) {
    float *v = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) v[i] = 2.0f * vx_uniform01(vx_hash3(seed, 7, (uint64_t)i)) - 1.0f;
    return v;
}
static float *rounded(const float *x, long n) {
    float *v = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) v[i] = dtype_bf16_to_f32(dtype_f32_to_bf16(x[i]));
    return v;
}

/* C's element (i, r, j) before the epilogue, in double, and sum |a b| (the accumulation bound's scale) */
static double product(const GemmShape *s, const float *a, const float *b, long i, long r, long j, double *mag) {
    double acc = 0, m = 0;
    for (long kk = 0; kk < s->k; kk++) {
        const double av = s->trans_a ? a[i * s->stride_a + kk * s->m + r] : a[i * s->stride_a + r * s->k + kk];
        const double bv = s->trans_b ? b[i * s->stride_b + j * s->k + kk] : b[i * s->stride_b + kk * s->n + j];
        acc += av * bv;
        m += fabs(av * bv);
    }
    *mag = fabs(s->alpha) * m;
    return s->alpha * acc;
}

/* runs c through the CPU table on `threads` threads, from c0 (beta's C) */
static float *run(const Case *c, const float *a, const float *b, const float *bias, const float *c0, int threads) {
    const long nc = gemm_span(&c->s, c->s.stride_c, (long)c->s.m * c->s.n);
    float *out = malloc(sizeof(float) * (size_t)nc);
    memcpy(out, c0, sizeof(float) * (size_t)nc);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    gemm_ops_cpu.matmul(&c->s, a, b, c->bias ? bias : NULL, out, NULL, c->beta);
    omp_set_num_threads(saved);
    return out;
}

/* worst |got - ref| / (sum |a b| + |C0| + 1e-30) over C, the reference from inputs a, b (rounded or not) */
static double worst_error(const Case *c, const float *a, const float *b, const float *bias, const float *c0,
                          const float *got) {
    const GemmShape *s = &c->s;
    double worst = 0;
    for (long i = 0; i < s->batch; i++)
        for (long r = 0; r < s->m; r++)
            for (long j = 0; j < s->n; j++) {
                const long o = i * s->stride_c + r * s->n + j;
                double mag, ref = product(s, a, b, i, r, j, &mag) + c->beta * (double)c0[o];
                if (c->bias) ref += bias[j];
                if (s->epilogue == GEMM_EPI_GELU_ERF) ref = 0.5 * ref * (1 + erf(ref / sqrt(2.0)));
                const double scale = mag + fabs(c->beta * c0[o]) + (c->bias ? fabs(bias[j]) : 0) + 1e-30;
                const double e = fabs(got[o] - ref) / scale;
                if (e > worst) worst = e;
            }
    return worst;
}

static void check_case(const Case *c, unsigned seed) {
    const GemmShape *s = &c->s;
    const long na = gemm_span(s, s->stride_a, (long)s->m * s->k);
    const long nb = gemm_span(s, s->stride_b, (long)s->k * s->n);
    const long nc = gemm_span(s, s->stride_c, (long)s->m * s->n);
    float *a = filled(na, seed), *b = filled(nb, seed + 1), *bias = filled(s->n, seed + 2), *c0 = filled(nc, seed + 3);
    float *ar = rounded(a, na), *br = rounded(b, nb);
    float *one = run(c, a, b, bias, c0, 1), *two = run(c, a, b, bias, c0, 2), *three = run(c, a, b, bias, c0, 3);
    /* the product of the bf16 inputs, summed in float32: float32's accumulation error (GELU's slope is at most 1.13) */
    const double exact = worst_error(c, ar, br, bias, c0, one), bound = (s->k + 2) * 2.4e-7;
    /* against the unrounded inputs: bf16's rounding (2^-9 per input) shows */
    const double vs_f32 = worst_error(c, a, b, bias, c0, one);
    printf("%dx%dx%d %c%c batch %d: %.3g of the rounded inputs' product (bound %.3g), %.3g from float32's\n", s->m,
           s->n, s->k, s->trans_a ? 'T' : 'N', s->trans_b ? 'T' : 'N', s->batch, exact, bound, vs_f32);
    assert_true(exact <= bound);
    assert_true(vs_f32 > 1e-4 && vs_f32 < 1.6e-2);
    assert_memory_equal(one, two, sizeof(float) * (size_t)nc);
    assert_memory_equal(one, three, sizeof(float) * (size_t)nc);
    free(a), free(b), free(bias), free(c0), free(ar), free(br), free(one), free(two), free(three);
}

static void test_products_are_the_bf16_inputs_product(void **state) {
    (void)state;
    const int T = 1; /* trans */
    const Case cases[] = {
        /* x W^T + b (a Linear's forward), rows cut per sample */
        {{.batch = 1, .m = 300, .n = 96, .k = 64, .trans_b = T, .stride_a = 300 * 64, .stride_b = 96 * 64,
          .stride_c = 300 * 96, .alpha = 1, .dtype = DT_F32, .sample_rows = 150, .bf16_math = 1}, 1, 0},
        /* the same with GELU (the MLP's first Linear), more rows than one job */
        {{.batch = 1, .m = 600, .n = 520, .k = 48, .trans_b = T, .stride_a = 600 * 48, .stride_b = 520 * 48,
          .stride_c = 600 * 520, .alpha = 1, .epilogue = GEMM_EPI_GELU_ERF, .dtype = DT_F32, .bf16_math = 1}, 1, 0},
        /* dX = dY W, beta 1 (a gradient that adds) */
        {{.batch = 1, .m = 130, .n = 40, .k = 72, .stride_a = 130 * 72, .stride_b = 72 * 40, .stride_c = 130 * 40,
          .alpha = 1, .dtype = DT_F32, .bf16_math = 1}, 0, 1},
        /* dW += dY^T X into the float32 master gradient */
        {{.batch = 1, .m = 72, .n = 40, .k = 300, .trans_a = T, .stride_a = 300 * 72, .stride_b = 300 * 40,
          .stride_c = 72 * 40, .alpha = 1, .c_f32 = 1, .dtype = DT_F32, .bf16_math = 1}, 0, 1},
        /* a batch with strides and a shared B (stride 0), alpha, both transposed */
        {{.batch = 3, .m = 33, .n = 17, .k = 70, .trans_a = T, .trans_b = T, .stride_a = 70 * 33 + 5, .stride_b = 0,
          .stride_c = 33 * 17 + 3, .alpha = 0.37f, .dtype = DT_F32, .bf16_math = 1}, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], 100 + 10 * (unsigned)i);
}

/* A product under 16 in m, n or k (the adaLN modulation's 2 rows) stays float32 with bf16 math: the bits of the same
 * product without it; one of 16 in each is bf16 (its result differs from float32's) */
static void test_thin_products_stay_float32(void **state) {
    (void)state;
    const GemmShape shapes[] = {
        {.batch = 1, .m = 2, .n = 96, .k = 64, .trans_b = 1, .alpha = 1, .dtype = DT_F32, .bf16_math = 1},
        {.batch = 1, .m = 64, .n = 96, .k = 2, .trans_a = 1, .alpha = 1, .dtype = DT_F32, .bf16_math = 1},
        {.batch = 1, .m = 64, .n = 15, .k = 64, .alpha = 1, .dtype = DT_F32, .bf16_math = 1},
        {.batch = 1, .m = 16, .n = 16, .k = 16, .trans_b = 1, .alpha = 1, .dtype = DT_F32, .bf16_math = 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        GemmShape s = shapes[i];
        const long na = (long)s.m * s.k, nb = (long)s.k * s.n, nc = (long)s.m * s.n;
        float *a = filled(na, 7 + (unsigned)i), *b = filled(nb, 8 + (unsigned)i), *bias = filled(s.n, 9);
        float *bf = calloc((size_t)nc, sizeof(float)), *f32 = calloc((size_t)nc, sizeof(float));
        gemm_ops_cpu.matmul(&s, a, b, bias, bf, NULL, 0.0f);
        s.bf16_math = 0;
        gemm_ops_cpu.matmul(&s, a, b, bias, f32, NULL, 0.0f);
        const int thin = s.m < 16 || s.n < 16 || s.k < 16;
        printf("%dx%dx%d with bf16 math: %s float32's bits\n", s.m, s.n, s.k,
               memcmp(bf, f32, sizeof(float) * (size_t)nc) == 0 ? "the same as" : "not");
        if (thin) assert_memory_equal(bf, f32, sizeof(float) * (size_t)nc);
        else assert_memory_not_equal(bf, f32, sizeof(float) * (size_t)nc);
        free(a), free(b), free(bias), free(bf), free(f32);
    }
}

/* beta 0 overwrites C without reading it: a NaN there does not survive */
static void test_beta_zero_overwrites_nan(void **state) {
    (void)state;
    const Case c = {{.batch = 1, .m = 20, .n = 24, .k = 16, .trans_b = 1, .stride_a = 320, .stride_b = 384,
                     .stride_c = 480, .alpha = 1, .dtype = DT_F32, .bf16_math = 1}, 0, 0};
    float *a = filled(320, 1), *b = filled(384, 2), *c0 = malloc(480 * sizeof(float));
    for (int i = 0; i < 480; i++) c0[i] = NAN;
    float *got = run(&c, a, b, NULL, c0, 2);
    for (int i = 0; i < 480; i++) assert_false(isnan(got[i]));
    free(a), free(b), free(c0), free(got);
}

int main(void) {
    char why[256];
    if (!cpu_isa_bf16_runs(why, sizeof why)) {
        printf("skipped: the CPU's bf16 GEMM: %s\n", why);
        const struct CMUnitTest rounding[] = {cmocka_unit_test(test_rounding_is_nearest_even)};
        return cmocka_run_group_tests(rounding, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounding_is_nearest_even),
        cmocka_unit_test(test_products_are_the_bf16_inputs_product),
        cmocka_unit_test(test_beta_zero_overwrites_nan),
        cmocka_unit_test(test_thin_products_stay_float32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

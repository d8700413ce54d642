/* test_patch.c: cmocka tests of the patch op's CPU side (kernels/patch/patch_cpu.c) beyond its op cases:
 *   - to_volume undoes to_tokens exactly, and beta 1 adds;
 *   - the patch embedding two ways agree: conv3d with kernel = stride = patch (how a model embeds patches, reusing
 *     the convolution) against to_tokens followed by gemm with the conv's filter as [c_out][pd*ph*pw*c] plus bias,
 *     which pins patch.h's order inside a token to conv3d's filter order and its token order to conv3d's output;
 *   - a 2-D view (d = 1) the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "conv3d/conv3d.h"
#include "gemm/gemm.h"
#include "patch/patch.h"

static float *rnd(long n, unsigned seed) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (long i = 0; i < n; i++) p[i] = 2.0f * vx_uniform01(vx_hash3(seed, 3, (uint64_t)i)) - 1.0f;
    return p;
}

static void test_round_trip(void **state) {
    const PatchShape s = {.n = 2, .d = 6, .h = 4, .w = 9, .c = 3, .p = {3, 2, 3}, .dtype = DT_F32};
    const long n = patch_count(&s);
    float *v = rnd(n, 1), *t = rnd(n, 2), *back = rnd(n, 3), *t2 = rnd(n, 4);
    patch_ops_cpu.to_tokens(&s, v, t, 0.0f);
    patch_ops_cpu.to_volume(&s, t, back, 0.0f);
    assert_memory_equal(v, back, sizeof(float) * (size_t)n);
    /* a permutation: every element once */
    double sv = 0, st = 0;
    for (long i = 0; i < n; i++) sv += v[i], st += t[i];
    assert_true(sv == st);
    /* beta 1 adds: tokens of v, added onto tokens of v, are twice them */
    memcpy(t2, t, sizeof(float) * (size_t)n);
    patch_ops_cpu.to_tokens(&s, v, t2, 1.0f);
    for (long i = 0; i < n; i++) assert_true(t2[i] == 2.0f * t[i]);
    free(v), free(t), free(back), free(t2);
}

/* conv3d (kernel = stride = patch, no padding) and to_tokens + gemm give the same embedding */
static void check_embedding(int n, int d, int h, int w, int c, const int p[3], int hidden) {
    const PatchShape s = {.n = n, .d = d, .h = h, .w = w, .c = c, .p = {p[0], p[1], p[2]}, .dtype = DT_F32};
    const Conv3dShape cs = conv3d_shape_3d(n, d, h, w, c, hidden, p, p, (const int[3]){0, 0, 0});
    const long tokens = (long)n * patch_tokens(&s), tdim = patch_token_dim(&s);
    assert_int_equal(conv3d_output_count(&cs), tokens * hidden);
    float *x = rnd(patch_count(&s), 5), *wt = rnd(conv3d_weight_count(&cs), 6), *bias = rnd(hidden, 7);
    float *y = rnd(tokens * hidden, 8), *tok = rnd(patch_count(&s), 9), *y2 = rnd(tokens * hidden, 10);
    void *ws = malloc(conv3d_workspace_bytes_cpu(&cs) + 1);
    conv3d_forward_cpu(&cs, x, wt, bias, NULL, y, ws);
    patch_ops_cpu.to_tokens(&s, x, tok, 0.0f);
    const GemmShape g = {.batch = 1, .m = (int)tokens, .n = hidden, .k = (int)tdim, .trans_b = 1,
                         .stride_a = tokens * tdim, .stride_b = (long)hidden * tdim, .stride_c = tokens * hidden,
                         .alpha = 1.0f, .dtype = DT_F32};
    gemm_ops_cpu.matmul(&g, tok, wt, bias, y2, NULL, 0.0f);
    double worst = 0, scale = 0;
    for (long i = 0; i < tokens * hidden; i++) {
        worst = fabs(y[i] - y2[i]) > worst ? fabs(y[i] - y2[i]) : worst;
        scale = fabs(y[i]) > scale ? fabs(y[i]) : scale;
    }
    assert_true(worst <= 1e-6 * scale);
    free(x), free(wt), free(bias), free(y), free(tok), free(y2), free(ws);
}

static void test_embedding_volume(void **state) { check_embedding(2, 8, 6, 12, 2, (const int[3]){4, 2, 3}, 24); }
static void test_embedding_view(void **state) { check_embedding(3, 1, 16, 8, 1, (const int[3]){1, 4, 4}, 16); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_embedding_volume),
        cmocka_unit_test(test_embedding_view),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

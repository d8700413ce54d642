/* test_attention_cudnn.c: the parts of the GPU attention's cuDNN path that can be checked without a GPU.
 *   - the descriptors: for the attention shapes of the vit3d configs' kinds (self-attention over packed QKV rows,
 *     cross-attention to view tokens, the bench's reference shapes) in bf16 and fp16, every tensor and operation
 *     descriptor of the forward graph and of both backward forms (dQ through the float32 accumulator, and direct)
 *     is built and finalized with the installed cuDNN library (attention_cuda_describe: no handle needed), with the
 *     operation counts of attention_cudnn_graph.cu's header (10, 18, 17);
 *   - the rules (attention_cudnn_shape_rule) that send shapes to the own kernel: float32, head dims, row strides,
 *     cuDNN versions with known bugs, tq = tk = 1 backward; and the check's tolerance per storage type.
 * What this cannot check: the operation graph (it needs a handle, so a GPU), engines, execution, results
 * (ci/gpu.sh's ops step does where a GPU is lent). A CPU-only build runs the rules and prints "skipped:" for the
 * descriptors (a failure under VX_REQUIRE_GPU=1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "attention/attention.h"
#include "require_gpu.h"

static AttentionShape packed(AttentionShape s) {
    s.ld_q = s.ld_k = s.ld_v = 3 * s.heads * s.d;
    return s;
}

static AttentionShape cross(int batch, int heads, int tq, int tk, int d, DType dt) {
    AttentionShape s = attention_shape(batch, heads, tq, tk, d, dt);
    s.ld_k = s.ld_v = 2 * heads * d; /* keys and values packed [rows][2*hidden] */
    return s;
}

static void test_descriptors_finalize(void **state) {
    (void)state;
    char why[600];
    int n = 0;
    const AttentionShape probe = attention_shape(1, 1, 16, 16, 64, DT_BF16);
    if (!attention_cuda_describe(&probe, 0, 0, &n, why, sizeof why) &&
        strcmp(why, "this build has no CUDA") == 0) {
        if (vx_require_gpu()) fail_msg("VX_REQUIRE_GPU=1 but this build has no CUDA");
        printf("skipped: the cuDNN descriptors: this build has no CUDA\n");
        return;
    }
    const DType types[2] = {DT_BF16, DT_F16};
    for (int t = 0; t < 2; t++) {
        const DType dt = types[t];
        const AttentionShape shapes[] = {
            packed(attention_shape(2, 6, 512, 512, 64, dt)),  /* vit3d self-attention, hidden 384 */
            packed(attention_shape(1, 4, 37, 37, 32, dt)),    /* odd tokens */
            cross(2, 6, 512, 128, 64, dt),                     /* vit3d_diffusion's cross-attention to the views */
            attention_shape(1, 1, 4096, 4096, 64, dt),         /* the bench's reference shape */
            attention_shape(1, 2, 45, 45, 128, dt),            /* the largest head dim taken */
            cross(1, 2, 7, 100, 48, dt),
        };
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const AttentionShape *s = &shapes[i];
            const struct { int backward, acc, ops; const char *name; } forms[3] = {
                {0, 0, 10, "forward"}, {1, 1, 18, "backward, dQ accumulated"}, {1, 0, 17, "backward, dQ direct"}};
            for (int f = 0; f < 3; f++) {
                why[0] = 0;
                const int ok = attention_cuda_describe(s, forms[f].backward, forms[f].acc, &n, why, sizeof why);
                if (!ok || n != forms[f].ops)
                    fail_msg("%s b%d h%d %dx%d d%d %s %s: %s (%d operations, %d expected)", dtype_name(dt), s->batch,
                             s->heads, s->tq, s->tk, s->d, forms[f].name, ok ? "made" : "refused", why, n,
                             forms[f].ops);
            }
        }
    }
}

static void test_rules(void **state) {
    (void)state;
    const size_t v919 = 91900, v915 = 91500, v910 = 91001, v95 = 90500;
    AttentionShape s = packed(attention_shape(2, 6, 512, 512, 64, DT_BF16));
    assert_string_equal(attention_cudnn_shape_rule(&s, 0, v919), "");
    assert_string_equal(attention_cudnn_shape_rule(&s, 1, v919), "");
    assert_string_equal(attention_cudnn_shape_rule(&s, 1, v915), ""); /* tk 512: a multiple of 128 */
    s.dtype = DT_F16;
    assert_string_equal(attention_cudnn_shape_rule(&s, 1, v919), "");
    s.dtype = DT_F32;
    assert_non_null(strstr(attention_cudnn_shape_rule(&s, 0, v919), "float32"));
    AttentionShape t = attention_shape(1, 2, 40, 40, 80, DT_BF16);
    assert_string_equal(attention_cudnn_shape_rule(&t, 0, v919), "");
    t.d = 20; /* not a multiple of 8 */
    assert_non_null(strstr(attention_cudnn_shape_rule(&t, 0, v919), "head dim 20"));
    t.d = 136; /* beyond the own kernel's check */
    assert_non_null(strstr(attention_cudnn_shape_rule(&t, 0, v919), "head dim 136"));
    t = attention_shape(1, 1, 40, 40, 64, DT_BF16);
    t.ld_k = 68; /* 136 bytes: rows not 16-byte aligned */
    assert_non_null(strstr(attention_cudnn_shape_rule(&t, 0, v919), "row strides"));
    t = attention_shape(1, 1, 37, 37, 64, DT_BF16);
    assert_string_equal(attention_cudnn_shape_rule(&t, 1, v919), "");
    assert_non_null(strstr(attention_cudnn_shape_rule(&t, 1, v915), "multiple of 128")); /* the padding-mask bug */
    assert_string_equal(attention_cudnn_shape_rule(&t, 0, v915), "");                   /* forward is fine */
    assert_non_null(strstr(attention_cudnn_shape_rule(&t, 1, v910), "9.10"));
    assert_non_null(strstr(attention_cudnn_shape_rule(&t, 0, v95), "older than 9.6.0"));
    t = attention_shape(1, 1, 1, 1, 16, DT_BF16);
    assert_string_equal(attention_cudnn_shape_rule(&t, 0, v919), "");
    assert_non_null(strstr(attention_cudnn_shape_rule(&t, 1, v919), "tq = tk = 1"));
    t = attention_shape(1, 1, 0, 9, 32, DT_BF16);
    assert_non_null(strstr(attention_cudnn_shape_rule(&t, 0, v919), "no queries"));
    /* twice op_check.c's bound for the storage type */
    assert_true(attention_cudnn_tolerance(DT_BF16) == 3.2e-2);
    assert_true(attention_cudnn_tolerance(DT_F16) == 4e-3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptors_finalize),
        cmocka_unit_test(test_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_cudnn_descriptors.c: the cuDNN side of every convolution the models run, checked with the real cuDNN
 * library on a machine without a GPU. Descriptors need no handle and no device, so for each conv of the shipped
 * configs (at batch 1, 8 and 32) this builds the descriptors exactly as kernels/conv3d_cuda.cu does
 * (conv3d_cuda_describe), and checks that cuDNN accepts them, computes the same output dims as conv3d_shape, and
 * that the batch is split into chunks of at most 2^31-1 elements per tensor only when it must be. It also checks
 * that a wrong output shape and a sample beyond cuDNN's int sizes are reported, not run.
 * A CPU-only build prints "skipped: this build has no CUDA" and exits 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "conv3d.h"
#include "core/config.h"
#include "model/model.h"

/* The largest divisor of n whose chunk keeps each tensor (x and y of one call) within int range. */
static int expected_chunk(const Conv3dShape *s) {
    const size_t in_ps = (size_t)s->d * s->h * s->w * s->c_in, out_ps = (size_t)s->od * s->oh * s->ow * s->c_out;
    const size_t per = in_ps > out_ps ? in_ps : out_ps;
    for (int c = s->n; c >= 1; c--)
        if (s->n % c == 0 && (size_t)c * per <= (size_t)INT_MAX) return c;
    return 0;
}

static void check_config(const char *path, int batch, int *split_seen) {
    Config cfg;
    config_load(&cfg, path);
    Model *m = model_build(&cfg, batch, backend_cpu());
    int convs = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (nd->kind != OP_CONV) continue;
        convs++;
        char why[600] = "";
        int chunk = -1;
        const int ok = conv3d_cuda_describe(&nd->conv, &chunk, why, sizeof why);
        if (!ok) fail_msg("%s batch %d, %s: %s", path, batch, nd->name, why);
        assert_int_equal(chunk, expected_chunk(&nd->conv));
        *split_seen |= chunk < nd->conv.n;
    }
    assert_true(convs > 5);
    model_free(m);
}

static void test_every_conv_of_the_shipped_configs_is_accepted(void **state) {
    (void)state;
    static const char *const configs[] = {"configs/default.json", "configs/ae3d-64.json", "configs/ae3d-128.json"};
    static const int batches[] = {1, 8, 32};
    int split_seen = 0;
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) check_config(configs[c], batches[b], &split_seen);
    /* ae3d-128 at batch 32 has 64-channel 128^3 tensors of 2^32 elements: the chunked path was exercised */
    assert_true(split_seen);
}

static void test_strided_and_odd_shapes_match_cudnn(void **state) {
    (void)state;
    /* n, d, h, w, c_in, c_out, k, stride, pad: odd volumes, stride 2 with odd sizes, 1x1 heads, channel counts not
     * divisible by 8 */
    static const int shapes[][9] = {{3, 7, 9, 5, 3, 5, 3, 1, 1},  {2, 9, 7, 11, 5, 12, 3, 2, 1}, {1, 4, 4, 4, 20, 3, 1, 1, 0},
                                    {2, 5, 5, 5, 1, 16, 3, 2, 0}, {5, 33, 17, 9, 7, 9, 3, 2, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *v = shapes[i];
        const Conv3dShape s = conv3d_shape(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
        char why[600] = "";
        int chunk = 0;
        if (!conv3d_cuda_describe(&s, &chunk, why, sizeof why)) fail_msg("shape %zu: %s", i, why);
        assert_int_equal(chunk, s.n);
    }
}

static void test_a_wrong_output_shape_is_reported(void **state) {
    (void)state;
    Conv3dShape s = conv3d_shape(2, 8, 8, 8, 4, 4, 3, 2, 1); /* output 4^3 */
    s.od = 8;                                                /* as if the stride were forgotten */
    char why[600] = "";
    assert_int_equal(conv3d_cuda_describe(&s, NULL, why, sizeof why), 0);
    assert_non_null(strstr(why, "cuDNN computes output dims {2, 4, 4, 4, 4}"));
}

static void test_a_sample_beyond_int_sizes_is_reported(void **state) {
    (void)state;
    const Conv3dShape s = conv3d_shape(1, 1024, 1024, 1024, 4, 4, 3, 1, 1); /* 2^32 elements in one sample */
    char why[600] = "";
    assert_int_equal(conv3d_cuda_describe(&s, NULL, why, sizeof why), 0);
    assert_non_null(strstr(why, "more than 2^31-1 elements"));
}

int main(void) {
    char why[128] = "";
    const Conv3dShape probe = conv3d_shape(1, 4, 4, 4, 1, 1, 3, 1, 1);
    if (!conv3d_cuda_describe(&probe, NULL, why, sizeof why) && strstr(why, "no CUDA")) {
        printf("skipped: %s\n", why);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_conv_of_the_shipped_configs_is_accepted),
        cmocka_unit_test(test_strided_and_odd_shapes_match_cudnn),
        cmocka_unit_test(test_a_wrong_output_shape_is_reported),
        cmocka_unit_test(test_a_sample_beyond_int_sizes_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_cudnn_descriptors.c: the cuDNN side of every convolution the models run, checked with the real cuDNN
 * library on a machine without a GPU. Descriptors need no handle and no device, so for each conv of the shipped
 * configs (at batch 1, 8 and 32) this builds the descriptors exactly as kernels/conv3d_cuda.cu does
 * (conv3d_cuda_describe), and checks that cuDNN accepts them, computes the same output dims as conv3d_shape, and
 * that the batch is split into chunks of at most 2^31-1 elements per tensor only when it must be. It also checks
 * that a wrong output shape and a sample beyond cuDNN's int sizes are reported, not run; that a single-channel
 * tensor (the first conv's input, the last conv's output) is also described as NCDHW, with a c_in == 1 filter in
 * NCHW format, addressing exactly the memory the NDHWC description does (read back from cuDNN's descriptors); and
 * which cuDNN versions get TF32 turned off for their broken 3-D kernels. Every conv is described in float32, bfloat16
 * and float16 storage (mixed precision), and the data type cuDNN holds is read back.
 * A CPU-only build prints "skipped: this build has no CUDA" and exits 0 (exit 1 with VX_REQUIRE_GPU=1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "conv3d/conv3d.h"
#include "core/config.h"
#include "hw/hw_plan.h"
#include "graph/model.h"
#include "model_of.h"
#include "require_gpu.h"
#include "test_select.h"
#ifdef VX_CUDA
#include <cudnn.h>
#endif

/* The largest divisor of n whose chunk keeps each tensor (x and y of one call) within int range. */
static int expected_chunk(const Conv3dShape *s) {
    const size_t in_ps = (size_t)s->d * s->h * s->w * s->c_in, out_ps = (size_t)s->od * s->oh * s->ow * s->c_out;
    const size_t per = in_ps > out_ps ? in_ps : out_ps;
    for (int c = s->n; c >= 1; c--)
        if (s->n % c == 0 && (size_t)c * per <= (size_t)INT_MAX) return c;
    return 0;
}

static void check_convs(const Model *m, const char *path, int batch, DType dt, int padded, int *split_seen);

/* Every conv of the config at the batch, in storage type dt (the model plans with the CPU backend; the shapes are
 * the GPU's, with the storage type the GPU run would give them: in bf16/fp16 the channel rule of src/graph/conv_pad.h
 * pads odd channel counts to multiples of 8, which the CPU's float32 plan does with pad_all_types). The CPU plans
 * float32, where pad_input_channels auto does not pad: conv_in is checked again as bf16/fp16 runs have it, its input
 * channel padded to 8 ("on"). */
static void check_config(const char *path, int batch, DType dt, int *split_seen) {
    Config cfg;
    config_load(&cfg, path);
    for (int padded = 0; padded < 2; padded++) {
        snprintf(cfg.model.pad_input_channels, sizeof cfg.model.pad_input_channels, padded ? "on" : "off");
        ModelOptions o = hw_model_options(&cfg.train);
        o.pad_all_types = dt != DT_F32;
        Model *m = model_build(&cfg.model, &o, batch, backend_cpu());
        check_convs(m, path, batch, dt, padded, split_seen);
        model_free(m);
    }
}

/* the convs of m (padded: only the one reading padded channels) described in storage type dt */
static void check_convs(const Model *m, const char *path, int batch, DType dt, int padded, int *split_seen) {
    int convs = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (nd->kind != OP_CONV || (padded && nd->pad_w < 0)) continue;
        convs++;
        Conv3dShape s = nd->conv;
        s.dtype = dt;
        char why[600] = "";
        int chunk = -1;
        const int ok = conv3d_cuda_describe(&s, &chunk, why, sizeof why);
        if (!ok) fail_msg("%s batch %d, %s, %s: %s", path, batch, nd->name, dtype_name(dt), why);
        assert_int_equal(chunk, expected_chunk(&s));
        *split_seen |= chunk < s.n;
#ifdef VX_CUDA
        Conv3dCudnnLayout l;
        assert_true(conv3d_cuda_describe_layout(&s, 0, &l, why, sizeof why));
        const int want = dt == DT_BF16 ? CUDNN_DATA_BFLOAT16 : dt == DT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
        assert_int_equal(l.x_type, want); /* the storage type reached cuDNN */
        assert_int_equal(l.w_type, want);
#endif
    }
    if (padded && dt == DT_F32) assert_int_equal(convs, 1);
    else assert_true(convs > 5 || padded);
}

static void test_every_conv_of_the_shipped_configs_is_accepted(void **state) {
    (void)state;
    static const char *const configs[] = {"configs/default.json", "configs/ae3d-64.json", "configs/ae3d-128.json",
                                          "configs/resnet3d-18-cls.json", "configs/resnet3d-50-survival.json"};
    static const int batches[] = {1, 8, 32};
    int split_seen = 0;
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
            for (int dt = 0; dt < DT_COUNT; dt++) check_config(configs[c], batches[b], (DType)dt, &split_seen);
    /* ae3d-128 at batch 32 has 64-channel 128^3 tensors of 2^32 elements: the chunked path was exercised */
    assert_true(split_seen);
}

/* On a GPU: cuDNN has a usable algorithm, in every direction the model calls, for every convolution of the shipped
 * configs (each stage of the staged one at its own size) at their batch, in float32 with TF32 on and off, bf16 and
 * fp16 (the shapes the channel rule gives them), with deterministic algorithms only (a superset of choices remains
 * without --deterministic), and in bf16 with model.pad_input_channels off (conv_in on its single channel, as the
 * pad-64 comparison runs it). Not only descriptors accepted: the plans --device auto checks before choosing the GPU
 * (conv3d_cuda_usable). VX_CONV_LOG=1 prints each plan. Skipped without a GPU; VX_REQUIRE_GPU=1 makes that a
 * failure (ci/gpu.sh's detect step runs this test first, for the answer in seconds). */
static void test_every_conv_of_the_shipped_configs_has_a_cudnn_algorithm(void **state) {
    (void)state;
    char why[2048];
    if (!backend_cuda_init(0, why, sizeof why)) {
        if (vx_require_gpu()) fail_msg("no CUDA device (%s), and VX_REQUIRE_GPU=1 turns the skip into a failure", why);
        printf("skipped: no CUDA device (%s): this test asks cuDNN for an algorithm per convolution on a GPU\n", why);
        skip();
    }
    static const char *const configs[] = {"configs/default.json", "configs/ae3d-64.json", "configs/ae3d-128.json",
                                          "configs/stages-64-128-256.json", "configs/resnet3d-18-cls.json",
                                          "configs/resnet3d-50-survival.json"};
    static const struct {
        const char *precision, *pad;
        int tf32;
    } runs[] = {{"off", "auto", 1}, {"off", "auto", 0}, {"bf16", "auto", 1}, {"fp16", "auto", 1}, {"bf16", "off", 1}};
    int checked = 0, failed = 0;
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        BackendOptions o = {.deterministic = 1, .allow_tf32 = runs[r].tf32};
        backend_cuda_set_options(&o);
        for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
            Config cfg;
            config_load(&cfg, configs[c]);
            snprintf(cfg.train.precision, sizeof cfg.train.precision, "%s", runs[r].precision);
            snprintf(cfg.model.pad_input_channels, sizeof cfg.model.pad_input_channels, "%s", runs[r].pad);
            const int stages = cfg.train.n_stages > 0 ? cfg.train.n_stages : 1;
            for (int k = 0; k < stages; k++) {
                ModelConfig model = cfg.model;
                int batch = cfg.train.batch_size > 0 ? cfg.train.batch_size : 1;
                if (cfg.train.n_stages > 0) {
                    const Stage st = config_stage(&cfg.train, cfg.model.input_size, k);
                    memcpy(model.input_size, st.input_size, sizeof model.input_size);
                    if (st.batch_size > 0) batch = st.batch_size;
                }
                const ModelOptions mo = hw_model_options(&cfg.train);
                Model *m = model_build(&model, &mo, batch, backend_cuda());
                for (int i = 0; i < m->n_nodes; i++) {
                    const Node *nd = &m->nodes[i];
                    if (nd->kind != OP_CONV) continue;
                    checked++;
                    if (conv3d_cuda_usable(&nd->conv, m->tensors[nd->in[0]].grad >= 0, why, sizeof why)) continue;
                    failed++;
                    char shape[200], ks[40];
                    conv3d_kernel_label(&nd->conv, ks, sizeof ks);
                    snprintf(shape, sizeof shape, "n=%d %dx%dx%d c_in=%d c_out=%d %s", nd->conv.n, nd->conv.d,
                             nd->conv.h, nd->conv.w, nd->conv.c_in, nd->conv.c_out, ks);
                    print_message("no algorithm: %s stage %d, precision %s, TF32 %d, pad_input_channels %s, %s (%s): "
                                  "%s\n", configs[c], k, runs[r].precision, runs[r].tf32, runs[r].pad, nd->name, shape,
                                  why);
                }
                model_free(m);
            }
        }
    }
    print_message("%d convolutions planned, %d without a usable algorithm\n", checked, failed);
    assert_int_equal(failed, 0);
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

/* Per-axis kernels, strides and paddings (conv3d_shape_3d): MONAI's ResNet stem (k 7x7x7, stride 1x2x2, pad 3x3x3,
 * with the default conv1_t_size 7 and conv1_t_stride 1, one input channel), its 2-D form on a depth-1 volume (k
 * 1x7x7), a 1x3x3 conv on a depth-1 volume, and strides differing on every axis: cuDNN accepts the descriptors
 * (float32, bf16, fp16), computes our output dims, and holds the filter dims {c_out, c_in, kd, kh, kw}. */
static void test_anisotropic_shapes_match_cudnn(void **state) {
    (void)state;
    /* n, d, h, w, c_in, c_out, then k, stride, pad per axis (d, h, w) */
    static const int shapes[][15] = {{2, 16, 32, 32, 1, 64, 7, 7, 7, 1, 2, 2, 3, 3, 3},
                                     {2, 1, 32, 32, 1, 64, 1, 7, 7, 1, 2, 2, 0, 3, 3},
                                     {3, 1, 9, 11, 8, 16, 1, 3, 3, 1, 1, 1, 0, 1, 1},
                                     {2, 9, 10, 11, 5, 6, 3, 1, 3, 2, 1, 3, 1, 0, 1},
                                     {2, 12, 14, 16, 64, 64, 3, 3, 3, 1, 2, 2, 1, 1, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *v = shapes[i];
        for (int dt = 0; dt < DT_COUNT; dt++) {
            Conv3dShape s = conv3d_shape_3d(v[0], v[1], v[2], v[3], v[4], v[5], v + 6, v + 9, v + 12);
            s.dtype = (DType)dt;
            char why[600] = "";
            int chunk = 0;
            if (!conv3d_cuda_describe(&s, &chunk, why, sizeof why)) fail_msg("shape %zu %s: %s", i, dtype_name(s.dtype), why);
            assert_int_equal(chunk, s.n);
            for (int l = 0; l < conv3d_cuda_layouts(&s); l++) {
                Conv3dCudnnLayout d;
                if (!conv3d_cuda_describe_layout(&s, l, &d, why, sizeof why)) fail_msg("shape %zu layout %d: %s", i, l, why);
                const int wdims[5] = {s.c_out, s.c_in, s.k[0], s.k[1], s.k[2]};
                assert_memory_equal(d.w_dims, wdims, sizeof wdims);
                const int ydims[5] = {s.n, s.c_out, s.od, s.oh, s.ow};
                assert_memory_equal(d.y_dims, ydims, sizeof ydims);
            }
        }
    }
    /* the stem's output: (16 + 6 - 7)/1 + 1 = 16 deep, (32 + 6 - 7)/2 + 1 = 16 high and wide */
    const Conv3dShape stem = conv3d_shape_3d(1, 16, 32, 32, 1, 64, (const int[3]){7, 7, 7}, (const int[3]){1, 2, 2},
                                             (const int[3]){3, 3, 3});
    assert_int_equal(stem.od, 16);
    assert_int_equal(stem.oh, 16);
    assert_int_equal(stem.ow, 16);
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

/* Offset of element (n, c, d, h, w) under 5-D strides {n, c, d, h, w}. */
static long offset(const int str[5], int n, int c, int d, int h, int w) {
    return (long)n * str[0] + (long)c * str[1] + (long)d * str[2] + (long)h * str[3] + (long)w * str[4];
}

/* Every element of a [n][c][d][h][w] tensor sits where the NDHWC layout puts it. */
static void expect_ndhwc_memory(const char *what, const int dims[5], const int str[5]) {
    const int n = dims[0], c = dims[1], d = dims[2], h = dims[3], w = dims[4];
    for (int in = 0; in < n; in++)
        for (int ic = 0; ic < c; ic++)
            for (int id = 0; id < d; id++)
                for (int ih = 0; ih < h; ih++)
                    for (int iw = 0; iw < w; iw++) {
                        const long want = ((((long)in * d + id) * h + ih) * w + iw) * c + ic;
                        if (offset(str, in, ic, id, ih, iw) != want)
                            fail_msg("%s: element (%d,%d,%d,%d,%d) at %ld, NDHWC has it at %ld", what, in, ic, id, ih,
                                     iw, offset(str, in, ic, id, ih, iw), want);
                    }
}

static void test_single_channel_tensors_are_also_described_as_ncdhw(void **state) {
    (void)state;
    /* the first conv of the default config (1 -> 16 channels), the last (16 -> 1), and one with both sides single */
    static const int shapes[][9] = {{2, 6, 5, 4, 1, 16, 3, 1, 1}, {2, 6, 5, 4, 16, 1, 3, 1, 1}, {3, 4, 4, 4, 1, 1, 3, 2, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *v = shapes[i];
        const Conv3dShape s = conv3d_shape(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
        assert_int_equal(conv3d_cuda_layouts(&s), 2);
        Conv3dCudnnLayout c1, plain;
        char why[600] = "";
        if (!conv3d_cuda_describe_layout(&s, 0, &c1, why, sizeof why)) fail_msg("shape %zu, layout 0: %s", i, why);
        if (!conv3d_cuda_describe_layout(&s, 1, &plain, why, sizeof why)) fail_msg("shape %zu, layout 1: %s", i, why);
        assert_string_equal(c1.name, "single channel as NCDHW");
        assert_string_equal(plain.name, "NDHWC");
        /* the single-channel side: packed NCDHW strides (C's stride is the volume, not 1) */
        const int ps_in = s.d * s.h * s.w, ps_out = s.od * s.oh * s.ow;
        if (s.c_in == 1) {
            const int want[5] = {ps_in, ps_in, s.h * s.w, s.w, 1};
            assert_memory_equal(c1.x_strides, want, sizeof want);
            assert_int_equal(c1.w_nchw, 1);
            assert_int_equal(plain.x_strides[1], 1); /* NDHWC: channel stride 1 */
        } else {
            assert_memory_equal(c1.x_strides, plain.x_strides, sizeof c1.x_strides);
            assert_int_equal(c1.w_nchw, 0);
        }
        if (s.c_out == 1) {
            const int want[5] = {ps_out, ps_out, s.oh * s.ow, s.ow, 1};
            assert_memory_equal(c1.y_strides, want, sizeof want);
        } else {
            assert_memory_equal(c1.y_strides, plain.y_strides, sizeof c1.y_strides);
        }
        assert_int_equal(plain.w_nchw, 0);
        /* both descriptions address the same memory: ours, NDHWC */
        expect_ndhwc_memory("x, single channel as NCDHW", c1.x_dims, c1.x_strides);
        expect_ndhwc_memory("y, single channel as NCDHW", c1.y_dims, c1.y_strides);
        expect_ndhwc_memory("x, NDHWC", plain.x_dims, plain.x_strides);
        expect_ndhwc_memory("y, NDHWC", plain.y_dims, plain.y_strides);
        /* the filter's dims are {c_out, c_in, k, k, k} in both; with c_in == 1, NCHW's [c_out][1][k][k][k] is the
         * memory of our [c_out][k][k][k][1] */
        const int wdims[5] = {s.c_out, s.c_in, s.k[0], s.k[1], s.k[2]};
        assert_memory_equal(c1.w_dims, wdims, sizeof wdims);
        assert_memory_equal(plain.w_dims, wdims, sizeof wdims);
    }
    /* a shape without a single channel has the NDHWC description only */
    const Conv3dShape s = conv3d_shape(2, 4, 4, 4, 3, 5, 3, 1, 1);
    assert_int_equal(conv3d_cuda_layouts(&s), 1);
    Conv3dCudnnLayout l;
    char why[600] = "";
    assert_int_equal(conv3d_cuda_describe_layout(&s, 1, &l, why, sizeof why), 0);
}

static void test_tf32_is_off_on_cudnn_versions_with_broken_3d_tf32(void **state) {
    (void)state;
    assert_int_equal(conv3d_cuda_tf32_broken(91001), 0); /* 9.10.1 */
    assert_int_equal(conv3d_cuda_tf32_broken(91002), 1); /* 9.10.2 */
    assert_int_equal(conv3d_cuda_tf32_broken(91400), 1);
    assert_int_equal(conv3d_cuda_tf32_broken(91599), 1); /* 9.15.99 */
    assert_int_equal(conv3d_cuda_tf32_broken(91600), 0); /* 9.16.0 */
    assert_int_equal(conv3d_cuda_tf32_broken(91900), 0); /* 9.19, this machine's */
    assert_int_equal(conv3d_cuda_tf32_broken(90100), 0);
}

int main(int argc, char **argv) {
    char why[128] = "";
    const Conv3dShape probe = conv3d_shape(1, 4, 4, 4, 1, 1, 3, 1, 1);
    if (!conv3d_cuda_describe(&probe, NULL, why, sizeof why) && strstr(why, "no CUDA")) {
        if (vx_require_gpu()) {
            printf("FAILED: %s, and VX_REQUIRE_GPU=1 turns the skip into a failure\n", why);
            return 1;
        }
        printf("skipped: %s\n", why);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_conv_of_the_shipped_configs_is_accepted),
        cmocka_unit_test(test_every_conv_of_the_shipped_configs_has_a_cudnn_algorithm),
        cmocka_unit_test(test_strided_and_odd_shapes_match_cudnn),
        cmocka_unit_test(test_anisotropic_shapes_match_cudnn),
        cmocka_unit_test(test_a_wrong_output_shape_is_reported),
        cmocka_unit_test(test_a_sample_beyond_int_sizes_is_reported),
        cmocka_unit_test(test_single_channel_tensors_are_also_described_as_ncdhw),
        cmocka_unit_test(test_tf32_is_off_on_cudnn_versions_with_broken_3d_tf32),
    };
    /* test names as patterns (ci/gpu.sh's detect step runs the algorithm test alone), --list prints them */
    struct CMUnitTest chosen[sizeof tests / sizeof tests[0]];
    size_t n = 0;
    const int rc = select_tests("test_cudnn_descriptors", argc, argv, tests, sizeof tests / sizeof tests[0], chosen, &n);
    if (rc >= 0) return rc;
    return _cmocka_run_group_tests("test_cudnn_descriptors", chosen, n, NULL, NULL);
}

/* test_slot_invariance.c: a sample's evaluation outputs are the same bytes whatever its batch size and its slot in
 * the batch (the promise `voxscale predict` and validation make), for every family on the CPU backend:
 *   ae3d (reconstruction and latent mean), resnet3d (the head's outputs), vit3d (reconstruction) and vit3d_diffusion
 *   (the DDIM sample from the sample's views, its noise keyed by the sample's id),
 * each under both CPU convolution paths (im2col + sgemm, oneDNN) and as measured per shape, at 1 and at 2 threads
 * (a sample alone and in a batch at the same thread count). Sample a is evaluated alone, then in slots 1, 3 and 0 of
 * batches of 3, 4 and 2 filled with another sample b; b alone against its slots likewise. Shapes are chosen so that
 * a sample's rows do not line up with the kernels' blocks (27 tokens, odd spatial sizes, batches of 3): BLAS and
 * oneDNN kernels round a row by its place in their register blocks (OpenBLAS's Haswell sgemm by the row's place
 * among 12, oneDNN's avx2 sgemm at the tail of 32), so only calls whose rows start at the sample's first row keep
 * the promise; and the measured choice must give every batch size of a sample shape the same forward path.
 * ci/isa_sweep.sh runs this under every ISA level the machine has below its own. */
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
#include "common/rng.h"
#include "conv3d/conv3d.h"
#include "conv3d/conv3d_cpu_select.h"
#include "graph/diffusion_sample.h"
#include "model_of.h"

/* the family's config: the test configs' families at sizes that do not divide the kernels' blocks */
static Config config_of(const char *family) {
    Config cfg;
    config_defaults(&cfg);
    if (strcmp(family, "ae3d") == 0) {
        config_load(&cfg, "configs/test/tiny.json");
        config_set(&cfg, "model.input_size", "[12, 8, 12]", "test");
    } else if (strcmp(family, "resnet3d") == 0) {
        config_load(&cfg, "configs/test/resnet-tiny.json");
        config_set(&cfg, "model.input_size", "[20, 12, 16]", "test");
    } else if (strcmp(family, "vit3d") == 0) {
        config_load(&cfg, "configs/test/vit3d-tiny.json");
        config_set(&cfg, "model.input_size", "[12, 12, 12]", "test"); /* 27 tokens */
    } else {
        config_load(&cfg, "configs/test/vit3d-diffusion-tiny.json");
        config_set(&cfg, "model.input_size", "[12, 12, 12]", "test");
        config_set(&cfg, "xray.img_size", "12", "test"); /* 9 view tokens per view */
    }
    return cfg;
}

static Model *model_at(const Config *cfg, int batch) {
    Model *m = model_of(cfg, batch, backend_cpu());
    model_allocate(m);
    model_init_params(m, 11);
    /* every parameter perturbed: adaLN-Zero and zero-initialised heads would otherwise output constants */
    for (int p = 0; p < m->n_params; p++)
        for (long i = 0; i < m->params[p].count; i++)
            m->param[m->params[p].offset + i] += 0.05f * vx_normal(3, (uint64_t)p, (uint64_t)i);
    return m;
}

static long vol_of(const Model *m) { return m->tensors[m->t_input].count / m->batch; }

/* sample s (0: a, 1: b): a smooth volume with noise, different per sample */
static void fill_sample(float *x, long n, int s) {
    for (long i = 0; i < n; i++)
        x[i] = 0.5f + 0.3f * sinf(0.13f * (float)i + (float)s) + 0.1f * vx_normal(17 + (uint64_t)s, 0, (uint64_t)i);
}

/* The outputs compared: each output tensor's per-sample slice, one after the other, for every slot. `out` holds
 * batch * per floats ([slot][per]); returns per. */
static long outputs(Model *m, const int *which, float *out) {
    const int n = m->batch;
    const long vol = vol_of(m);
    float *x = calloc((size_t)(n * vol), sizeof(float));
    for (int b = 0; b < n; b++) fill_sample(x + b * vol, vol, which[b]);
    long per = 0;
    if (m->family == FAMILY_VIT3D_DIFFUSION) {
        const long pix = m->tensors[m->t_views].count / n;
        float *views = malloc(sizeof(float) * (size_t)(n * pix));
        diffusion_render_views(m, x, views);
        diffusion_set_views(m, views);
        uint64_t ids[8];
        for (int b = 0; b < n; b++) ids[b] = 40 + (uint64_t)which[b]; /* a sample's noise follows its id */
        diffusion_ddim_sample(m, 2, 21, ids, x);
        memcpy(out, x, sizeof(float) * (size_t)(n * vol));
        per = vol;
        free(views);
    } else {
        memcpy(model_tensor(m, m->t_input), x, sizeof(float) * (size_t)(n * vol));
        model_forward(m, 0);
        const int ts[2] = {m->family == FAMILY_RESNET3D ? m->t_out : m->t_recon,
                           m->family == FAMILY_AE3D ? m->t_mu : -1};
        long cnt[2] = {0, 0};
        for (int k = 0; k < 2; k++) cnt[k] = ts[k] >= 0 ? m->tensors[ts[k]].count / n : 0;
        per = cnt[0] + cnt[1];
        long at = 0; /* where tensor k starts within a slot's slice */
        for (int k = 0; k < 2; k++) {
            if (ts[k] < 0) continue;
            float *t = malloc(sizeof(float) * (size_t)(n * cnt[k]));
            model_tensor_to_host(m, ts[k], t);
            for (int b = 0; b < n; b++) memcpy(out + b * per + at, t + b * cnt[k], sizeof(float) * (size_t)cnt[k]);
            free(t);
            at += cnt[k];
        }
    }
    free(x);
    return per;
}

/* how many floats of two slices differ, and the largest relative difference (for the failure's message) */
static long differ(const float *a, const float *b, long n, double *rel) {
    long d = 0;
    *rel = 0;
    for (long i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)) != 0) {
            d++;
            *rel = fmax(*rel, fabs((double)a[i] - b[i]) / fmax(fabs((double)a[i]), 1e-30));
        }
    return d;
}

static void check_family(const char *family) {
    char isa[160];
    cpu_isa_describe(isa, sizeof isa);
    static const struct {
        int batch, which[4];
    } runs[] = {{3, {1, 0, 1}}, {4, {1, 1, 1, 0}}, {2, {0, 1}}};
    /* auto: each shape measured at its first batch size, and the forward of every other batch size of the sample
     * shape on the same path (the two paths round differently: a choice per batch size would show in the bytes) */
    const int modes[3] = {CONV_MODE_IM2COL, CONV_MODE_ONEDNN, CONV_MODE_AUTO};
    const char *mode_names[3] = {"im2col", "oneDNN", "measured"};
    const Config cfg = config_of(family);
    int failures = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int threads = 1; threads <= 2; threads++) {
            conv3d_cpu_set_mode(modes[mi]);
            omp_set_num_threads(threads);
            float *alone[2] = {NULL, NULL};
            long per = 0;
            for (int s = 0; s < 2; s++) {
                Model *m = model_at(&cfg, 1);
                per = vol_of(m) * 4 + 64; /* room: every compared output is at most a few volumes */
                alone[s] = malloc(sizeof(float) * (size_t)per);
                per = outputs(m, (int[]){s}, alone[s]);
                model_free(m);
            }
            for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
                Model *m = model_at(&cfg, runs[r].batch);
                float *out = malloc(sizeof(float) * (size_t)(runs[r].batch * (vol_of(m) * 4 + 64)));
                assert_int_equal(outputs(m, runs[r].which, out), per);
                for (int b = 0; b < runs[r].batch; b++) {
                    double rel;
                    const int s = runs[r].which[b];
                    const long d = differ(alone[s], out + b * per, per, &rel);
                    if (d) {
                        failures++;
                        fprintf(stderr, "%s (%s convolutions, %d threads, %s): sample %c in slot %d of a batch of %d: "
                                "%ld of %ld outputs differ from it alone (largest relative difference %.3g)\n",
                                family, mode_names[mi], threads, isa, "ab"[s], b, runs[r].batch, d, per, rel);
                    }
                }
                free(out);
                model_free(m);
            }
            free(alone[0]), free(alone[1]);
        }
    conv3d_cpu_set_mode(CONV_MODE_AUTO);
    printf("%s: every slot and batch the same bytes as the sample alone on %s (%s)\n", family, isa,
           failures ? "FAILED" : "ok");
    assert_int_equal(failures, 0);
}

/* The measured choice: a batch size first seen after another runs the same forward path as it, and a path adopted
 * for one batch size (rank 0's, conv_agree) becomes every batch size's forward; backward stays per batch size. */
static void test_one_forward_path_per_sample_shape(void **state) {
    (void)state;
    conv3d_cpu_set_mode(CONV_MODE_AUTO);
    const int k[3] = {3, 3, 3}, st[3] = {1, 1, 1}, pad[3] = {1, 1, 1};
    const Conv3dShape one = conv3d_shape_3d(1, 6, 5, 7, 3, 8, k, st, pad);
    const Conv3dShape two = conv3d_shape_3d(2, 6, 5, 7, 3, 8, k, st, pad);
    const Conv3dShape three = conv3d_shape_3d(3, 6, 5, 7, 3, 8, k, st, pad);
    assert_true(conv3d_cpu_adopt(&three, (int[]){CONV_PATH_IM2COL, CONV_PATH_ONEDNN, CONV_PATH_ONEDNN}, "the test"));
    assert_int_equal(conv3d_cpu_path(&one, CONV3D_FORWARD), CONV_PATH_IM2COL); /* measured only backward */
    assert_true(conv3d_cpu_adopt(&one, (int[]){CONV_PATH_ONEDNN, CONV_PATH_IM2COL, CONV_PATH_IM2COL}, "the test"));
    assert_int_equal(conv3d_cpu_path(&three, CONV3D_FORWARD), CONV_PATH_ONEDNN);
    assert_int_equal(conv3d_cpu_path(&three, CONV3D_BACKWARD_DATA), CONV_PATH_ONEDNN); /* its own */
    assert_int_equal(conv3d_cpu_path(&two, CONV3D_FORWARD), CONV_PATH_ONEDNN);
    conv3d_cpu_set_mode(CONV_MODE_AUTO);
}

static void test_ae3d(void **state) { (void)state, check_family("ae3d"); }
static void test_resnet3d(void **state) { (void)state, check_family("resnet3d"); }
static void test_vit3d(void **state) { (void)state, check_family("vit3d"); }
static void test_vit3d_diffusion(void **state) { (void)state, check_family("vit3d_diffusion"); }

int main(void) {
    setenv("VX_CONV_CACHE", "off", 1); /* the measured choices of this process only: none read from or left in a file */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_forward_path_per_sample_shape),
        cmocka_unit_test(test_ae3d),
        cmocka_unit_test(test_resnet3d),
        cmocka_unit_test(test_vit3d),
        cmocka_unit_test(test_vit3d_diffusion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

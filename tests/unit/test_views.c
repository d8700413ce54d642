/* test_views.c: cmocka tests of data/views.c's views_augment, the views of an augmented volume: for every augment
 * code (augment.h: the flips and the 90-degree turns in the (h, w) plane), the given views moved by views_augment
 * equal the DRRs (drr.h, CPU) rendered from the volume augment_cpu moved, at an image side that upsamples, one that
 * downsamples and one equal to the volume's; and on a volume with h != w for the codes it allows (no odd turn).
 * And the model's side: with cfg.diff.views_given the views tensor is planned from time 0 (the host writes it
 * before node 0), and views written by model_set_views are what a training forward and the loss leave in it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "augment/augment.h"
#include "backend/backend.h"
#include "common/rng.h"
#include "data/views.h"
#include "drr/drr.h"
#include "model_of.h"

/* both views of vol [d][h][w] at img into out [2][img][img] */
static void render(int d, int h, int w, int img, const float *vol, float *out) {
    for (int v = 0; v < 2; v++) {
        const DrrShape s = {.n = 1, .d = d, .h = h, .w = w, .view = v, .img = img, .mu_scale = 3.0f,
                            .spacing = 1.0f / (float)(v == 0 ? h : w), .dtype = DT_F32};
        drr_ops_cpu.forward(&s, vol, out + (long)v * img * img);
    }
}

static void check(int d, int h, int w, int img) {
    const long n = (long)d * h * w, pix = 2L * img * img;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    float *given = malloc(sizeof(float) * (size_t)pix), *moved = malloc(sizeof(float) * (size_t)pix);
    float *rendered = malloc(sizeof(float) * (size_t)pix);
    for (long i = 0; i < n; i++) x[i] = vx_uniform01(vx_hash3(5, 0, (uint64_t)i));
    render(d, h, w, img, x, given);
    for (uint32_t code = 0; code < 32; code++) {
        if (h != w && ((code >> AUGMENT_ROT_SHIFT) & 1)) continue; /* an odd turn needs h == w (augment_code) */
        augment_cpu(d, h, w, 1, code, x, y);
        render(d, h, w, img, y, rendered);
        views_augment(img, code, given, moved);
        double worst = 0;
        for (long i = 0; i < pix; i++) worst = fmax(worst, fabs((double)moved[i] - rendered[i]));
        if (worst > 1e-6) fail_msg("code %u, volume %dx%dx%d, img %d: views differ by %g", code, d, h, w, img, worst);
    }
    free(x), free(y), free(given), free(moved), free(rendered);
}

static void test_every_code_moves_the_views_with_the_volume(void **state) {
    (void)state;
    check(4, 5, 5, 7);  /* upsampled */
    check(6, 8, 8, 3);  /* downsampled */
    check(5, 6, 6, 6);  /* one pixel per voxel (d != img: rows resampled) */
    check(4, 5, 7, 9);  /* h != w: flips and the half turn */
}

static Model *diffusion_model(int views_given) {
    Config cfg;
    config_defaults(&cfg);
    snprintf(cfg.model.family, sizeof cfg.model.family, "vit3d_diffusion");
    for (int a = 0; a < 3; a++) cfg.model.input_size[a] = 8;
    cfg.model.in_channels = 1;
    cfg.model.vit = (ViTConfig){.hidden_size = 16, .blocks = 1, .heads = 2, .patch_size = {4, 4, 4}, .mlp_ratio = 2,
                                .ln_eps = 1e-6};
    cfg.model.diff.img_size = 8;
    cfg.model.diff.patch_size = 4;
    cfg.model.diff.views_given = views_given;
    return model_of(&cfg, 2, backend_cpu());
}

static void test_given_views_live_from_time_0_and_are_what_the_step_reads(void **state) {
    (void)state;
    Model *rendered = diffusion_model(0), *m = diffusion_model(1);
    const int producer = m->tensors[m->t_views].producer;
    assert_true(producer > 0); /* q_sample first: its noise lives at time 0 only */
    /* rendered views live from time 0 too: a sampler writes them before the forward (diffusion_sample.c) */
    assert_int_equal(rendered->plan.items[rendered->tensors[rendered->t_views].act].first, 0);
    const PlanItem *v = &m->plan.items[m->tensors[m->t_views].act];
    assert_int_equal(v->first, 0);
    for (int i = 0; i < m->plan.count; i++) { /* nothing live before the views' node shares their bytes */
        const PlanItem *o = &m->plan.items[i];
        if (o == v || o->offset >= v->offset + v->bytes || v->offset >= o->offset + o->bytes) continue;
        assert_true(o->first > v->last || o->last < v->first);
    }
    model_allocate(m);
    model_init_params(m, 3);
    const long n = m->tensors[m->t_views].count;
    float *views = malloc(sizeof(float) * (size_t)n), *back = malloc(sizeof(float) * (size_t)n);
    float *x = calloc((size_t)m->tensors[m->t_input].count, sizeof(float));
    for (long i = 0; i < n; i++) views[i] = vx_uniform01(vx_hash3(9, 1, (uint64_t)i));
    m->be->copy_to_device(model_tensor(m, m->t_input), x, sizeof(float) * (size_t)m->tensors[m->t_input].count);
    model_set_views(m, views);
    model_set_first_sample(m, 0);
    model_forward(m, 1);
    model_loss(m);
    model_tensor_to_host(m, m->t_views, back);
    for (long i = 0; i < n; i++) assert_true(back[i] == views[i]); /* not rendered over (x is 0: they would be 0) */
    free(views), free(back), free(x);
    model_free(m);
    model_free(rendered);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_moves_the_views_with_the_volume),
        cmocka_unit_test(test_given_views_live_from_time_0_and_are_what_the_step_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

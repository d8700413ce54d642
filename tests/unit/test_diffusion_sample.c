/* test_diffusion_sample.c: vit3d_diffusion's DDIM sampler (src/graph/diffusion_sample.c) on the CPU backend, at a tiny
 * config (8^3 volume in 4^3 patches, 8^2 views in 4^2 patches, hidden 32, 2 heads, 1 block) with its parameters
 * perturbed (adaLN-Zero and the zero final Linear would otherwise predict 0 whatever the input):
 *   - the sampling forward (m->sampling: x_t and the views written by the caller) predicts bit for bit what the
 *     training forward predicts from the x_t and views it made itself, with the data tensor overwritten by garbage
 *     (so nothing reads it) and nothing in the arena clobbering what was written before the forward;
 *   - diffusion_ddim_sample in 1 and 2 steps equals the DDIM recursion written out on the host from the model's own
 *     predictions (timesteps 0, and 500 then 0 of 1000; alphabar 1 past t = 0), with x_T from vx_normal;
 *   - the same seed and ids give the same bits; a sample's noise follows its id, not its slot;
 *   - a cascade (an 8^3 stage over a 4^3 network): the condition is the earlier network's x0 estimate at its own
 *     draw, resampled, and in sampling the earlier network's sample, kept through every step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "graph/diffusion_sample.h"
#include "graph/diffusion_schedule.h"
#include "graph/model_exec_diff.h"
#include "model_of.h"

#define BATCH 2

/* perturbed parameters (adaLN-Zero's zeros would make every prediction 0); the CPU backend's memory is the host's */
static void perturb(Model *m, uint64_t seed) {
    for (int p = 0; p < m->n_params; p++)
        for (long i = 0; i < m->params[p].count; i++)
            m->param[m->params[p].offset + i] += 0.05f * vx_normal(seed, (uint64_t)p, (uint64_t)i);
}

/* the tiny config: 8^3 in 4^3 patches, 8^2 views in 4^2 patches, hidden 32, 2 heads, 1 block; cascade levels below
 * it when the caller adds them */
static Config tiny_config(void) {
    Config cfg;
    config_defaults(&cfg);
    snprintf(cfg.model.family, sizeof cfg.model.family, "vit3d_diffusion");
    for (int a = 0; a < 3; a++) cfg.model.input_size[a] = 8;
    cfg.model.in_channels = 1;
    cfg.model.vit = (ViTConfig){.hidden_size = 32, .blocks = 1, .heads = 2, .patch_size = {4, 4, 4}, .mlp_ratio = 2,
                                .ln_eps = 1e-6};
    cfg.model.diff.img_size = 8;
    cfg.model.diff.patch_size = 4;
    return cfg;
}

static Model *ready_from(const Config *cfg) {
    Model *m = model_of(cfg, BATCH, backend_cpu());
    model_allocate(m);
    model_init_params(m, 99);
    perturb(m, 5);
    return m;
}

static Model *ready(void) {
    const Config cfg = tiny_config();
    return ready_from(&cfg);
}

static long vol_count(const Model *m) { return m->tensors[m->t_input].count / m->batch; }

/* x0: a smooth volume per sample */
static void fill_x0(const Model *m, float *x) {
    const long per = vol_count(m);
    for (int b = 0; b < m->batch; b++)
        for (long i = 0; i < per; i++)
            x[b * per + i] = 0.5f + 0.4f * sinf(0.7f * (float)(i / 64) + (float)b) * cosf(0.5f * (float)(i / 8 % 8));
}

static void test_sampling_forward_is_the_training_forward(void **state) {
    (void)state;
    Model *m = ready();
    const long n_in = m->tensors[m->t_input].count, n_v = m->tensors[m->t_views].count;
    float *x0 = malloc(sizeof(float) * (size_t)n_in), *xt = malloc(sizeof(float) * (size_t)n_in);
    float *views = malloc(sizeof(float) * (size_t)n_v), *a = malloc(sizeof(float) * (size_t)n_in);
    float *b = malloc(sizeof(float) * (size_t)n_in);
    fill_x0(m, x0);
    memcpy(model_tensor(m, m->t_input), x0, sizeof(float) * (size_t)n_in);
    const int t[BATCH] = {120, 700};
    model_set_first_sample(m, 3); /* the noise offset */
    diff_set_timesteps(m, t);
    model_forward(m, 0);
    model_tensor_to_host(m, m->t_recon, a);
    model_tensor_to_host(m, m->t_xt, xt);
    model_tensor_to_host(m, m->t_views, views);
    /* the views the sampler's renderer gives are the training forward's */
    float *rendered = malloc(sizeof(float) * (size_t)n_v);
    diffusion_render_views(m, x0, rendered);
    assert_memory_equal(rendered, views, sizeof(float) * (size_t)n_v);
    /* garbage everywhere but the parameters, then x_t and the views written; the data tensor not read */
    memset(m->arena, 0x7f, m->plan.total);
    diff_set_timesteps(m, t);
    memcpy(model_tensor(m, m->t_xt), xt, sizeof(float) * (size_t)n_in);
    diffusion_set_views(m, views);
    m->sampling = 1;
    model_forward(m, 0);
    m->sampling = 0;
    model_tensor_to_host(m, m->t_recon, b);
    double amax = 0;
    for (long i = 0; i < n_in; i++) amax = fmax(amax, fabs(a[i]));
    assert_true(amax > 1e-3); /* the comparison is of a real prediction */
    assert_memory_equal(a, b, sizeof(float) * (size_t)n_in);
    free(rendered), free(x0), free(xt), free(views), free(a), free(b);
    model_free(m);
}

/* the model's prediction at timestep t for x_t (sampling forward), into pred */
static void predict_at(Model *m, int t, const float *xt, float *pred) {
    const int ts[BATCH] = {t, t};
    diff_set_timesteps(m, ts);
    memcpy(model_tensor(m, m->t_xt), xt, sizeof(float) * (size_t)m->tensors[m->t_xt].count);
    m->sampling = 1;
    model_forward(m, 0);
    m->sampling = 0;
    model_tensor_to_host(m, m->t_recon, pred);
}

/* DDIM on the host from the model's predictions (v-parameterisation) */
static void host_ddim(Model *m, int steps, uint64_t seed, const uint64_t *ids, float *x) {
    const long per = vol_count(m), n = per * m->batch;
    const int T = m->cfg.diff.timesteps;
    for (int b = 0; b < m->batch; b++)
        for (long i = 0; i < per; i++) x[b * per + i] = vx_normal(seed, 0xD1F2ull, ids[b] * (uint64_t)per + (uint64_t)i);
    int ts[16];
    const DdimSpacing sp = (DdimSpacing)diffusion_ddim_spacing_parse(m->cfg.diff.timestep_spacing);
    diffusion_ddim_timesteps(sp, T, steps, ts);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int s = 0; s < steps; s++) {
        predict_at(m, ts[s], x, v);
        float a, sg, an, sn;
        diffusion_coefficients(m->alphabar[ts[s]], &a, &sg);
        diffusion_coefficients(diffusion_ddim_next_alphabar(sp, m->alphabar, T, steps, s), &an, &sn);
        for (long i = 0; i < n; i++) {
            const float x0 = a * x[i] - sg * v[i], eps = sg * x[i] + a * v[i];
            x[i] = an * x0 + sn * eps;
        }
    }
    free(v);
}

static void test_ddim_is_the_recursion(void **state) {
    (void)state;
    Model *m = ready();
    const long n_in = m->tensors[m->t_input].count, n_v = m->tensors[m->t_views].count;
    float *x0 = malloc(sizeof(float) * (size_t)n_in), *views = malloc(sizeof(float) * (size_t)n_v);
    float *got = malloc(sizeof(float) * (size_t)n_in), *want = malloc(sizeof(float) * (size_t)n_in);
    float *again = malloc(sizeof(float) * (size_t)n_in);
    fill_x0(m, x0);
    diffusion_render_views(m, x0, views);
    const uint64_t ids[BATCH] = {4, 9};
    for (int steps = 1; steps <= 2; steps++) {
        diffusion_set_views(m, views);
        diffusion_ddim_sample(m, steps, 21, ids, got);
        assert_int_equal(m->sampling, 0);
        host_ddim(m, steps, 21, ids, want);
        double err = 0, mag = 0;
        for (long i = 0; i < n_in; i++) err = fmax(err, fabs(got[i] - want[i])), mag = fmax(mag, fabs(want[i]));
        assert_true(err <= 1e-5 * mag);
        diffusion_ddim_sample(m, steps, 21, ids, again);
        assert_memory_equal(got, again, sizeof(float) * (size_t)n_in);
    }
    /* both slots with the first sample's views: id 4 in slot 1 gives slot 0's sample with id 4 */
    const long per = vol_count(m), pix = n_v / BATCH;
    memcpy(views + pix, views, sizeof(float) * (size_t)pix);
    diffusion_set_views(m, views);
    const uint64_t same[BATCH] = {4, 4};
    diffusion_ddim_sample(m, 2, 21, same, got);
    assert_memory_equal(got, got + per, sizeof(float) * (size_t)per);
    const uint64_t other[BATCH] = {4, 5};
    diffusion_ddim_sample(m, 2, 21, other, again);
    assert_memory_equal(got, again, sizeof(float) * (size_t)per);
    assert_memory_not_equal(got + per, again + per, sizeof(float) * (size_t)per);
    free(x0), free(views), free(got), free(want), free(again);
    model_free(m);
}

/* A cascade's later stage (8^3, hidden 32, 4^3 patches) over its earlier network (4^3, hidden 16, 2^3 patches), each
 * initialized and perturbed; the earlier one's parameters are the later one's buffer (set after the later one's
 * initialization, which resets its buffers). */
static Model *cascade_ready(void) {
    Config cfg = tiny_config();
    cfg.model.cascade_n = 1;
    cfg.model.cascade[0] = (CascadeLevel){.input_size = {4, 4, 4}, .hidden_size = 16, .blocks = 1, .heads = 2,
                                          .patch_size = {2, 2, 2}, .mlp_ratio = 2};
    Model *m = ready_from(&cfg);
    Model *p = m->cascade_prev;
    assert_non_null(p);
    assert_true(p->param == m->bufs + m->buffers[m->cascade_buffer].offset);
    model_init_params(p, 98);
    perturb(p, 6);
    return m;
}

/* sample b's volume src [n][gin^3] resampled to dst [n][gout^3] (one channel), as the resample op does */
static void resample_batch(const float *src, int gin, float *dst, int gout) {
    const long in = (long)gin * gin * gin, out = (long)gout * gout * gout;
    for (int b = 0; b < BATCH; b++)
        model_resample_grid(src + b * in, (const int[3]){gin, gin, gin}, dst + b * out, (const int[3]){gout, gout, gout}, 1);
}

/* The condition a cascade's later stage reads in training: the earlier network's input is the batch resampled to its
 * grid, and the condition is its x0 estimate, x0 = alpha x_t - sigma v at its own timesteps, resampled back. */
static void test_cascade_condition_is_the_earlier_estimate(void **state) {
    (void)state;
    Model *m = cascade_ready(), *p = m->cascade_prev;
    const long n_hi = m->tensors[m->t_input].count, n_lo = p->tensors[p->t_input].count;
    assert_int_equal(n_lo * 8, n_hi);
    assert_int_equal(m->tensors[m->t_cascade].count, n_hi);
    float *x0 = malloc(sizeof(float) * (size_t)n_hi), *lo = malloc(sizeof(float) * (size_t)n_lo);
    float *got = malloc(sizeof(float) * (size_t)n_lo), *xt = malloc(sizeof(float) * (size_t)n_lo);
    float *v = malloc(sizeof(float) * (size_t)n_lo), *est = malloc(sizeof(float) * (size_t)n_lo);
    float *want = malloc(sizeof(float) * (size_t)n_hi), *cond = malloc(sizeof(float) * (size_t)n_hi);
    fill_x0(m, x0);
    memcpy(model_tensor(m, m->t_input), x0, sizeof(float) * (size_t)n_hi);
    model_set_first_sample(m, 3); /* the earlier network's timesteps and noise too, at its own seed */
    model_forward(m, 0);
    resample_batch(x0, 8, lo, 4);
    model_tensor_to_host(p, p->t_input, got);
    assert_memory_equal(lo, got, sizeof(float) * (size_t)n_lo);
    const float *coef = model_diffusion_coefficients(p), *mine = model_diffusion_coefficients(m);
    assert_true(coef[0] != mine[0] || coef[1] != mine[1]); /* its own draw of timesteps */
    model_tensor_to_host(p, p->t_xt, xt);
    model_tensor_to_host(p, p->t_recon, v);
    const long per = n_lo / BATCH;
    for (long i = 0; i < n_lo; i++) {
        const int b = (int)(i / per);
        est[i] = (float)((double)coef[BATCH + b] * xt[i] - (double)coef[2 * BATCH + b] * v[i]);
    }
    resample_batch(est, 4, want, 8);
    model_tensor_to_host(m, m->t_cascade, cond);
    double err = 0, mag = 0;
    for (long i = 0; i < n_hi; i++) err = fmax(err, fabs(cond[i] - want[i])), mag = fmax(mag, fabs(want[i]));
    assert_true(mag > 0.1 && err <= 1e-5 * mag);
    free(x0), free(lo), free(got), free(xt), free(v), free(est), free(want), free(cond);
    model_free(m);
}

/* In predict the earlier network samples first (the same views, seed and ids), and its sample, resampled, is the
 * later stage's condition through every one of its steps: still there after the last (nothing in the arena may take
 * its place between the sampler's forwards), and the later stage's sample is the DDIM recursion given it. */
static void test_cascade_sample_keeps_the_earlier_sample(void **state) {
    (void)state;
    Model *m = cascade_ready(), *p = m->cascade_prev;
    const long n_hi = m->tensors[m->t_input].count, n_lo = p->tensors[p->t_input].count;
    const long n_v = m->tensors[m->t_views].count;
    float *x0 = malloc(sizeof(float) * (size_t)n_hi), *views = malloc(sizeof(float) * (size_t)n_v);
    float *got = malloc(sizeof(float) * (size_t)n_hi), *want = malloc(sizeof(float) * (size_t)n_hi);
    float *early = malloc(sizeof(float) * (size_t)n_lo), *up = malloc(sizeof(float) * (size_t)n_hi);
    float *cond = malloc(sizeof(float) * (size_t)n_hi);
    fill_x0(m, x0);
    diffusion_render_views(m, x0, views);
    const uint64_t ids[BATCH] = {4, 9};
    diffusion_set_views(m, views);
    diffusion_ddim_sample(m, 3, 21, ids, got);
    diffusion_set_views(p, views);
    diffusion_ddim_sample(p, 3, 21, ids, early);
    resample_batch(early, 4, up, 8);
    model_tensor_to_host(m, m->t_cascade, cond);
    assert_memory_equal(up, cond, sizeof(float) * (size_t)n_hi);
    host_ddim(m, 3, 21, ids, want);
    double err = 0, mag = 0;
    for (long i = 0; i < n_hi; i++) err = fmax(err, fabs(got[i] - want[i])), mag = fmax(mag, fabs(want[i]));
    assert_true(err <= 1e-5 * mag);
    free(x0), free(views), free(got), free(want), free(early), free(up), free(cond);
    model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampling_forward_is_the_training_forward),
        cmocka_unit_test(test_ddim_is_the_recursion),
        cmocka_unit_test(test_cascade_condition_is_the_earlier_estimate),
        cmocka_unit_test(test_cascade_sample_keeps_the_earlier_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

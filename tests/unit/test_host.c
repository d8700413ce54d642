/* test_host.c: unit tests of the host-side pieces the integration tests reach only indirectly: the arena planner,
 * the learning-rate schedule, the phantom generator and the prefetching loader, the model's memory plan. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "data.h"
#include "model.h"
#include "plan.h"
#include "schedule.h"

/* No two items whose live intervals overlap may share bytes. */
static void assert_plan_valid(const Plan *p) {
    for (int i = 0; i < p->count; i++) {
        const PlanItem *a = &p->items[i];
        assert_true(a->offset + a->bytes <= p->total);
        for (int j = i + 1; j < p->count; j++) {
            const PlanItem *b = &p->items[j];
            int live_together = a->first <= b->last && b->first <= a->last;
            int share_bytes = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
            if (live_together && share_bytes) fail_msg("items %d and %d overlap in time and memory", i, j);
        }
    }
}

static void test_plan_reuses_dead_memory(void **state) {
    (void)state;
    Plan p = {0};
    plan_add(&p, 1000, 0, 1); /* dies before the next two are born */
    plan_add(&p, 1000, 2, 3);
    plan_add(&p, 500, 2, 3);
    plan_solve(&p);
    assert_plan_valid(&p);
    assert_int_equal(p.items[0].bytes, 1024); /* rounded to 256 */
    assert_int_equal(p.total, 1024 + 512);    /* the first item's bytes were reused */
    assert_int_equal(plan_unshared_bytes(&p), 1024 + 1024 + 512);
    plan_free(&p);
}

static void test_plan_random_intervals_never_collide(void **state) {
    (void)state;
    srand(3);
    for (int trial = 0; trial < 50; trial++) {
        Plan p = {0};
        int n = 1 + rand() % 80;
        for (int i = 0; i < n; i++) {
            int a = rand() % 100, b = rand() % 100;
            plan_add(&p, (size_t)(1 + rand() % 100000), a < b ? a : b, a < b ? b : a);
        }
        plan_solve(&p);
        assert_plan_valid(&p);
        assert_true(p.total <= plan_unshared_bytes(&p));
        plan_free(&p);
    }
}

static void test_model_plan_is_valid_and_saves_memory(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.res_blocks = 2;
    Model *m = model_build(&cfg, 2, backend_cpu());
    assert_plan_valid(&m->plan);
    assert_true(m->plan.total < plan_unshared_bytes(&m->plan));
    /* Every gradient is overwritten by exactly one node (beta 0) before anything adds to it. */
    for (int t = 0; t < m->n_tensors; t++) {
        if (m->tensors[t].grad < 0) continue;
        int writers0 = 0;
        for (int i = 0; i < m->n_nodes; i++)
            for (int s = 0; s < 2; s++)
                if (m->nodes[i].in[s] == t && m->nodes[i].dx_beta[s] == 0.0f) writers0++;
        if (t == m->t_recon) assert_int_equal(writers0, 0); /* the loss writes it */
        else assert_int_equal(writers0, 1);
    }
    /* Parameters tile the flat buffer exactly, in reverse creation order. */
    long covered = 0;
    for (int i = 0; i < m->n_params; i++) covered += m->params[i].count;
    assert_int_equal(covered, m->param_count);
    assert_int_equal(m->params[m->n_params - 1].offset, 0);
    assert_int_equal(m->params[0].offset + m->params[0].count, m->param_count);
    model_free(m);
}

static void test_schedule_warmup_then_cosine(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.lr = 1e-3;
    cfg.min_lr = 1e-5;
    cfg.warmup_steps = 10;
    cfg.steps = 110;
    assert_float_equal(schedule_lr(&cfg, 0), 1e-4, 1e-12);
    assert_float_equal(schedule_lr(&cfg, 9), 1e-3, 1e-12);
    assert_float_equal(schedule_lr(&cfg, 10), 1e-3, 1e-12);
    assert_float_equal(schedule_lr(&cfg, 109), 1e-5, 1e-12);
    double mid = schedule_lr(&cfg, 10 + 99 / 2.0);
    assert_true(mid > 1e-5 && mid < 1e-3);
    for (long s = 11; s < 110; s++) assert_true(schedule_lr(&cfg, s) <= schedule_lr(&cfg, s - 1));
}

static void test_phantom_is_a_function_of_seed_and_index(void **state) {
    (void)state;
    const int n = 12 * 10 * 8 * 2;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *c = malloc(n * sizeof(float));
    phantom_generate(5, 17, 12, 10, 8, 2, 0.02f, a);
    phantom_generate(5, 17, 12, 10, 8, 2, 0.02f, b);
    phantom_generate(5, 18, 12, 10, 8, 2, 0.02f, c);
    assert_memory_equal(a, b, n * sizeof(float));
    assert_memory_not_equal(a, c, n * sizeof(float));
    double mean = 0, lo = 1e9, hi = -1e9;
    for (int i = 0; i < n; i++) {
        assert_true(isfinite(a[i]));
        mean += a[i] / n;
        lo = fmin(lo, a[i]);
        hi = fmax(hi, a[i]);
    }
    assert_true(hi - lo > 0.1); /* there is structure, not just noise */
    assert_true(mean > -0.2 && mean < 1.2);
    free(a);
    free(b);
    free(c);
}

static void test_loader_delivers_batches_in_order_from_any_start(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.input_size[0] = cfg.input_size[1] = cfg.input_size[2] = 8;
    cfg.prefetch = 2;
    const int batch = 3;
    long vol = 8 * 8 * 8;
    float *want = malloc(vol * sizeof(float));
    Loader l;
    loader_start(&l, &cfg, batch, 5);
    for (int k = 5; k < 12; k++) {
        const float *got = loader_next(&l);
        for (int b = 0; b < batch; b++) {
            phantom_generate((uint64_t)cfg.seed, (uint64_t)(k * batch + b), 8, 8, 8, 1, (float)cfg.data_noise, want);
            assert_memory_equal(got + b * vol, want, vol * sizeof(float));
        }
        loader_release(&l);
    }
    loader_stop(&l);
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_reuses_dead_memory),
        cmocka_unit_test(test_plan_random_intervals_never_collide),
        cmocka_unit_test(test_model_plan_is_valid_and_saves_memory),
        cmocka_unit_test(test_schedule_warmup_then_cosine),
        cmocka_unit_test(test_phantom_is_a_function_of_seed_and_index),
        cmocka_unit_test(test_loader_delivers_batches_in_order_from_any_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

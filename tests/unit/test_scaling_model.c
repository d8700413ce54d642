/* test_scaling_model.c: bench scaling's step model (src/bench/scaling_model.c) against hand-computed cases. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "bench/scaling_model.h"

/* three buckets ready at 2, 5 and 9 ms of a 10 ms backward, 1, 4 and 2 MB; fwd 4 ms, opt 1 ms */
static double ready[3] = {2e-3, 5e-3, 9e-3}, bytes[3] = {1e6, 4e6, 2e6};
static const Timeline TL = {.fwd = 4e-3, .bwd = 10e-3, .opt = 1e-3, .ready = ready, .bytes = bytes, .nb = 3};

static void test_ring_cost(void **state) {
    (void)state;
    /* 4 ranks, a = 10 us, B = 1 GB/s: 6 x 10 us + 1.5 x 2 MB / 1 GB/s = 60 us + 3 ms */
    assert_true(fabs(scaling_allreduce_time(4, 2e6, 10e-6, 1e9) - 3.06e-3) < 1e-12);
    assert_true(scaling_allreduce_time(1, 2e6, 10e-6, 1e9) == 0.0);
}

static void test_one_rank_is_the_measured_step(void **state) {
    (void)state;
    assert_true(fabs(scaling_project_step(&TL, 1, 1e-3, 1e6, 1.0) - 15e-3) < 1e-12);
}

static void test_hidden_behind_backward(void **state) {
    (void)state;
    /* 2 ranks, a = 0, B = 2 GB/s: cost = S / 2 GB/s = 0.5, 2, 1 ms; ends 2.5, 7, 10 ms: backward's 10 ms hides it */
    assert_true(fabs(scaling_project_step(&TL, 2, 0, 2e9, 1.0) - 15e-3) < 1e-12);
}

static void test_exposed_and_queued(void **state) {
    (void)state;
    /* 2 ranks, a = 0, B = 0.5 GB/s: cost 2, 8, 4 ms; bucket 0 2..4, bucket 1 queued 5..13, bucket 2 13..17:
     * 7 ms beyond backward's 10 -> 4 + 17 + 1 = 22 ms */
    assert_true(fabs(scaling_project_step(&TL, 2, 0, 0.5e9, 1.0) - 22e-3) < 1e-12);
}

static void test_shared_cores_stretch_compute(void **state) {
    (void)state;
    /* the same with compute x2: ready 4, 10, 18 ms of a 20 ms backward; ends 6, 18, 22 -> 8 + 22 + 2 = 32 ms */
    assert_true(fabs(scaling_project_step(&TL, 2, 0, 0.5e9, 2.0) - 32e-3) < 1e-12);
}

static void test_zero_modes(void **state) {
    (void)state;
    /* 2 ranks, a = 0, B = 0.5 GB/s, parameters 7 MB (the buckets' sum), compute x1 */
    const ZeroComm ddp = {.stage = 0}, z1 = {.stage = 1, .param_bytes = 7e6}, z2 = {.stage = 2, .param_bytes = 7e6};
    assert_true(fabs(scaling_project_step_zero(&TL, 2, 0, 0.5e9, 1.0, &ddp) - 22e-3) < 1e-12); /* as DDP's */
    /* ZeRO-1: DDP's buckets (ending at 17 ms), opt 1 ms / 2, all-gather 1/2 x 7 MB / 0.5 GB/s = 7 ms:
     * 4 + 17 + 0.5 + 7 = 28.5 ms */
    assert_true(fabs(scaling_project_step_zero(&TL, 2, 0, 0.5e9, 1.0, &z1) - 28.5e-3) < 1e-12);
    /* ZeRO-2: reduce-scatters of 1, 4, 2 ms: 2..3, 5..9, 9..11 -> 4 + 11 + 0.5 + 7 = 22.5 ms; with a = 10 us the
     * buckets take 10 us more each (2..3.01, 5..9.01, 9.01..11.02), the norm's parts 10 us and the all-gather 10 us:
     * 4 + 11.02 + 0.01 + 0.5 + 7.01 = 22.54 ms */
    assert_true(fabs(scaling_project_step_zero(&TL, 2, 0, 0.5e9, 1.0, &z2) - 22.5e-3) < 1e-12);
    assert_true(fabs(scaling_project_step_zero(&TL, 2, 10e-6, 0.5e9, 1.0, &z2) - 22.54e-3) < 1e-12);
    /* ZeRO-2 moves what DDP moves: a reduce-scatter and an all-gather of S cost one all-reduce of S */
    assert_true(fabs(2 * scaling_half_ring_time(4, 3e6, 5e-6, 1e9) - scaling_allreduce_time(4, 3e6, 5e-6, 1e9)) < 1e-15);
    /* offload: + 2 x 7 MB / 2 / 10 GB/s = 0.7 ms */
    const ZeroComm off = {.stage = 2, .offload = 1, .param_bytes = 7e6, .host_bus = 10e9};
    assert_true(fabs(scaling_project_step_zero(&TL, 2, 0, 0.5e9, 1.0, &off) - 23.2e-3) < 1e-12);
    /* one rank: no communication, the whole optimizer */
    assert_true(fabs(scaling_project_step_zero(&TL, 1, 1e-3, 1e6, 1.0, &z2) - 15e-3) < 1e-12);
}

/* the ring fit recovers alpha and bus from exact model times; where the times did not grow with the size (a loaded
 * machine), it still gives a link: bus from the largest message, alpha from the smallest, and says so */
static void test_ring_fit(void **state) {
    (void)state;
    double bytes[7], secs[7];
    for (int i = 0; i < 7; i++)
        bytes[i] = 4096.0 * (1 << (2 * i)), secs[i] = scaling_allreduce_time(4, bytes[i], 20e-6, 5e9);
    RingFit f = scaling_fit_ring(4, 7, bytes, secs);
    assert_true(fabs(f.alpha / 20e-6 - 1) < 1e-9 && fabs(f.bus / 5e9 - 1) < 1e-9 && f.worst_error < 1e-9);
    assert_string_equal(f.method, "least squares on relative error");
    /* 2 ranks whose small messages waited longest behind a descheduled rank: 30 ms at 4 KiB down to 18 ms at 16
     * MiB, so the fitted slope is negative (a link with no bandwidth, before this fallback) */
    for (int i = 0; i < 7; i++) secs[i] = 30e-3 - 2e-3 * i;
    f = scaling_fit_ring(2, 7, bytes, secs);
    assert_true(strstr(f.method, "did not grow") != NULL);
    assert_true(fabs(f.bus - 1.0 * bytes[6] / secs[6]) < 1e-3 * f.bus && fabs(f.alpha - 15e-3) < 1e-12);
    /* one rank or one size: nothing to fit */
    assert_true(scaling_fit_ring(1, 7, bytes, secs).bus == 0 && scaling_fit_ring(2, 1, bytes, secs).bus == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_cost),
        cmocka_unit_test(test_one_rank_is_the_measured_step),
        cmocka_unit_test(test_hidden_behind_backward),
        cmocka_unit_test(test_exposed_and_queued),
        cmocka_unit_test(test_shared_cores_stretch_compute),
        cmocka_unit_test(test_zero_modes),
        cmocka_unit_test(test_ring_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

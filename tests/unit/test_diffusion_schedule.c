/* test_diffusion_schedule.c: cmocka tests of the diffusion schedules' host math (src/graph/diffusion_schedule.c)
 * against values derived here independently of its code:
 *   - linear: the first two alphabars by hand (1 - beta_0, and times 1 - beta_1 with beta_1 = 1e-4 + 0.0199/999);
 *   - cosine: below the clip the product telescopes, alphabar[t] = f((t+1)/T) / f(0); the last beta is clipped at
 *     0.999 (f(1) = 0); alphabar[0] within 1e-4 of 1;
 *   - both: strictly decreasing in (0, 1);
 *   - min-SNR-gamma: for v, SNR <= gamma gives alphabar itself and SNR > gamma gives gamma * (1 - alphabar); for
 *     epsilon 1 and gamma / SNR;
 *   - DDIM "leading" timesteps (980, 960, ..., 0 for 50 of 1000; 666, 333, 0 for 3) and "trailing" ones (999, 979,
 *     ..., 19 for 50; 999, 666, 332 for 3; for 16 the halves round to even: 937 and 811), and the next alphabar
 *     (the next step's, 1 after the last step).
 * `test_diffusion_schedule --dump DIR` writes DIR/linear.f64 and DIR/cosine.f64 (T = 1000) and DIR/ddim_<N>.i32
 * (leading), DIR/ddim_trailing_<N>.i32
 * for tests/integration/test_diffusion_schedule_torch.py, which checks them against diffusers' formulas in torch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/diffusion_schedule.h"

#define T 1000

static double f_cos(double u) { return pow(cos((u + 0.008) / 1.008 * M_PI / 2), 2); }

static void test_linear_by_hand(void **state) {
    double ab[T];
    diffusion_alphabar(DIFFUSION_SCHEDULE_LINEAR, T, ab);
    assert_true(fabs(ab[0] - 0.9999) < 1e-15);
    assert_true(fabs(ab[1] - 0.9999 * (1 - (0.0001 + 0.0199 / 999))) < 1e-15);
    assert_true(fabs(ab[T - 1] / ab[T - 2] - (1 - 0.02)) < 1e-12); /* the last beta is beta_end */
    /* DDPM's table ends near 4e-5 (a known figure: alphabar_T = prod(1 - beta) ~ exp(-sum beta) ~ exp(-10.05)) */
    assert_true(ab[T - 1] > 3.5e-5 && ab[T - 1] < 4.5e-5);
}

static void test_cosine_telescopes(void **state) {
    double ab[T];
    diffusion_alphabar(DIFFUSION_SCHEDULE_COSINE, T, ab);
    for (int t = 0; t < T - 1; t++) assert_true(fabs(ab[t] - f_cos((t + 1.0) / T) / f_cos(0)) < 1e-12);
    assert_true(fabs(ab[T - 1] - ab[T - 2] * 0.001) < 1e-18); /* beta clipped at 0.999 */
    assert_true(ab[0] > 1 - 1e-4 && ab[0] < 1);
}

static void test_decreasing(void **state) {
    for (int k = 0; k < 2; k++) {
        double ab[T];
        diffusion_alphabar((DiffusionSchedule)k, T, ab);
        assert_true(ab[0] < 1 && ab[T - 1] > 0);
        for (int t = 1; t < T; t++) assert_true(ab[t] < ab[t - 1]);
    }
    double one;
    diffusion_alphabar(DIFFUSION_SCHEDULE_LINEAR, 1, &one);
    assert_true(fabs(one - 0.9999) < 1e-15);
}

static void test_min_snr(void **state) {
    const double gamma = 5.0;
    for (double ab = 0.01; ab < 1; ab += 0.07) {
        const double snr = ab / (1 - ab);
        assert_true(fabs(diffusion_snr(ab) - snr) < 1e-12 * (1 + snr));
        const double wv = diffusion_min_snr_weight(ab, gamma, DIFFUSION_V);
        const double we = diffusion_min_snr_weight(ab, gamma, DIFFUSION_EPS);
        if (snr <= gamma) {
            assert_true(fabs(wv - ab) < 1e-12);
            assert_true(fabs(we - 1) < 1e-12);
        } else {
            assert_true(fabs(wv - gamma * (1 - ab)) < 1e-12);
            assert_true(fabs(we - gamma / snr) < 1e-12);
        }
    }
    float a, s;
    diffusion_coefficients(0.36, &a, &s);
    assert_true(a == 0.6f && s == 0.8f);
}

static void test_ddim_leading(void **state) {
    int t[50];
    diffusion_ddim_timesteps(DDIM_LEADING, T, 50, t);
    for (int i = 0; i < 50; i++) assert_int_equal(t[i], 980 - 20 * i);
    int t3[3];
    diffusion_ddim_timesteps(DDIM_LEADING, T, 3, t3);
    assert_int_equal(t3[0], 666);
    assert_int_equal(t3[1], 333);
    assert_int_equal(t3[2], 0);
    double ab[T];
    diffusion_alphabar(DIFFUSION_SCHEDULE_COSINE, T, ab);
    assert_true(diffusion_ddim_next_alphabar(DDIM_LEADING, ab, T, 3, 0) == ab[333]);
    assert_true(diffusion_ddim_next_alphabar(DDIM_LEADING, ab, T, 3, 1) == ab[0]);
    assert_true(diffusion_ddim_next_alphabar(DDIM_LEADING, ab, T, 3, 2) == 1.0);
    int all[T];
    diffusion_ddim_timesteps(DDIM_LEADING, T, T, all);
    assert_int_equal(all[0], T - 1);
    assert_int_equal(all[T - 1], 0);
    int one;
    diffusion_ddim_timesteps(DDIM_LEADING, T, 1, &one);
    assert_int_equal(one, 0); /* leading's one step is at t = 0: it returns x_T (why trailing is the default) */
}

static void test_ddim_trailing(void **state) {
    int t[50];
    diffusion_ddim_timesteps(DDIM_TRAILING, T, 50, t);
    for (int i = 0; i < 50; i++) assert_int_equal(t[i], 999 - 20 * i);
    int t3[3];
    diffusion_ddim_timesteps(DDIM_TRAILING, T, 3, t3);
    assert_int_equal(t3[0], 999);
    assert_int_equal(t3[1], 666);
    assert_int_equal(t3[2], 332);
    int t16[16];
    diffusion_ddim_timesteps(DDIM_TRAILING, T, 16, t16);
    assert_int_equal(t16[1], 937); /* round(937.5) = 938 */
    assert_int_equal(t16[3], 811); /* round(812.5) = 812 */
    double ab[T];
    diffusion_alphabar(DIFFUSION_SCHEDULE_COSINE, T, ab);
    assert_true(diffusion_ddim_next_alphabar(DDIM_TRAILING, ab, T, 3, 0) == ab[666]);
    assert_true(diffusion_ddim_next_alphabar(DDIM_TRAILING, ab, T, 3, 1) == ab[332]);
    assert_true(diffusion_ddim_next_alphabar(DDIM_TRAILING, ab, T, 3, 2) == 1.0);
    int one, all[T];
    diffusion_ddim_timesteps(DDIM_TRAILING, T, 1, &one);
    assert_int_equal(one, T - 1);
    diffusion_ddim_timesteps(DDIM_TRAILING, T, T, all);
    for (int i = 0; i < T; i++) assert_int_equal(all[i], T - 1 - i);
    assert_int_equal(diffusion_ddim_spacing_parse("trailing"), DDIM_TRAILING);
    assert_int_equal(diffusion_ddim_spacing_parse("leading"), DDIM_LEADING);
    assert_int_equal(diffusion_ddim_spacing_parse("linspace"), -1);
}

static void test_names(void **state) {
    assert_int_equal(diffusion_schedule_parse("linear"), DIFFUSION_SCHEDULE_LINEAR);
    assert_int_equal(diffusion_schedule_parse("cosine"), DIFFUSION_SCHEDULE_COSINE);
    assert_int_equal(diffusion_schedule_parse("Cosine"), -1);
    assert_int_equal(diffusion_schedule_parse(NULL), -1);
    assert_string_equal(diffusion_schedule_name(DIFFUSION_SCHEDULE_COSINE), "cosine");
}

static int write_file(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static int dump(const char *dir) {
    double ab[T];
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        diffusion_alphabar((DiffusionSchedule)k, T, ab);
        char name[64];
        snprintf(name, sizeof name, "%s.f64", diffusion_schedule_name((DiffusionSchedule)k));
        bad |= write_file(dir, name, ab, sizeof ab);
    }
    const int steps[] = {1, 3, 16, 50, 250, 999, 1000};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int t[T];
        char name[64];
        diffusion_ddim_timesteps(DDIM_LEADING, T, steps[i], t);
        snprintf(name, sizeof name, "ddim_%d.i32", steps[i]);
        bad |= write_file(dir, name, t, sizeof(int) * (size_t)steps[i]);
        diffusion_ddim_timesteps(DDIM_TRAILING, T, steps[i], t);
        snprintf(name, sizeof name, "ddim_trailing_%d.i32", steps[i]);
        bad |= write_file(dir, name, t, sizeof(int) * (size_t)steps[i]);
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_by_hand), cmocka_unit_test(test_cosine_telescopes),
        cmocka_unit_test(test_decreasing),     cmocka_unit_test(test_min_snr),
        cmocka_unit_test(test_ddim_leading),   cmocka_unit_test(test_ddim_trailing), cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_drr.c: cmocka tests of the CPU DRR (kernels/drr/drr_cpu.c) beyond the op cases' float64 comparison
 * (tests/unit/op_cases.c):
 *   - closed forms: an empty volume gives a black image (0) and no gradient; a uniform volume c gives
 *     1 - exp(-mu_scale * spacing * c * extent) at every pixel, whatever the resampling, and its gradient under
 *     dimg = 1 is that exp times mu_scale * spacing * (the resampling's column sums);
 *   - the two views are each other under swapping h and w;
 *   - bit-identical image and gradient for 1 and 3 OpenMP threads;
 *   - backproject inverts the model's DRR onto the rays: at img = d = w = h (no resampling) and spacing 1/extent,
 *     each voxel gets the mean of the volume along its AP ray (channel 0) and its lateral ray (channel 1); a
 *     saturated pixel (1) gives the clamp's -log(1 - DRR_IMAGE_MAX) / mu_scale.
 * `test_drr --dump DIR` writes three cases' shape, inputs and outputs (DIR/<case>.shape, DIR/<case>.<tensor>.f32)
 * for tests/integration/test_drr_torch.py, which checks them against PyTorch (F.interpolate, autograd) in float64. */
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

#include "common/rng.h"
#include "drr/drr.h"

static float *filled(long n, unsigned seed, float lo, float hi) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    assert_non_null(p);
    for (long i = 0; i < n; i++) p[i] = lo + (hi - lo) * vx_uniform01(vx_hash3(seed, 0, (uint64_t)i));
    return p;
}

static DrrShape shape(int n, int d, int h, int w, int view, int img) {
    return (DrrShape){.n = n, .d = d, .h = h, .w = w, .view = view, .img = img, .mu_scale = 0.7f, .spacing = 0.25f,
                      .dtype = DT_F32};
}

static void test_empty_and_uniform(void **state) {
    for (int view = 0; view < 2; view++) {
        const DrrShape s = shape(2, 5, 6, 7, view, 11);
        const long nv = drr_volume_count(&s), ni = drr_image_count(&s);
        float *x = filled(nv, 1, 0, 0), *img = filled(ni, 2, 0, 1), *ones = filled(ni, 3, 1, 1), *dx = filled(nv, 4, 0, 1);
        drr_ops_cpu.forward(&s, x, img);
        for (long i = 0; i < ni; i++) assert_true(img[i] == 0.0f);
        const float c = 1.3f;
        for (long i = 0; i < nv; i++) x[i] = c;
        drr_ops_cpu.forward(&s, x, img);
        const double L = 0.7 * 0.25 * c * (view == 0 ? s.h : s.w), want = 1 - exp(-L);
        for (long i = 0; i < ni; i++) assert_true(fabs(img[i] - want) < 1e-6);
        /* d(sum img)/dx = exp(-L) * mu * sp * (how many output pixels read each ray, weighted): summed over the
         * volume that is exp(-L) * mu * sp * extent * (pixels), the resampling's weights summing to 1 per pixel */
        drr_ops_cpu.backward(&s, x, ones, dx, 0.0f);
        double sum = 0;
        for (long i = 0; i < nv; i++) sum += dx[i];
        const double want_sum = exp(-L) * 0.7 * 0.25 * (view == 0 ? s.h : s.w) * (double)ni;
        assert_true(fabs(sum - want_sum) < 1e-5 * want_sum);
        free(x), free(img), free(ones), free(dx);
    }
}

/* view 1 of x [d][h][w] is view 0 of its transpose [d][w][h] */
static void test_views_swap(void **state) {
    const DrrShape s1 = shape(2, 4, 5, 9, 1, 7), s0 = shape(2, 4, 9, 5, 0, 7);
    const long nv = drr_volume_count(&s1), ni = drr_image_count(&s1);
    float *x = filled(nv, 5, 0, 1), *xt = filled(nv, 6, 0, 0), *a = filled(ni, 7, 0, 0), *b = filled(ni, 8, 0, 0);
    for (int n = 0; n < 2; n++)
        for (int d = 0; d < 4; d++)
            for (int y = 0; y < 5; y++)
                for (int z = 0; z < 9; z++) xt[(((long)n * 4 + d) * 9 + z) * 5 + y] = x[(((long)n * 4 + d) * 5 + y) * 9 + z];
    drr_ops_cpu.forward(&s1, x, a);
    drr_ops_cpu.forward(&s0, xt, b);
    for (long i = 0; i < ni; i++) assert_true(fabs(a[i] - b[i]) < 1e-6);
    free(x), free(xt), free(a), free(b);
}

static void test_backproject_is_the_ray_means(void **state) {
    const int n = 2, e = 6;
    const float mu = 0.7f;
    DrrShape s = {.n = n, .d = e, .h = e, .w = e, .img = e, .mu_scale = mu, .spacing = 1.0f / e, .dtype = DT_F32};
    const long nv = (long)n * e * e * e, ni = (long)n * e * e;
    float *x = filled(nv, 9, 0, 1), *views = filled(2 * ni, 10, 0, 0), *out = filled(2 * nv, 11, 0, 0);
    float *img = filled(ni, 12, 0, 0);
    for (int v = 0; v < 2; v++) { /* the views as the model holds them: [n][2][img][img] */
        s.view = v;
        drr_ops_cpu.forward(&s, x, img);
        for (int b = 0; b < n; b++) memcpy(views + (2L * b + v) * e * e, img + (long)b * e * e, sizeof(float) * e * e);
    }
    drr_ops_cpu.backproject(&s, views, out);
    for (int b = 0; b < n; b++)
        for (int d = 0; d < e; d++)
            for (int y = 0; y < e; y++)
                for (int z = 0; z < e; z++) {
                    double ap = 0, lat = 0;
                    for (int k = 0; k < e; k++) {
                        ap += x[(((long)b * e + d) * e + k) * e + z];
                        lat += x[(((long)b * e + d) * e + y) * e + k];
                    }
                    const long o = ((((long)b * e + d) * e + y) * e + z) * 2;
                    assert_true(fabs(out[o] - ap / e) < 1e-5);
                    assert_true(fabs(out[o + 1] - lat / e) < 1e-5);
                }
    views[3] = 1.0f; /* sample 0's AP view, row 0, column 3: every voxel of the ray (d 0, w 3) */
    drr_ops_cpu.backproject(&s, views, out);
    const double clamped = -log1p(-(double)DRR_IMAGE_MAX) / mu; /* 1 - 1e-6 as a float: 13.8 / mu */
    for (int y = 0; y < e; y++) assert_true(fabs(out[((long)y * e + 3) * 2] - clamped) < 1e-5 * clamped);
    free(x), free(views), free(out), free(img);
}

static void test_threads_bitwise(void **state) {
    const DrrShape s = shape(3, 9, 8, 10, 0, 17);
    const long nv = drr_volume_count(&s), ni = drr_image_count(&s);
    float *x = filled(nv, 9, 0, 1), *dimg = filled(ni, 10, -1, 1);
    float *img[2], *dx[2];
    const int saved = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k == 0 ? 1 : 3);
        img[k] = filled(ni, 11, 0, 0), dx[k] = filled(nv, 12, 0, 1);
        drr_ops_cpu.forward(&s, x, img[k]);
        drr_ops_cpu.backward(&s, x, dimg, dx[k], 1.0f);
    }
    omp_set_num_threads(saved);
    assert_memory_equal(img[0], img[1], sizeof(float) * (size_t)ni);
    assert_memory_equal(dx[0], dx[1], sizeof(float) * (size_t)nv);
    free(x), free(dimg), free(img[0]), free(img[1]), free(dx[0]), free(dx[1]);
}

static int write_f32(const char *dir, const char *c, const char *what, const float *p, long n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s.f32", dir, c, what);
    FILE *f = fopen(path, "wb");
    const int ok = f && fwrite(p, sizeof(float), (size_t)n, f) == (size_t)n;
    return (f && fclose(f) == 0 && ok) ? 0 : 1;
}

static int dump_case(const char *dir, const char *name, DrrShape s) {
    const long nv = drr_volume_count(&s), ni = drr_image_count(&s);
    float *x = filled(nv, 21, 0, 1), *dimg = filled(ni, 22, -1, 1), *img = filled(ni, 23, 0, 0), *dx = filled(nv, 24, 0, 0);
    drr_ops_cpu.forward(&s, x, img);
    drr_ops_cpu.backward(&s, x, dimg, dx, 0.0f);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.shape", dir, name);
    FILE *f = fopen(path, "w");
    int bad = !f;
    if (f) {
        fprintf(f, "%d %d %d %d %d %d %.9g %.9g\n", s.n, s.d, s.h, s.w, s.view, s.img, (double)s.mu_scale,
                (double)s.spacing);
        bad |= fclose(f) != 0;
    }
    bad |= write_f32(dir, name, "x", x, nv) | write_f32(dir, name, "img", img, ni) |
           write_f32(dir, name, "dimg", dimg, ni) | write_f32(dir, name, "dx", dx, nv);
    free(x), free(dimg), free(img), free(dx);
    if (bad) fprintf(stderr, "cannot write case %s under %s\n", name, dir);
    return bad;
}

static int dump(const char *dir) {
    DrrShape up = shape(2, 6, 5, 7, 0, 12), down = shape(1, 10, 9, 8, 1, 4), cube = shape(1, 16, 16, 16, 0, 16);
    up.mu_scale = 0.5f, up.spacing = 0.8f; /* integrals around 1 */
    return dump_case(dir, "ap_up", up) | dump_case(dir, "lateral_down", down) | dump_case(dir, "cube", cube);
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_uniform),
        cmocka_unit_test(test_views_swap),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_backproject_is_the_ray_means),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

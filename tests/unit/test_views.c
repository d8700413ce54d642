/* test_views.c: cmocka tests of data/views.c's views_augment, the views of an augmented volume: for every augment
 * code (augment.h: the flips and the 90-degree turns in the (h, w) plane), the given views moved by views_augment
 * equal the DRRs (drr.h, CPU) rendered from the volume augment_cpu moved, at an image side that upsamples, one that
 * downsamples and one equal to the volume's; and on a volume with h != w for the codes it allows (no odd turn). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "augment/augment.h"
#include "common/rng.h"
#include "data/views.h"
#include "drr/drr.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_moves_the_views_with_the_volume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* drr_math.h: the DRR's resampling (drr.h) one element at a time, the code both backends run (VX_HD): PyTorch's
 * bilinear align_corners=False index map per axis, the resampled line integral at an output pixel, and the transpose
 * of the resampling gathered at a source pixel (a fixed order: rows, then columns; no scatter, no atomics). */
#pragma once
#include <math.h>

#include "common/vx_hd.h"
#include "drr/drr.h"

/* One axis of the resampling (in -> out), output index dst: the two source indices and the second's weight. */
VX_HD void drr_src(int dst, int in, int out, int *i0, int *i1, float *l1) {
    const float scale = (float)in / (float)out;
    float src = scale * ((float)dst + 0.5f) - 0.5f;
    if (src < 0.0f) src = 0.0f;
    int a = (int)src;
    if (a > in - 1) a = in - 1;
    *i0 = a;
    *i1 = a + (a < in - 1 ? 1 : 0);
    *l1 = src - (float)a;
}
/* the weight of source index u in output dst (0 when u is not one of its two) */
VX_HD float drr_weight(int dst, int u, int in, int out) {
    int i0, i1;
    float l1;
    drr_src(dst, in, out, &i0, &i1, &l1);
    return (i0 == u ? 1.0f - l1 : 0.0f) + (i1 == u ? l1 : 0.0f);
}
/* the output indices [*lo, *hi) whose resampling may read source u: src in [u - 1, u + 1), widened by one each side
 * against rounding (drr_weight decides) */
VX_HD void drr_range(int u, int in, int out, int *lo, int *hi) {
    const float inv = (float)out / (float)in;
    int a = (int)floorf(((float)u - 0.5f) * inv - 0.5f) - 1, b = (int)ceilf(((float)u + 1.5f) * inv - 0.5f) + 2;
    *lo = a < 0 ? 0 : a;
    *hi = b > out ? out : b;
}

/* the resampled value at output pixel (i, j) of one sample's L [rows][cols] */
VX_HD float drr_resample(const float *L, int rows, int cols, int img, int i, int j) {
    int r0, r1, c0, c1;
    float lr, lc;
    drr_src(i, rows, img, &r0, &r1, &lr);
    drr_src(j, cols, img, &c0, &c1, &lc);
    const float top = (1.0f - lc) * L[(long)r0 * cols + c0] + lc * L[(long)r0 * cols + c1];
    const float bot = (1.0f - lc) * L[(long)r1 * cols + c0] + lc * L[(long)r1 * cols + c1];
    return (1.0f - lr) * top + lr * bot;
}
/* backproject's value at (u, v) of [rows][cols] from one sample's view image [img][img]: the line integral
 * -log(1 - min(image, DRR_IMAGE_MAX)) resampled image -> rows x cols (the four pixels' integrals, then the weights),
 * divided by mu_scale */
VX_HD float drr_ray_value(const float *image, int img, int rows, int cols, int u, int v, float mu_scale) {
    int r0, r1, c0, c1;
    float lr, lc;
    drr_src(u, img, rows, &r0, &r1, &lr);
    drr_src(v, img, cols, &c0, &c1, &lc);
#define DRR_L(r, c) (-log1pf(-fminf(image[(long)(r) * img + (c)], DRR_IMAGE_MAX)))
    const float top = (1.0f - lc) * DRR_L(r0, c0) + lc * DRR_L(r0, c1);
    const float bot = (1.0f - lc) * DRR_L(r1, c0) + lc * DRR_L(r1, c1);
#undef DRR_L
    return ((1.0f - lr) * top + lr * bot) / mu_scale;
}
/* the transpose of the resampling at source pixel (u, v) of one sample's g [img][img]: sum over the output pixels
 * that read (u, v) of their weight times g, rows outer, columns inner */
VX_HD float drr_gather(const float *g, int rows, int cols, int img, int u, int v) {
    int ilo, ihi, jlo, jhi;
    drr_range(u, rows, img, &ilo, &ihi);
    drr_range(v, cols, img, &jlo, &jhi);
    float acc = 0.0f;
    for (int i = ilo; i < ihi; i++) {
        const float wr = drr_weight(i, u, rows, img);
        if (wr == 0.0f) continue;
        float row = 0.0f;
        for (int j = jlo; j < jhi; j++) row += drr_weight(j, v, cols, img) * g[(long)i * img + j];
        acc += wr * row;
    }
    return acc;
}

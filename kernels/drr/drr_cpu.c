/* drr_cpu.c: the float32 CPU DRR (drr.h): the line integrals (each ray summed in double along it), the resampled
 * Beer-Lambert image, and the backward through the gathered transpose of the resampling (drr_math.h), OpenMP over
 * independent outputs, so the bits do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>

#include "common/cpu_op.h"
#include "drr/drr.h"
#include "drr/drr_math.h"

static void check(const DrrShape *s) {
    const char *e = drr_shape_error(s);
    if (*e) vx_fatal("drr: %s (n=%d %dx%dx%d view %d img %d)", e, s->n, s->d, s->h, s->w, s->view, s->img);
}

/* L [n][d][cols] = mu_scale * spacing * the sum along each ray */
static void integrals(const DrrShape *s, const float *x, float *L) {
    const int cols = drr_cols(s), h = s->h, w = s->w;
    const double k = (double)s->mu_scale * (double)s->spacing;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->n; b++)
        for (int u = 0; u < s->d; u++) {
            const float *xs = x + ((long)b * s->d + u) * h * w;
            float *row = L + ((long)b * s->d + u) * cols;
            for (int v = 0; v < cols; v++) {
                double a = 0.0;
                if (s->view == 0)
                    for (int y = 0; y < h; y++) a += xs[(long)y * w + v];
                else
                    for (int z = 0; z < w; z++) a += xs[(long)v * w + z];
                row[v] = (float)(k * a);
            }
        }
}

static void cpu_forward(const DrrShape *s, const void *xv, float *img) {
    cpu_need_f32(s->dtype, "drr_forward");
    check(s);
    const int cols = drr_cols(s), m = s->img;
    float *L = vx_malloc(sizeof(float) * (size_t)s->n * s->d * cols + 1);
    integrals(s, xv, L);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->n; b++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++)
                img[((long)b * m + i) * m + j] = -expm1f(-drr_resample(L + (long)b * s->d * cols, s->d, cols, m, i, j));
    free(L);
}

static void cpu_backward(const DrrShape *s, const void *xv, const float *dimg, void *dxv, float beta) {
    cpu_need_f32(s->dtype, "drr_backward");
    check(s);
    const int cols = drr_cols(s), m = s->img, h = s->h, w = s->w;
    float *L = vx_malloc(sizeof(float) * (size_t)s->n * s->d * cols + 1);
    float *g = vx_malloc(sizeof(float) * (size_t)drr_image_count(s) + 1);
    integrals(s, xv, L);
    /* g = dimg * exp(-Lr): d(1 - exp(-Lr))/dLr */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->n; b++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                const long o = ((long)b * m + i) * m + j;
                g[o] = dimg[o] * expf(-drr_resample(L + (long)b * s->d * cols, s->d, cols, m, i, j));
            }
    /* dL (into L, no longer needed) = the transpose of the resampling, times mu_scale * spacing */
    const float k = s->mu_scale * s->spacing;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->n; b++)
        for (int u = 0; u < s->d; u++)
            for (int v = 0; v < cols; v++)
                L[((long)b * s->d + u) * cols + v] = k * drr_gather(g + (long)b * m * m, s->d, cols, m, u, v);
    /* dx: each voxel takes its ray's dL */
    float *dx = dxv;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->n; b++)
        for (int u = 0; u < s->d; u++) {
            const float *dl = L + ((long)b * s->d + u) * cols;
            float *o = dx + ((long)b * s->d + u) * h * w;
            for (int y = 0; y < h; y++)
                for (int z = 0; z < w; z++) {
                    const float v = dl[s->view == 0 ? z : y];
                    o[(long)y * w + z] = beta != 0.0f ? beta * o[(long)y * w + z] + v : v;
                }
        }
    free(g);
    free(L);
}

static void cpu_backproject(const DrrShape *s, const float *views, void *outv) {
    cpu_need_f32(s->dtype, "drr_backproject");
    check(s);
    const int d = s->d, h = s->h, w = s->w, m = s->img;
    float *out = outv;
    /* each view's values over its rays first ([d][w] then [d][h] per sample), then every voxel takes its two */
    const long per = (long)d * (w + h);
    float *ray = vx_malloc(sizeof(float) * (size_t)s->n * per + 1);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->n; b++)
        for (int u = 0; u < d; u++) {
            float *r = ray + b * per;
            for (int v = 0; v < w; v++) r[(long)u * w + v] = drr_ray_value(views + (2L * b) * m * m, m, d, w, u, v, s->mu_scale);
            for (int v = 0; v < h; v++)
                r[(long)d * w + (long)u * h + v] = drr_ray_value(views + (2L * b + 1) * m * m, m, d, h, u, v, s->mu_scale);
        }
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < s->n; b++)
        for (int u = 0; u < d; u++) {
            const float *ap = ray + b * per + (long)u * w, *lat = ray + b * per + (long)d * w + (long)u * h;
            float *o = out + (((long)b * d + u) * h) * w * 2;
            for (int y = 0; y < h; y++)
                for (int z = 0; z < w; z++) {
                    o[((long)y * w + z) * 2] = ap[z];
                    o[((long)y * w + z) * 2 + 1] = lat[y];
                }
        }
    free(ray);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

const DrrOps drr_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward, cpu_backproject};

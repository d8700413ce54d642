/* drr_spec.c: the DRR's entries in the op spec table (common/op_spec.h), with float64 references written from
 * drr.h's formulas (not drr_math.h's code): the rays summed in double, PyTorch's bilinear index map in double, and
 * the backward by scattering each output pixel's gradient onto its four sources (the op gathers). A case's shape is
 * a DrrShape in KernelCase.params; the volume is filled in [0, 1) (attenuation is not negative), dimg in [-1, 1).
 * The backprojection's reference takes each image pixel's line integral in double, then the same index map; its
 * views are in [0, 1) with every 7th pixel 1 (a saturated detector: the clamp). */
#include <math.h>
#include <stdlib.h>

#include "common/op_spec.h"
#include "core/util.h"
#include "drr/drr.h"

static const DrrOps *table(const OpHead *ops) { return (const DrrOps *)(const void *)ops; }
static DrrShape shape_of(const KernelCase *k) {
    DrrShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static DrrShape typed(KernelCase *k) {
    DrrShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}

/* F.interpolate(bilinear, align_corners=False) along one axis, in double */
static void axis(int dst, int in, int out, int *i0, int *i1, double *l1) {
    double src = (double)in / out * (dst + 0.5) - 0.5;
    if (src < 0) src = 0;
    *i0 = (int)floor(src);
    if (*i0 > in - 1) *i0 = in - 1;
    *i1 = *i0 < in - 1 ? *i0 + 1 : *i0;
    *l1 = src - *i0;
}

/* Lr [n][img][img] in double: the rays' sums, resampled */
static double *resampled(const DrrShape *s, const float *x) {
    const int cols = s->view == 0 ? s->w : s->h, m = s->img;
    double *L = vx_malloc(sizeof(double) * (size_t)s->d * cols);
    double *lr = vx_malloc(sizeof(double) * (size_t)drr_image_count(s) + 1);
    for (int b = 0; b < s->n; b++) {
        for (int u = 0; u < s->d; u++)
            for (int v = 0; v < cols; v++) {
                double a = 0;
                for (int k = 0; k < (s->view == 0 ? s->h : s->w); k++) {
                    const int y = s->view == 0 ? k : v, z = s->view == 0 ? v : k;
                    a += x[(((long)b * s->d + u) * s->h + y) * s->w + z];
                }
                L[(long)u * cols + v] = (double)s->mu_scale * s->spacing * a;
            }
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                int r0, r1, c0, c1;
                double a, c;
                axis(i, s->d, m, &r0, &r1, &a);
                axis(j, cols, m, &c0, &c1, &c);
                lr[((long)b * m + i) * m + j] =
                    (1 - a) * ((1 - c) * L[(long)r0 * cols + c0] + c * L[(long)r0 * cols + c1]) +
                    a * ((1 - c) * L[(long)r1 * cols + c0] + c * L[(long)r1 * cols + c1]);
            }
    }
    free(L);
    return lr;
}

/* ---- forward: x -> img;  backward: x dimg -> dx (beta) -------------------------------------------------------- */

static void fwd_setup(KernelCase *k, const OpHead *ops) {
    const DrrShape s = typed(k);
    op_spec_bufs(k, 2, (long[]){drr_volume_count(&s), drr_image_count(&s)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x1, 0);
}
static void bwd_setup(KernelCase *k, const OpHead *ops) {
    const DrrShape s = typed(k);
    op_spec_bufs(k, 3, (long[]){drr_volume_count(&s), drr_image_count(&s), drr_volume_count(&s)},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x5, 0x4);
}
static void fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const DrrShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1]);
}
static void bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const DrrShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], b[2], k->beta);
}
static void fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const DrrShape s = shape_of(k);
    double *lr = resampled(&s, in[0]);
    for (long o = 0; o < drr_image_count(&s); o++) ref[1][o] = 1.0 - exp(-lr[o]);
    free(lr);
}
static void bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const DrrShape s = shape_of(k);
    const int cols = s.view == 0 ? s.w : s.h, m = s.img;
    double *lr = resampled(&s, in[0]), *dl = vx_malloc(sizeof(double) * (size_t)s.d * cols);
    for (int b = 0; b < s.n; b++) {
        for (long e = 0; e < (long)s.d * cols; e++) dl[e] = 0;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                const long o = ((long)b * m + i) * m + j;
                const double g = in[1][o] * exp(-lr[o]);
                int r0, r1, c0, c1;
                double a, c;
                axis(i, s.d, m, &r0, &r1, &a);
                axis(j, cols, m, &c0, &c1, &c);
                dl[(long)r0 * cols + c0] += (1 - a) * (1 - c) * g;
                dl[(long)r0 * cols + c1] += (1 - a) * c * g;
                dl[(long)r1 * cols + c0] += a * (1 - c) * g;
                dl[(long)r1 * cols + c1] += a * c * g;
            }
        for (int u = 0; u < s.d; u++)
            for (int y = 0; y < s.h; y++)
                for (int z = 0; z < s.w; z++)
                    ref[2][(((long)b * s.d + u) * s.h + y) * s.w + z] =
                        (double)s.mu_scale * s.spacing * dl[(long)u * cols + (s.view == 0 ? z : y)];
    }
    free(dl);
    free(lr);
}
/* ---- backproject: views -> out [n][d][h][w][2] ------------------------------------------------------------- */

static void bp_setup(KernelCase *k, const OpHead *ops) {
    const DrrShape s = typed(k);
    op_spec_bufs(k, 2, (long[]){2 * drr_image_count(&s), 2 * drr_volume_count(&s)}, (KernelBufRole[]){KB_IN, KB_OUT},
                 0x2, 0);
}
static void bp_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const DrrShape s = shape_of(k);
    table(ops)->backproject(&s, b[0], b[1]);
}
static void bp_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const DrrShape s = shape_of(k);
    const int m = s.img;
    for (int b = 0; b < s.n; b++)
        for (int view = 0; view < 2; view++) {
            const float *image = in[0] + (2L * b + view) * m * m;
            const int cols = view == 0 ? s.w : s.h, along = view == 0 ? s.h : s.w;
            for (int u = 0; u < s.d; u++)
                for (int v = 0; v < cols; v++) {
                    int r0, r1, c0, c1;
                    double a, c;
                    axis(u, m, s.d, &r0, &r1, &a);
                    axis(v, m, cols, &c0, &c1, &c);
#define L(r, cc) (-log1p(-fmin((double)image[(long)(r) * m + (cc)], (double)DRR_IMAGE_MAX)))
                    const double val = ((1 - a) * ((1 - c) * L(r0, c0) + c * L(r0, c1)) +
                                        a * ((1 - c) * L(r1, c0) + c * L(r1, c1))) / s.mu_scale;
#undef L
                    for (int j = 0; j < along; j++) { /* every voxel on the ray: (u, j, v) AP, (u, v, j) lateral */
                        const int y = view == 0 ? j : v, z = view == 0 ? v : j;
                        ref[1][((((long)b * s.d + u) * s.h + y) * s.w + z) * 2 + view] = val;
                    }
                }
        }
}

static void bp_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    for (long i = 0; i < count; i++) h[i] = i % 7 == 3 ? 1.0f : vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
}

static void fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 0)
        for (long i = 0; i < count; i++) h[i] = vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
    else op_spec_uniform_fill(h, count, seed, b);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp drr_specs[] = {
    {"drr_forward", DRR_FORWARD, 0, 1e-5, fwd_setup, fwd_run, fwd_ref, fill},
    {"drr_backward", DRR_BACKWARD, 0, 1e-5, bwd_setup, bwd_run, bwd_ref, fill},
    {"drr_backproject", DRR_BACKPROJECT, 0, 1e-5, bp_setup, bp_run, bp_ref, bp_fill},
};
const int drr_specs_count = sizeof drr_specs / sizeof drr_specs[0];

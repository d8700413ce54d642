/* test_ops.c: cmocka tests of the float32 CPU backend's ops (the kernels/..._cpu.c files).
 * Every op is checked against a naive float64 reference written here with plain loops, independent of the
 * optimized code: (a) the float32 forward against the float64 forward, and (b) every float32 gradient against
 * central finite differences of the float64 forward of a random scalar objective L = sum(r * y). On top of that:
 * beta 1 accumulation, beta 0 overwriting NaN, the multi-chunk convolution paths, bit-identical reductions for 1
 * and 2 threads, AdamW against a double transcription of torch's formula, and the counter-based RNG's statistics
 * and offset property. The ResNet family's ops (BatchNorm in SyncBatchNorm's pieces, on one rank and with the sums
 * of several, ReLU, max and average pooling, Linear, keyed dropout, the head losses) run through the CPU backend's
 * tables, their contracts having no CPU functions of their own. GELU is checked here only in its far tail (the
 * rest is op_cases.c against the double backend). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "avgpool/avgpool.h"
#include "backend/backend.h"
#include "backend/spec_table.h"
#include "batchnorm/batchnorm.h"
#include "conv3d/conv3d.h"
#include "dropout/dropout.h"
#include "head_loss/head_loss.h"
#include "linear/linear.h"
#include "maxpool/maxpool.h"
#include "relu/relu.h"
#include "elementwise/elementwise.h"
#include "common/cpu_gemm.h"
#include "gemm/gemm.h"
#include "gelu/gelu.h"
#include "gelu/gelu_math.h"
#include "groupnorm/groupnorm.h"
#include "latent/latent.h"
#include "loss/loss.h"
#include "normal/normal.h"
#include "optim/optim.h"
#include "augment/augment.h"
#include "common/rng.h"
#include "silu/silu.h"
#include "upsample/upsample.h"

/* ---- helpers ---------------------------------------------------------------------------------------------- */

#define FWD_TOL 1e-5   /* float32 forward vs float64 reference, relative L2 error */
#define GRAD_TOL 1e-4  /* float32 gradient vs finite differences, relative L2 error */
#define FD_H 1e-6      /* central-difference step (in double) */
#define FD_MAX 4000    /* finite differences over every element up to this size, a random subset beyond */

#define TEST_RNG_SEED 0x1234567ull
#include "test_random.h"

static double *dnew(long n) {
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(p);
    return p;
}
static double *to_d(const float *f, long n) {
    double *d = dnew(n);
    for (long i = 0; i < n; i++) d[i] = f[i];
    return d;
}
static float *fcopy(const float *f, long n) {
    float *p = fnew(n);
    memcpy(p, f, sizeof(float) * (size_t)n);
    return p;
}
static float *fnan(long n) {
    float *p = fnew(n);
    for (long i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* ||got - ref|| / ||ref|| (absolute when ref is 0) */
static double rel_err(const float *got, const double *ref, long n) {
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        const double e = (double)got[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    if (num != num) return INFINITY; /* NaN */
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static void expect_close(const char *what, const float *got, const double *ref, long n, double tol) {
    const double e = rel_err(got, ref, n);
    if (!(e <= tol)) print_error("%s: relative error %.3g > %.3g\n", what, e, tol);
    assert_true(e <= tol);
}

/* beta 1 check: after = before + fresh (the beta-0 result), to float rounding */
static void expect_accumulated(const char *what, const float *after, const float *before, const float *fresh,
                               long n) {
    double *sum = dnew(n);
    for (long i = 0; i < n; i++) sum[i] = (double)before[i] + fresh[i];
    expect_close(what, after, sum, n, 1e-6);
    free(sum);
}

static void set_threads(int t) {
    omp_set_num_threads(t);
    openblas_set_num_threads(t);
}

/* Central differences of obj over the elements of param (all of them, or FD_MAX random ones), compared with the
 * float gradient `got` on the same elements. obj reads param through ctx. */
typedef double (*Objective)(void *ctx);
static void expect_grad(const char *what, Objective obj, void *ctx, double *param, long n, const float *got) {
    const long m = n <= FD_MAX ? n : FD_MAX;
    double *fd = dnew(m);
    float *sel = fnew(m);
    for (long j = 0; j < m; j++) {
        const long i = n <= FD_MAX ? j : (j == 0 ? 0 : j == 1 ? n - 1 : (long)(urand() * n));
        const double v = param[i];
        param[i] = v + FD_H;
        const double lp = obj(ctx);
        param[i] = v - FD_H;
        const double lm = obj(ctx);
        param[i] = v;
        fd[j] = (lp - lm) / (2.0 * FD_H);
        sel[j] = got[i];
    }
    expect_close(what, sel, fd, m, GRAD_TOL);
    free(fd);
    free(sel);
}

/* ---- conv3d ----------------------------------------------------------------------------------------------- */

/* direct convolution: y [n][od][oh][ow][co] = b + sum over taps and ci of w * x */
static void ref_conv_forward(const Conv3dShape *s, const double *x, const double *w, const double *b, double *y) {
    const int *k = s->k, *st = s->stride, *pd = s->pad;
    for (int n = 0; n < s->n; n++)
        for (int oz = 0; oz < s->od; oz++)
            for (int oy = 0; oy < s->oh; oy++)
                for (int ox = 0; ox < s->ow; ox++)
                    for (int co = 0; co < s->c_out; co++) {
                        double acc = b[co];
                        for (int kd = 0; kd < k[0]; kd++)
                            for (int kh = 0; kh < k[1]; kh++)
                                for (int kw = 0; kw < k[2]; kw++) {
                                    const int iz = oz * st[0] - pd[0] + kd;
                                    const int iy = oy * st[1] - pd[1] + kh;
                                    const int ix = ox * st[2] - pd[2] + kw;
                                    if (iz < 0 || iz >= s->d || iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                                    for (int ci = 0; ci < s->c_in; ci++)
                                        acc += w[((((long)co * k[0] + kd) * k[1] + kh) * k[2] + kw) * s->c_in + ci] *
                                               x[((((long)n * s->d + iz) * s->h + iy) * s->w + ix) * s->c_in + ci];
                                }
                        y[((((long)n * s->od + oz) * s->oh + oy) * s->ow + ox) * s->c_out + co] = acc;
                    }
}

/* direct scatter-form gradients of sum(dy * y): used for the shapes too large for finite differences */
static void ref_conv_backward(const Conv3dShape *s, const double *x, const double *w, const double *dy, double *dx,
                              double *dw, double *db) {
    const int *k = s->k, *st = s->stride, *pd = s->pad;
    memset(dx, 0, sizeof(double) * (size_t)conv3d_input_count(s));
    memset(dw, 0, sizeof(double) * (size_t)conv3d_weight_count(s));
    memset(db, 0, sizeof(double) * (size_t)s->c_out);
    for (int n = 0; n < s->n; n++)
        for (int oz = 0; oz < s->od; oz++)
            for (int oy = 0; oy < s->oh; oy++)
                for (int ox = 0; ox < s->ow; ox++)
                    for (int co = 0; co < s->c_out; co++) {
                        const double g = dy[((((long)n * s->od + oz) * s->oh + oy) * s->ow + ox) * s->c_out + co];
                        db[co] += g;
                        for (int kd = 0; kd < k[0]; kd++)
                            for (int kh = 0; kh < k[1]; kh++)
                                for (int kw = 0; kw < k[2]; kw++) {
                                    const int iz = oz * st[0] - pd[0] + kd;
                                    const int iy = oy * st[1] - pd[1] + kh;
                                    const int ix = ox * st[2] - pd[2] + kw;
                                    if (iz < 0 || iz >= s->d || iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                                    const long wo = ((((long)co * k[0] + kd) * k[1] + kh) * k[2] + kw) * s->c_in;
                                    const long xo = ((((long)n * s->d + iz) * s->h + iy) * s->w + ix) * s->c_in;
                                    for (int ci = 0; ci < s->c_in; ci++) {
                                        dw[wo + ci] += g * x[xo + ci];
                                        dx[xo + ci] += g * w[wo + ci];
                                    }
                                }
                    }
}

typedef struct {
    Conv3dShape s;
    double *x, *w, *b, *r, *y;
} ConvCtx;

static double conv_objective(void *p) {
    ConvCtx *c = p;
    ref_conv_forward(&c->s, c->x, c->w, c->b, c->y);
    double L = 0.0;
    for (long i = 0; i < conv3d_output_count(&c->s); i++) L += c->r[i] * c->y[i];
    return L;
}

typedef struct {
    int n, d, h, w, ci, co, k, stride, pad;
} ConvCase;

/* Forward vs reference; backward data and filter vs finite differences (small shapes) or the scatter reference
 * (use_fd 0); beta 0 into NaN; beta 1 accumulation; dbias NULL. */
static void check_conv_shape(const Conv3dShape s, int use_fd) {
    const ConvCase cc = {.n = s.n, .ci = s.c_in, .co = s.c_out};
    const long nx = conv3d_input_count(&s), ny = conv3d_output_count(&s), nw = conv3d_weight_count(&s);
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *b = frand(cc.co, -1, 1), *r = frand(ny, -1, 1);
    void *ws = malloc(conv3d_workspace_bytes_cpu(&s) + 1);
    ConvCtx c = {.s = s, .x = to_d(x, nx), .w = to_d(w, nw), .b = to_d(b, cc.co), .r = to_d(r, ny), .y = dnew(ny)};

    /* forward (y starts NaN: it must be overwritten) */
    float *y = fnan(ny);
    conv3d_forward_cpu(&s, x, w, b, NULL, y, ws);
    ref_conv_forward(&s, c.x, c.w, c.b, c.y);
    expect_close("conv forward", y, c.y, ny, FWD_TOL);
    /* with the fused residual: exactly the separate add of the same two tensors */
    float *y2 = fnan(ny), *sum = fnew(ny);
    conv3d_forward_cpu(&s, x, w, b, r, y2, ws);
    add_forward_cpu(ny, y, r, sum);
    assert_memory_equal(y2, sum, (size_t)ny * sizeof(float));
    free(y2), free(sum);

    /* backward with beta 0 into NaN-filled gradients */
    float *dx = fnan(nx), *dw = fnan(nw), *db = fnan(cc.co);
    conv3d_backward_data_cpu(&s, r, w, dx, 0.0f, ws);
    conv3d_backward_filter_cpu(&s, x, r, dw, db, 0.0f, ws);
    if (use_fd) {
        expect_grad("conv dx", conv_objective, &c, c.x, nx, dx);
        expect_grad("conv dw", conv_objective, &c, c.w, nw, dw);
        expect_grad("conv dbias", conv_objective, &c, c.b, cc.co, db);
    } else {
        double *rdx = dnew(nx), *rdw = dnew(nw), *rdb = dnew(cc.co);
        ref_conv_backward(&s, c.x, c.w, c.r, rdx, rdw, rdb);
        expect_close("conv dx (reference backward)", dx, rdx, nx, GRAD_TOL / 10);
        expect_close("conv dw (reference backward)", dw, rdw, nw, GRAD_TOL / 10);
        expect_close("conv dbias (reference backward)", db, rdb, cc.co, GRAD_TOL / 10);
        free(rdx);
        free(rdw);
        free(rdb);
    }

    /* beta 1 adds to what is there */
    float *dx1 = frand(nx, -1, 1), *dw1 = frand(nw, -1, 1), *db1 = frand(cc.co, -1, 1);
    float *dx0 = fcopy(dx1, nx), *dw0 = fcopy(dw1, nw), *db0 = fcopy(db1, cc.co);
    conv3d_backward_data_cpu(&s, r, w, dx1, 1.0f, ws);
    conv3d_backward_filter_cpu(&s, x, r, dw1, db1, 1.0f, ws);
    expect_accumulated("conv dx beta 1", dx1, dx0, dx, nx);
    expect_accumulated("conv dw beta 1", dw1, dw0, dw, nw);
    expect_accumulated("conv dbias beta 1", db1, db0, db, cc.co);

    /* dbias NULL: dw alone, same bits */
    float *dw2 = fnan(nw);
    conv3d_backward_filter_cpu(&s, x, r, dw2, NULL, 0.0f, ws);
    assert_memory_equal(dw2, dw, sizeof(float) * (size_t)nw);

    free(x), free(w), free(b), free(r), free(ws), free(y), free(dx), free(dw), free(db), free(dx1), free(dw1);
    free(db1), free(dx0), free(dw0), free(db0), free(dw2);
    free(c.x), free(c.w), free(c.b), free(c.r), free(c.y);
}

static void check_conv(ConvCase cc, int use_fd) {
    check_conv_shape(conv3d_shape(cc.n, cc.d, cc.h, cc.w, cc.ci, cc.co, cc.k, cc.stride, cc.pad), use_fd);
}

/* k, stride, pad per axis (d, h, w) */
static Conv3dShape conv_3d(int n, int d, int h, int w, int ci, int co, int kd, int kh, int kw, int sd, int sh, int sw,
                           int pd, int ph, int pw) {
    return conv3d_shape_3d(n, d, h, w, ci, co, (const int[3]){kd, kh, kw}, (const int[3]){sd, sh, sw},
                           (const int[3]){pd, ph, pw});
}

static void test_conv_shape(void **state) {
    /* cubic: the same fields on every axis, and the labels as before per-axis shapes */
    const Conv3dShape c = conv3d_shape(1, 5, 6, 7, 2, 3, 3, 2, 1);
    for (int a = 0; a < 3; a++) assert_true(c.k[a] == 3 && c.stride[a] == 2 && c.pad[a] == 1);
    char label[64];
    conv3d_kernel_label(&c, label, sizeof label);
    assert_string_equal(label, "k3 s2");
    /* MONAI's stem: k 7x7x7, stride 1x2x2, pad 3x3x3; weights [c_out][kd][kh][kw][c_in] */
    const Conv3dShape m = conv_3d(2, 9, 20, 21, 1, 64, 7, 7, 7, 1, 2, 2, 3, 3, 3);
    assert_int_equal(m.od, 9);
    assert_int_equal(m.oh, 10);
    assert_int_equal(m.ow, 11);
    conv3d_kernel_label(&m, label, sizeof label);
    assert_string_equal(label, "k7 s1x2x2");
    const Conv3dShape a = conv_3d(2, 1, 8, 9, 4, 5, 1, 3, 3, 1, 1, 2, 0, 1, 1);
    assert_int_equal(a.od, 1);
    assert_int_equal(a.oh, 8);
    assert_int_equal(a.ow, 5);
    assert_int_equal(conv3d_taps(&a), 9);
    assert_int_equal(conv3d_weight_count(&a), 5L * 9 * 4);
    assert_true(conv3d_forward_flops(&a) == 2.0 * 2 * 1 * 8 * 5 * 5 * 9 * 4);
    conv3d_kernel_label(&a, label, sizeof label);
    assert_string_equal(label, "k1x3x3 s1x1x2");

    Conv3dShape s = conv3d_shape(2, 7, 6, 5, 3, 8, 3, 2, 1);
    assert_int_equal(s.od, 4);
    assert_int_equal(s.oh, 3);
    assert_int_equal(s.ow, 3);
    assert_int_equal(conv3d_input_count(&s), 2L * 7 * 6 * 5 * 3);
    assert_int_equal(conv3d_output_count(&s), 2L * 4 * 3 * 3 * 8);
    assert_int_equal(conv3d_weight_count(&s), 8L * 27 * 3);
    assert_true(conv3d_forward_flops(&s) == 2.0 * 2 * 4 * 3 * 3 * 8 * 27 * 3);
    s = conv3d_shape(1, 8, 8, 8, 4, 4, 1, 1, 0);
    assert_int_equal(s.od, 8);
    assert_int_equal(conv3d_workspace_bytes_cpu(&s), 0); /* 1x1x1 needs no im2col */
}

/* k3 s1 p1, odd spatial sizes, c_in != c_out, batch 2 */
static void test_conv_k3s1(void **state) { check_conv((ConvCase){2, 5, 6, 7, 3, 5, 3, 1, 1}, 1); }
static void test_conv_k3s1_c12(void **state) { check_conv((ConvCase){2, 3, 4, 5, 12, 5, 3, 1, 1}, 1); }
/* k3 s2 p1 with odd (5, 7) and even (6) inputs */
static void test_conv_k3s2_odd(void **state) { check_conv((ConvCase){2, 5, 7, 3, 5, 12, 3, 2, 1}, 1); }
static void test_conv_k3s2_even(void **state) { check_conv((ConvCase){2, 6, 4, 8, 4, 3, 3, 2, 1}, 1); }
/* k1 s1 p0: the no-im2col path */
static void test_conv_k1(void **state) { check_conv((ConvCase){2, 5, 6, 7, 12, 5, 1, 1, 0}, 1); }
/* other stride/pad combinations the gather handles: k2 s2 p0 (one tap per class), k1 s2 p0 (classes with no tap,
 * whose dx must be 0), k3 s1 p0 (valid convolution), k3 s3 p2 */
static void test_conv_k2s2(void **state) { check_conv((ConvCase){2, 4, 6, 5, 3, 4, 2, 2, 0}, 1); }
static void test_conv_k1s2(void **state) { check_conv((ConvCase){2, 5, 4, 3, 3, 2, 1, 2, 0}, 1); }
static void test_conv_k3p0(void **state) { check_conv((ConvCase){2, 5, 4, 6, 3, 2, 3, 1, 0}, 1); }
static void test_conv_k3s3(void **state) { check_conv((ConvCase){1, 7, 5, 6, 2, 3, 3, 3, 2}, 1); }

/* Per-axis kernels, strides and paddings (conv3d_shape_3d), against finite differences: MONAI's ResNet stem
 * (k 7x7x7, stride 1x2x2, pad 3x3x3) on a small input, a 1x3x3 conv (pad 0x1x1) on a depth-1 volume, its strided
 * form, a kernel of 1 along one axis with stride 2 there (residue classes with no tap along that axis only), and
 * strides and sizes differing on every axis. */
static void test_conv_anisotropic(void **state) {
    check_conv_shape(conv_3d(1, 3, 6, 5, 1, 3, 7, 7, 7, 1, 2, 2, 3, 3, 3), 1);
    check_conv_shape(conv_3d(2, 1, 5, 6, 3, 4, 1, 3, 3, 1, 1, 1, 0, 1, 1), 1);
    check_conv_shape(conv_3d(2, 1, 7, 6, 3, 2, 1, 3, 3, 1, 2, 2, 0, 1, 1), 1);
    check_conv_shape(conv_3d(2, 5, 4, 6, 2, 3, 1, 3, 2, 2, 1, 2, 0, 1, 0), 1);
    check_conv_shape(conv_3d(1, 6, 5, 7, 3, 2, 3, 2, 3, 1, 3, 2, 1, 0, 2), 1);
    /* larger than one chunk, against the scatter reference */
    check_conv_shape(conv_3d(2, 9, 26, 27, 1, 4, 7, 7, 7, 1, 2, 2, 3, 3, 3), 0);
    check_conv_shape(conv_3d(2, 1, 40, 41, 6, 5, 1, 3, 3, 1, 1, 1, 0, 1, 1), 0);
}

/* one input or one output channel: the GEMMs with a single output column go through sgemv */
static void test_conv_c1(void **state) {
    check_conv((ConvCase){2, 5, 6, 7, 1, 4, 3, 1, 1}, 1); /* backward data: dx has one column */
    check_conv((ConvCase){2, 5, 6, 7, 6, 1, 3, 1, 1}, 1); /* forward and backward filter: one output channel */
    check_conv((ConvCase){2, 5, 6, 7, 1, 1, 3, 2, 1}, 1); /* both, stride 2 */
    check_conv((ConvCase){2, 5, 6, 7, 1, 3, 1, 1, 0}, 1); /* pointwise */
    check_conv((ConvCase){2, 5, 6, 7, 3, 1, 1, 1, 0}, 1);
    check_conv((ConvCase){2, 19, 18, 17, 1, 1, 3, 1, 1}, 0); /* many chunks */
}

/* Far more output rows than one chunk (at most 2048 rows), so forward, backward filter (several partial-dw
 * groups of several chunks each) and backward data run many chunks; chunk boundaries fall inside samples. */
static void test_conv_chunked_s1(void **state) { check_conv((ConvCase){2, 17, 17, 17, 3, 5, 3, 1, 1}, 0); }
/* stride 2 with more positions per residue class than one chunk */
static void test_conv_chunked_s2(void **state) { check_conv((ConvCase){2, 33, 34, 35, 4, 6, 3, 2, 1}, 0); }
/* wide rows (k^3*c_in = 1728): the chunk is limited by bytes, not by the row cap */
static void test_conv_chunked_wide(void **state) { check_conv((ConvCase){2, 10, 9, 11, 64, 8, 3, 1, 1}, 0); }

/* more chunks (37) than partial-dw groups (32): some groups sum two chunks before the ordered reduction */
static void test_conv_chunked_groups(void **state) { check_conv((ConvCase){1, 42, 41, 43, 1, 2, 3, 1, 1}, 0); }

/* Determinism: 1 and 2 threads give the same bits for every output (each chunk's GEMM runs on one thread, the
 * chunking and the dw/dbias reduction orders depend only on the shape). */
static void test_conv_threads(void **state) {
    const ConvCase cases[] = {{2, 17, 17, 17, 3, 5, 3, 1, 1}, {2, 9, 10, 11, 6, 7, 3, 2, 1}, {2, 9, 8, 7, 40, 6, 1, 1, 0}};
    const Conv3dShape shapes[] = {conv3d_shape(cases[0].n, cases[0].d, cases[0].h, cases[0].w, cases[0].ci, cases[0].co,
                                               cases[0].k, cases[0].stride, cases[0].pad),
                                  conv3d_shape(cases[1].n, cases[1].d, cases[1].h, cases[1].w, cases[1].ci, cases[1].co,
                                               cases[1].k, cases[1].stride, cases[1].pad),
                                  conv3d_shape(cases[2].n, cases[2].d, cases[2].h, cases[2].w, cases[2].ci, cases[2].co,
                                               cases[2].k, cases[2].stride, cases[2].pad),
                                  conv_3d(2, 6, 30, 31, 1, 8, 7, 7, 7, 1, 2, 2, 3, 3, 3),
                                  conv_3d(2, 1, 33, 35, 5, 6, 1, 3, 3, 1, 1, 1, 0, 1, 1)};
    for (int t = 0; t < 5; t++) {
        const Conv3dShape s = shapes[t];
        const ConvCase cc = {.ci = s.c_in, .co = s.c_out};
        const long sizes[4] = {conv3d_output_count(&s), conv3d_input_count(&s), conv3d_weight_count(&s), cc.co};
        float *x = frand(sizes[1], -1, 1), *w = frand(sizes[2], -1, 1), *b = frand(cc.co, -1, 1);
        float *r = frand(sizes[0], -1, 1);
        void *ws = malloc(conv3d_workspace_bytes_cpu(&s) + 1);
        float *out[3][4];
        const int threads[3] = {2, 1, 2};
        for (int run = 0; run < 3; run++) {
            set_threads(threads[run]);
            for (int j = 0; j < 4; j++) out[run][j] = fnew(sizes[j]);
            conv3d_forward_cpu(&s, x, w, b, NULL, out[run][0], ws);
            conv3d_backward_data_cpu(&s, r, w, out[run][1], 0.0f, ws);
            conv3d_backward_filter_cpu(&s, x, r, out[run][2], out[run][3], 0.0f, ws);
        }
        set_threads(2);
        for (int run = 1; run < 3; run++)
            for (int j = 0; j < 4; j++) assert_memory_equal(out[0][j], out[run][j], sizeof(float) * (size_t)sizes[j]);
        for (int run = 0; run < 3; run++)
            for (int j = 0; j < 4; j++) free(out[run][j]);
        free(x), free(w), free(b), free(r), free(ws);
    }
}

/* ---- groupnorm -------------------------------------------------------------------------------------------- */

static void ref_groupnorm(const GroupNormShape *s, const double *x, const double *gamma, const double *beta,
                          double *y, double *mean, double *rstd) {
    const int cg = s->c / s->groups;
    for (int n = 0; n < s->n; n++)
        for (int g = 0; g < s->groups; g++) {
            double sum = 0.0, sq = 0.0;
            const double cnt = (double)s->spatial * cg;
            for (long p = 0; p < s->spatial; p++)
                for (int j = g * cg; j < (g + 1) * cg; j++) sum += x[((long)n * s->spatial + p) * s->c + j];
            const double m = sum / cnt;
            for (long p = 0; p < s->spatial; p++)
                for (int j = g * cg; j < (g + 1) * cg; j++) {
                    const double d = x[((long)n * s->spatial + p) * s->c + j] - m;
                    sq += d * d;
                }
            const double rs = 1.0 / sqrt(sq / cnt + s->eps);
            if (mean) mean[n * s->groups + g] = m;
            if (rstd) rstd[n * s->groups + g] = rs;
            for (long p = 0; p < s->spatial; p++)
                for (int j = g * cg; j < (g + 1) * cg; j++) {
                    const long i = ((long)n * s->spatial + p) * s->c + j;
                    const double pre = (x[i] - m) * rs * gamma[j] + beta[j];
                    y[i] = s->silu ? pre / (1.0 + exp(-pre)) : pre; /* fused SiLU: silu(pre) */
                }
        }
}

typedef struct {
    GroupNormShape s;
    double *x, *gamma, *beta, *r, *y;
} GnCtx;

static double gn_objective(void *p) {
    GnCtx *c = p;
    ref_groupnorm(&c->s, c->x, c->gamma, c->beta, c->y, NULL, NULL);
    double L = 0.0;
    for (long i = 0; i < (long)c->s.n * c->s.spatial * c->s.c; i++) L += c->r[i] * c->y[i];
    return L;
}

/* silu = 1: the fused GroupNorm + SiLU, against the same float64 reference followed by SiLU (values and finite
 * differences) */
static void check_groupnorm_act(int n, long spatial, int c, int groups, int silu) {
    const GroupNormShape s = {.n = n, .spatial = spatial, .c = c, .groups = groups, .eps = 1e-5f, .silu = silu};
    const long cnt = (long)n * spatial * c, ng = (long)n * groups;
    /* an offset and a per-channel scale so the statistics are not trivially 0 and 1 */
    float *x = frand(cnt, -1, 1);
    for (long i = 0; i < cnt; i++) x[i] = 0.5f + x[i] * (1.0f + (float)(i % c) * 0.3f);
    float *gamma = frand(c, 0.5, 1.5), *beta = frand(c, -0.5, 0.5), *r = frand(cnt, -1, 1);
    GnCtx ctx = {.s = s, .x = to_d(x, cnt), .gamma = to_d(gamma, c), .beta = to_d(beta, c), .r = to_d(r, cnt),
                 .y = dnew(cnt)};
    double *rmean = dnew(ng), *rrstd = dnew(ng);
    ref_groupnorm(&s, ctx.x, ctx.gamma, ctx.beta, ctx.y, rmean, rrstd);

    float *y = fnan(cnt), *mean = fnan(ng), *rstd = fnan(ng);
    groupnorm_forward_cpu(&s, x, gamma, beta, y, mean, rstd);
    expect_close("groupnorm forward", y, ctx.y, cnt, FWD_TOL);
    expect_close("groupnorm mean", mean, rmean, ng, FWD_TOL);
    expect_close("groupnorm rstd", rstd, rrstd, ng, FWD_TOL);

    float *dx = fnan(cnt), *dg = fnan(c), *db = fnan(c);
    groupnorm_backward_cpu(&s, r, x, gamma, beta, mean, rstd, dx, dg, db, 0.0f, 0.0f);
    expect_grad("groupnorm dx", gn_objective, &ctx, ctx.x, cnt, dx);
    expect_grad("groupnorm dgamma", gn_objective, &ctx, ctx.gamma, c, dg);
    expect_grad("groupnorm dbeta", gn_objective, &ctx, ctx.beta, c, db);

    /* beta 1 on dx only, then on the parameters only */
    float *dx1 = frand(cnt, -1, 1), *dg1 = frand(c, -1, 1), *db1 = frand(c, -1, 1);
    float *dx0 = fcopy(dx1, cnt), *dg0 = fcopy(dg1, c), *db0 = fcopy(db1, c);
    groupnorm_backward_cpu(&s, r, x, gamma, beta, mean, rstd, dx1, dg1, db1, 1.0f, 0.0f);
    expect_accumulated("groupnorm dx beta 1", dx1, dx0, dx, cnt);
    assert_memory_equal(dg1, dg, sizeof(float) * (size_t)c);
    assert_memory_equal(db1, db, sizeof(float) * (size_t)c);
    memcpy(dx1, dx0, sizeof(float) * (size_t)cnt);
    memcpy(dg1, dg0, sizeof(float) * (size_t)c);
    memcpy(db1, db0, sizeof(float) * (size_t)c);
    groupnorm_backward_cpu(&s, r, x, gamma, beta, mean, rstd, dx1, dg1, db1, 0.0f, 1.0f);
    assert_memory_equal(dx1, dx, sizeof(float) * (size_t)cnt);
    expect_accumulated("groupnorm dgamma beta 1", dg1, dg0, dg, c);
    expect_accumulated("groupnorm dbeta beta 1", db1, db0, db, c);

    free(x), free(gamma), free(beta), free(r), free(rmean), free(rrstd), free(y), free(mean), free(rstd);
    free(dx), free(dg), free(db), free(dx1), free(dg1), free(db1), free(dx0), free(dg0), free(db0);
    free(ctx.x), free(ctx.gamma), free(ctx.beta), free(ctx.r), free(ctx.y);
}

static void check_groupnorm(int n, long spatial, int c, int groups) {
    check_groupnorm_act(n, spatial, c, groups, 0);
    check_groupnorm_act(n, spatial, c, groups, 1);
}

static void test_groupnorm_g1(void **state) { check_groupnorm(2, 3 * 4 * 5, 12, 1); }
static void test_groupnorm_gc(void **state) { check_groupnorm(2, 3 * 4 * 5, 12, 12); }
static void test_groupnorm_g3(void **state) { check_groupnorm(2, 3 * 4 * 5, 12, 3); }
static void test_groupnorm_c5(void **state) {
    check_groupnorm(3, 5 * 6 * 7, 5, 5);
    check_groupnorm(2, 5 * 6 * 7, 5, 1);
}
/* more spatial positions than one partial-sum block */
static void test_groupnorm_blocks(void **state) { check_groupnorm(2, 7 * 8 * 9, 6, 2); }

static void check_groupnorm_threads(int silu) {
    const GroupNormShape s = {.n = 2, .spatial = 3001, .c = 12, .groups = 3, .eps = 1e-5f, .silu = silu};
    const long cnt = 2L * 3001 * 12;
    float *x = frand(cnt, -2, 3), *gamma = frand(12, 0.5, 1.5), *beta = frand(12, -1, 1), *dy = frand(cnt, -1, 1);
    float *o[2][7];
    for (int th = 0; th < 2; th++) {
        omp_set_num_threads(th + 1);
        o[th][0] = fnew(cnt), o[th][1] = fnew(6), o[th][2] = fnew(6);
        o[th][3] = fnew(cnt), o[th][4] = fnew(12), o[th][5] = fnew(12);
        groupnorm_forward_cpu(&s, x, gamma, beta, o[th][0], o[th][1], o[th][2]);
        groupnorm_backward_cpu(&s, dy, x, gamma, beta, o[th][1], o[th][2], o[th][3], o[th][4], o[th][5], 0.0f, 0.0f);
    }
    omp_set_num_threads(2);
    const long sizes[6] = {cnt, 6, 6, cnt, 12, 12};
    for (int j = 0; j < 6; j++) assert_memory_equal(o[0][j], o[1][j], sizeof(float) * (size_t)sizes[j]);
    for (int th = 0; th < 2; th++)
        for (int j = 0; j < 6; j++) free(o[th][j]);
    free(x), free(gamma), free(beta), free(dy);
}
/* bit-identical results on 1 and 2 threads, plain and fused with SiLU */
static void test_groupnorm_threads(void **state) {
    check_groupnorm_threads(0);
    check_groupnorm_threads(1);
}

/* ---- silu ------------------------------------------------------------------------------------------------- */

typedef struct {
    long n;
    double *x, *r;
} EwCtx;

static double silu_objective(void *p) {
    EwCtx *c = p;
    double L = 0.0;
    for (long i = 0; i < c->n; i++) L += c->r[i] * c->x[i] / (1.0 + exp(-c->x[i]));
    return L;
}

static void test_silu(void **state) {
    const long n = 1001;
    float *x = frand(n, -8, 8), *r = frand(n, -1, 1);
    EwCtx c = {.n = n, .x = to_d(x, n), .r = to_d(r, n)};
    double *ry = dnew(n);
    for (long i = 0; i < n; i++) ry[i] = c.x[i] / (1.0 + exp(-c.x[i]));
    float *y = fnan(n);
    silu_forward_cpu(n, x, y);
    expect_close("silu forward", y, ry, n, FWD_TOL);
    float *dx = fnan(n);
    silu_backward_cpu(n, x, r, dx, 0.0f);
    /* every element: elementwise op, so the full objective is cheap */
    const long m = n;
    double *fd = dnew(m);
    for (long i = 0; i < m; i++) {
        const double v = c.x[i];
        c.x[i] = v + FD_H;
        const double lp = silu_objective(&c);
        c.x[i] = v - FD_H;
        const double lm = silu_objective(&c);
        c.x[i] = v;
        fd[i] = (lp - lm) / (2 * FD_H);
    }
    expect_close("silu dx", dx, fd, n, GRAD_TOL);
    float *dx1 = frand(n, -1, 1), *dx0 = fcopy(dx1, n);
    silu_backward_cpu(n, x, r, dx1, 1.0f);
    expect_accumulated("silu dx beta 1", dx1, dx0, dx, n);
    /* large input, parallel path: same values as the serial one */
    const long big = 100003;
    float *xb = frand(big, -10, 10), *yb = fnew(big);
    silu_forward_cpu(big, xb, yb);
    for (long i = 0; i < big; i += 997) assert_true(fabsf(yb[i] - xb[i] / (1.0f + expf(-xb[i]))) <= 1e-6f);
    /* saturation: no overflow to inf or NaN far out */
    const float ext[6] = {-1000.0f, -100.0f, -88.5f, 0.0f, 90.0f, 1000.0f};
    float ey[6], edx[6];
    const float ones[6] = {1, 1, 1, 1, 1, 1};
    silu_forward_cpu(6, ext, ey);
    silu_backward_cpu(6, ext, ones, edx, 0.0f);
    for (int i = 0; i < 6; i++) {
        const double ref = ext[i] / (1.0 + exp(-(double)ext[i]));
        assert_true(isfinite(ey[i]) && isfinite(edx[i]));
        assert_true(fabs(ey[i] - ref) <= 1e-6 * fabs(ref) + 1e-30);
    }
    assert_true(fabsf(edx[0]) < 1e-30f && edx[5] == 1.0f && edx[3] == 0.5f);
    free(x), free(r), free(c.x), free(c.r), free(ry), free(y), free(dx), free(fd), free(dx1), free(dx0), free(xb);
    free(yb);
}

/* GELU (erf) far left, where x Phi(x) and its derivative leave float's normal range: 1 + erf(u) is 0 or at least
 * FLT_MIN, never subnormal (exp_vec holds its argument at -87, so without gelu_math.h's select the tail gave
 * t x e^-87 ~ 3e-39: a subnormal whose microcode assist made a GELU epilogue 4x slower on such inputs), and GELU and
 * its derivative are within 32 FLT_MIN of float64 (1e-5 and, for the derivative's cancellation of two nearly equal
 * terms, 1e-2 relative above that). The derivative's density term keeps exp_vec's clamp, x e^-87 / sqrt(2 pi), so
 * it is checked down to x = -30 (2e-37 there). The ordinary range is op_cases.c's, against the double backend. */
static void test_gelu_erf_far_tail(void **state) {
    for (float u = -8.0f; u > -1e4f; u *= 1.001f) {
        const float r = gelu_one_plus_erf(u);
        if (fpclassify(r) == FP_SUBNORMAL) fail_msg("1 + erf(%.9g) = %g is subnormal", u, r);
    }
    enum { N = 12 };
    const float x[N] = {-12.0f, -12.7f, -12.9f, -13.0f, -13.2f, -13.5f, -14.0f, -16.0f, -20.0f, -30.0f, -100.0f, -1e4f};
    const float ones[N] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    float y[N], dx[N];
    const GeluShape s = {.count = N, .kind = GELU_ERF, .dtype = DT_F32};
    gelu_ops_cpu.forward(&s, x, y);
    gelu_ops_cpu.backward(&s, x, ones, dx, 0.0f);
    for (int i = 0; i < N; i++) {
        const double v = x[i], phi = 0.5 * erfc(-v / sqrt(2.0)), dens = exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
        const double ry = v * phi, rdx = phi + v * dens;
        if (fabs(y[i] - ry) > fmax(1e-5 * fabs(ry), 32 * FLT_MIN) ||
            (v >= -30.0 && fabs(dx[i] - rdx) > fmax(1e-2 * fabs(rdx), 32 * FLT_MIN)))
            fail_msg("gelu erf at x = %g: y %g (float64 %g), dx %g (float64 %g)", v, y[i], ry, dx[i], rdx);
    }
    (void)state;
}

/* ---- upsample --------------------------------------------------------------------------------------------- */

typedef struct {
    int n, d, h, w, c;
    double *x, *r;
} UpCtx;

static double up_objective(void *p) {
    UpCtx *u = p;
    double L = 0.0;
    for (int n = 0; n < u->n; n++)
        for (int z = 0; z < 2 * u->d; z++)
            for (int y = 0; y < 2 * u->h; y++)
                for (int x = 0; x < 2 * u->w; x++)
                    for (int j = 0; j < u->c; j++) {
                        const long o = ((((long)n * 2 * u->d + z) * 2 * u->h + y) * 2 * u->w + x) * u->c + j;
                        const long i = ((((long)n * u->d + z / 2) * u->h + y / 2) * u->w + x / 2) * u->c + j;
                        L += u->r[o] * u->x[i];
                    }
    return L;
}

static void test_upsample(void **state) {
    const int n = 2, d = 3, h = 4, w = 5, c = 3;
    const long nx = (long)n * d * h * w * c, ny = nx * 8;
    float *x = frand(nx, -1, 1), *r = frand(ny, -1, 1);
    UpCtx u = {n, d, h, w, c, to_d(x, nx), to_d(r, ny)};
    float *y = fnan(ny);
    upsample2x_forward_cpu(n, d, h, w, c, x, y);
    double *ry = dnew(ny);
    for (int b = 0; b < n; b++)
        for (int z = 0; z < 2 * d; z++)
            for (int yy = 0; yy < 2 * h; yy++)
                for (int xx = 0; xx < 2 * w; xx++)
                    for (int j = 0; j < c; j++)
                        ry[((((long)b * 2 * d + z) * 2 * h + yy) * 2 * w + xx) * c + j] =
                            u.x[((((long)b * d + z / 2) * h + yy / 2) * w + xx / 2) * c + j];
    expect_close("upsample forward", y, ry, ny, FWD_TOL);
    float *dx = fnan(nx);
    upsample2x_backward_cpu(n, d, h, w, c, r, dx, 0.0f);
    expect_grad("upsample dx", up_objective, &u, u.x, nx, dx);
    float *dx1 = frand(nx, -1, 1), *dx0 = fcopy(dx1, nx);
    upsample2x_backward_cpu(n, d, h, w, c, r, dx1, 1.0f);
    expect_accumulated("upsample dx beta 1", dx1, dx0, dx, nx);
    free(x), free(r), free(u.x), free(u.r), free(y), free(ry), free(dx), free(dx1), free(dx0);
}

/* ---- elementwise ------------------------------------------------------------------------------------------ */

static void test_elementwise(void **state) {
    const long sizes[2] = {1001, 70001}; /* serial and OpenMP paths */
    for (int t = 0; t < 2; t++) {
        const long n = sizes[t];
        float *a = frand(n, -1, 1), *b = frand(n, -1, 1), *y = fnan(n);
        add_forward_cpu(n, a, b, y);
        for (long i = 0; i < n; i++) assert_true(y[i] == a[i] + b[i]);
        float *dst = fnan(n);
        accumulate_cpu(n, a, dst, 0.0f); /* beta 0 overwrites NaN */
        assert_memory_equal(dst, a, sizeof(float) * (size_t)n);
        accumulate_cpu(n, b, dst, 1.0f);
        for (long i = 0; i < n; i++) assert_true(dst[i] == a[i] + b[i]);
        scale_cpu(n, dst, 0.25f);
        for (long i = 0; i < n; i++) assert_true(dst[i] == (a[i] + b[i]) * 0.25f);
        free(a), free(b), free(y), free(dst);
    }
}

/* ---- loss ------------------------------------------------------------------------------------------------- */

typedef struct {
    ReconLoss kind;
    long n;
    double *pred, *target, scale;
} LossCtx;

static double loss_objective(void *p) {
    LossCtx *c = p;
    double s = 0.0;
    for (long i = 0; i < c->n; i++) {
        const double d = c->pred[i] - c->target[i];
        s += c->kind == LOSS_L1 ? fabs(d) : d * d;
    }
    return c->scale * s / (double)c->n;
}

static void check_loss(ReconLoss kind) {
    const long n = 20011; /* several reduction chunks, not a multiple of the lane count */
    float *pred = frand(n, -1, 1), *target = frand(n, -1, 1);
    for (long i = 0; i < n; i++) {
        if (i % 10 == 3) target[i] = pred[i]; /* exact ties: the L1 subgradient there is 0 */
        else if (fabsf(pred[i] - target[i]) < 1e-3f) target[i] = pred[i] + 0.01f;
    }
    const float scale = 0.75f;
    LossCtx c = {.kind = kind, .n = n, .pred = to_d(pred, n), .target = to_d(target, n), .scale = scale};
    float loss = NAN, *dpred = fnan(n);
    recon_loss_cpu(kind, n, pred, target, &loss, dpred, scale);
    const double ref = loss_objective(&c) / scale;
    expect_close("loss value", &loss, &ref, 1, FWD_TOL);
    expect_grad("loss dpred", loss_objective, &c, c.pred, n, dpred);
    if (kind == LOSS_L1) {
        const float g = (float)(scale / (double)n);
        for (long i = 0; i < n; i++) {
            const float e = pred[i] > target[i] ? g : pred[i] < target[i] ? -g : 0.0f;
            assert_true(dpred[i] == e);
        }
    } else
        for (long i = 3; i < n; i += 10) assert_true(dpred[i] == 0.0f);
    /* evaluation only: dpred NULL gives the same value */
    float loss2 = NAN;
    recon_loss_cpu(kind, n, pred, target, &loss2, NULL, scale);
    assert_true(loss2 == loss);
    free(pred), free(target), free(dpred), free(c.pred), free(c.target);
}

static void test_loss_l1(void **state) { check_loss(LOSS_L1); }
static void test_loss_mse(void **state) { check_loss(LOSS_MSE); }

static void test_loss_small(void **state) {
    /* by hand: d = {1, -2, 0, 0.5}: L1 mean 3.5/4, MSE mean 5.25/4 */
    const float pred[4] = {1, -1, 3, 0.5f}, target[4] = {0, 1, 3, 0};
    float loss, dp[4];
    recon_loss_cpu(LOSS_L1, 4, pred, target, &loss, dp, 2.0f);
    assert_float_equal(loss, 0.875f, 1e-7f);
    assert_float_equal(dp[0], 0.5f, 0), assert_float_equal(dp[1], -0.5f, 0), assert_float_equal(dp[2], 0.0f, 0);
    recon_loss_cpu(LOSS_MSE, 4, pred, target, &loss, dp, 2.0f);
    assert_float_equal(loss, 1.3125f, 1e-7f);
    assert_float_equal(dp[0], 1.0f, 1e-7f), assert_float_equal(dp[1], -2.0f, 1e-7f);
    assert_float_equal(dp[3], 0.5f, 1e-7f);
}

/* ---- latent ----------------------------------------------------------------------------------------------- */

typedef struct {
    LatentShape s;
    double *mu, *lv, *eps, *r, kl_scale;
} LatCtx;

/* z and kl in double; returns sum(r*z) + kl_scale*kl */
static double latent_ref(LatCtx *c, double *z, double *kl) {
    double L = 0.0, total = 0.0;
    const long cps = c->s.count_per_sample;
    for (int b = 0; b < c->s.n; b++) {
        double sample = 0.0;
        for (long j = 0; j < cps; j++) {
            const long i = b * cps + j;
            const double lv = fmin(fmax(c->lv[i], c->s.logvar_min), c->s.logvar_max);
            const double zi = c->mu[i] + (c->eps ? exp(0.5 * lv) * c->eps[i] : 0.0);
            if (z) z[i] = zi;
            L += c->r[i] * zi;
            sample += c->mu[i] * c->mu[i] + exp(lv) - 1.0 - lv;
        }
        total += 0.5 * sample;
    }
    if (kl) *kl = total / c->s.n;
    return L + c->kl_scale * total / c->s.n;
}
static double latent_objective(void *p) { return latent_ref(p, NULL, NULL); }

static void check_latent(int with_eps) {
    const LatentShape s = {.n = 3, .count_per_sample = 35, .logvar_min = -5.0f, .logvar_max = 3.0f};
    const long n = 3 * 35;
    float *mu = frand(n, -2, 2), *lv = frand(n, -7, 5), *eps = frand(n, -2, 2), *r = frand(n, -1, 1);
    for (long i = 0; i < n; i++) /* keep finite differences off the clamp's corners */
        if (fabsf(lv[i] - s.logvar_min) < 1e-3f || fabsf(lv[i] - s.logvar_max) < 1e-3f) lv[i] += 0.01f;
    LatCtx c = {.s = s, .mu = to_d(mu, n), .lv = to_d(lv, n), .eps = with_eps ? to_d(eps, n) : NULL,
                .r = to_d(r, n), .kl_scale = 0.3};
    double *rz = dnew(n), rkl;
    latent_ref(&c, rz, &rkl);
    float *z = fnan(n), kl = NAN;
    latent_forward_cpu(&s, mu, lv, with_eps ? eps : NULL, z, &kl);
    expect_close("latent z", z, rz, n, FWD_TOL);
    expect_close("latent kl", &kl, &rkl, 1, FWD_TOL);
    if (!with_eps) assert_memory_equal(z, mu, sizeof(float) * (size_t)n);

    float *dmu = fnan(n), *dlv = fnan(n);
    latent_backward_cpu(&s, mu, lv, with_eps ? eps : NULL, r, (float)c.kl_scale, dmu, dlv);
    expect_grad("latent dmu", latent_objective, &c, c.mu, n, dmu);
    expect_grad("latent dlogvar", latent_objective, &c, c.lv, n, dlv);
    int outside = 0;
    for (long i = 0; i < n; i++)
        if (lv[i] < s.logvar_min || lv[i] > s.logvar_max) {
            assert_true(dlv[i] == 0.0f); /* exactly: the clamp passes nothing */
            outside++;
        }
    assert_true(outside > 10);
    free(mu), free(lv), free(eps), free(r), free(rz), free(z), free(dmu), free(dlv);
    free(c.mu), free(c.lv), free(c.eps), free(c.r);
}

static void test_latent(void **state) { check_latent(1); }
static void test_latent_no_eps(void **state) { check_latent(0); }

static void test_latent_hand(void **state) {
    /* n 2, 2 values each: sample 0 mu {1, 0}, lv {0, ln 2}: 0.5*(1 + 0 + (1-1-0) + (2-1-ln2)) = 1 - ln2/2
     * sample 1 mu {0, 2}, lv {-1, 10 -> clamped to 1}: 0.5*(4 + (e^-1 - 1 + 1) + (e - 1 - 1)) */
    const LatentShape s = {.n = 2, .count_per_sample = 2, .logvar_min = -4.0f, .logvar_max = 1.0f};
    const float mu[4] = {1, 0, 0, 2}, lv[4] = {0, (float)log(2.0), -1, 10};
    const double s0 = 1.0 - 0.5 * log(2.0), s1 = 0.5 * (4.0 + exp(-1.0) + exp(1.0) - 2.0);
    float z[4], kl;
    latent_forward_cpu(&s, mu, lv, NULL, z, &kl);
    assert_float_equal(kl, (float)(0.5 * (s0 + s1)), 1e-6f);
    /* clamp: z uses exp(0.5*1) for the clamped element */
    const float eps[4] = {0, 0, 0, 1};
    latent_forward_cpu(&s, mu, lv, eps, z, &kl);
    assert_float_equal(z[3], 2.0f + expf(0.5f), 1e-6f);
    float dmu[4], dlv[4];
    const float dz[4] = {1, 1, 1, 1};
    latent_backward_cpu(&s, mu, lv, eps, dz, 1.0f, dmu, dlv);
    assert_true(dlv[3] == 0.0f);
    assert_float_equal(dmu[0], 1.0f + 0.5f, 1e-6f); /* dz + mu/n */
}

/* The KL term's gradient near log-variance 0, where a trained latent sits: 0.5*(exp(lv) - 1)/n computed as
 * sd*sd - 1 in float rounds to 0 for |lv| < 6e-8 and keeps few digits up to 1e-3; expm1 keeps them all. */
static void test_latent_kl_gradient_near_zero_logvar(void **state) {
    const float lv[4] = {1e-7f, -3e-8f, 2e-4f, -1e-3f}, mu[4] = {0, 0, 0, 0};
    LatentShape s = {.n = 1, .count_per_sample = 4, .logvar_min = -30, .logvar_max = 20};
    float dmu[4], dlv[4];
    latent_backward_cpu(&s, mu, lv, NULL, NULL, 1.0f, dmu, dlv);
    for (int i = 0; i < 4; i++) {
        const double want = 0.5 * expm1((double)lv[i]);
        if (fabs(dlv[i] - want) > 1e-6 * fabs(want)) fail_msg("dlogvar[%d] = %.9g, want %.9g", i, dlv[i], want);
    }
}

/* ---- optimizer -------------------------------------------------------------------------------------------- */

static void test_adamw(void **state) {
    const long n = 1003;
    float *p = frand(n, -1, 1), *m = fnew(n), *v = fnew(n);
    memset(m, 0, sizeof(float) * (size_t)n);
    memset(v, 0, sizeof(float) * (size_t)n);
    double *rp = to_d(p, n), *rm = dnew(n), *rv = dnew(n);
    /* the betas as a config gives them (doubles): 1 - beta is taken from them, not from their float rounding,
     * which would put the second moment 1.3e-5 off torch's (0.999f is 0.99899999) */
    const OptimConfig a = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05};
    const double lr = 1e-2;
    const float gs = 0.5f;
    for (long t = 1; t <= 5; t++) {
        float *g = frand(n, -1, 1);
        const AdamWConsts c = adamw_consts(&a, lr, t, gs);
        adamw_cpu(n, p, g, m, v, &c);
        /* torch.optim.AdamW, single tensor: decay, moments, bias-corrected step */
        const double b1 = a.beta1, b2 = a.beta2;
        for (long i = 0; i < n; i++) {
            const double gi = (double)g[i] * gs;
            rp[i] *= 1.0 - lr * a.weight_decay;
            rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
            rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
            const double mh = rm[i] / (1.0 - pow(b1, t)), vh = rv[i] / (1.0 - pow(b2, t));
            rp[i] -= lr * mh / (sqrt(vh) + a.eps);
        }
        free(g);
    }
    expect_close("adamw p", p, rp, n, 1e-6);
    expect_close("adamw m", m, rm, n, 2e-6);
    expect_close("adamw v", v, rv, n, 2e-6);
    free(p), free(m), free(v), free(rp), free(rm), free(rv);
}

/* gemm's matmul, and a product in a serial section outside any parallel region, leave OpenMP's team as they found
 * it: cpu_gemm.c runs a serial section's oneDNN product outside an active region with the team set to one for the
 * call (so oneDNN forks no team of its own) and must set it back, or every later parallel region of the process runs
 * on one thread. The matmul's two paths: an M=2 product (calling thread) and a 256 x 256 x 256 one (jobs). */
static void test_gemm_keeps_the_openmp_team(void **state) {
    (void)state;
    const int before = omp_get_max_threads();
    omp_set_num_threads(3);
    for (int big = 0; big < 2; big++) {
        const int m = big ? 256 : 2, n = big ? 256 : 8, k = big ? 256 : 8;
        float *a = calloc((size_t)m * k, sizeof(float)), *b = calloc((size_t)n * k, sizeof(float)),
              *c = calloc((size_t)m * n, sizeof(float));
        const GemmShape s = {.batch = 1, .m = m, .n = n, .k = k, .trans_b = 1, .alpha = 1.0f, .dtype = DT_F32};
        gemm_ops_cpu.matmul(&s, a, b, NULL, c, NULL, 0.0f);
        assert_int_equal(omp_get_max_threads(), 3);
        if (!big) { /* the same product straight through cpu_sgemm in a serial section, in no parallel region */
            const int saved = cpu_gemm_serial_begin();
            cpu_sgemm(0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
            cpu_gemm_serial_end(saved);
            assert_int_equal(omp_get_max_threads(), 3);
        }
        free(a), free(b), free(c);
    }
    omp_set_num_threads(before);
}

/* gemm's bias_grad gives the same bits on 1, 2, 3 and 5 threads, whichever way it splits its jobs: one chunk of rows
 * in blocks of columns (pos_embed's 2 rows of many columns; 7 rows of 3000, blocks that move with the threads), two
 * chunks with the columns split too (more threads than chunks), many chunks of whole rows; beta 0 and 1. It catches
 * jobs that miss or repeat rows or columns at some thread count (seen: a planted job that dropped its last row). The
 * float64 check of the values is test_backend_ops'. */
static void test_bias_grad_threads(void **state) {
    (void)state;
    const int before = omp_get_max_threads();
    const long shapes[4][2] = {{2, 70001}, {7, 3000}, {300, 1000}, {5000, 16}};
    for (int sh = 0; sh < 4; sh++) {
        const long rows = shapes[sh][0];
        const int cols = (int)shapes[sh][1];
        float *dy = frand(rows * cols, -1, 1), *db0 = frand(cols, -1, 1), *want = NULL;
        for (int beta = 0; beta < 2; beta++) {
            const int threads[4] = {1, 2, 3, 5};
            for (int t = 0; t < 4; t++) {
                float *db = fnew(cols);
                memcpy(db, db0, sizeof(float) * (size_t)cols);
                omp_set_num_threads(threads[t]);
                gemm_ops_cpu.bias_grad(DT_F32, rows, cols, dy, db, (float)beta);
                if (t == 0) want = db;
                else {
                    assert_memory_equal(db, want, sizeof(float) * (size_t)cols);
                    free(db);
                }
            }
            free(want);
        }
        free(dy), free(db0);
    }
    omp_set_num_threads(before);
}

static void test_sumsq(void **state) {
    const long n = 1000003;
    float *x = frand(n, -1, 1);
    double ref = 0.0;
    for (long i = 0; i < n; i++) ref += (double)x[i] * x[i];
    float out[2] = {NAN, NAN};
    for (int th = 0; th < 2; th++) {
        omp_set_num_threads(th + 1);
        sumsq_cpu(n, x, &out[th]);
    }
    omp_set_num_threads(2);
    expect_close("sumsq", &out[0], &ref, 1, 1e-6);
    assert_memory_equal(&out[0], &out[1], sizeof(float)); /* bit-identical for 1 and 2 threads */
    float small;
    sumsq_cpu(3, (const float[]){1, 2, 3}, &small);
    assert_true(small == 14.0f);
    free(x);
}

/* ---- rng -------------------------------------------------------------------------------------------------- */

static void test_normal_fill(void **state) {
    const long n = 100000, k = 777;
    float *a = fnew(n + k), *b = fnew(n), *c = fnew(n), *d = fnew(n);
    normal_fill_cpu(n + k, 42, 7, 0, a);
    normal_fill_cpu(n, 42, 7, k, b);
    assert_memory_equal(a + k, b, sizeof(float) * (size_t)n); /* offset k is the tail of a longer fill */
    normal_fill_cpu(n, 42, 7, k, c);
    assert_memory_equal(b, c, sizeof(float) * (size_t)n); /* deterministic */
    normal_fill_cpu(n, 42, 8, k, d);
    assert_memory_not_equal(b, d, sizeof(float) * (size_t)n); /* another stream differs */
    double s = 0.0, sq = 0.0;
    for (long i = 0; i < n; i++) {
        assert_true(isfinite(a[i]));
        s += a[i];
        sq += (double)a[i] * a[i];
    }
    const double mean = s / n, sd = sqrt(sq / n - mean * mean);
    assert_true(fabs(mean) < 0.02); /* 6 standard errors */
    assert_true(fabs(sd - 1.0) < 0.02);
    assert_true(a[5] == vx_normal(42, 7, 5)); /* the same function the GPU uses */
    free(a), free(b), free(c), free(d);
}

/* ---- the ResNet family's ops (issue 27), through the CPU backend's tables ----------------------------------- */

#define BN_EPS 1e-5f
#define BN_MOM 0.1f

/* float64 training BatchNorm over [rows][c]: the batch's mean and biased variance, y = xhat*gamma + beta */
static void ref_bn(long rows, int c, const double *x, const double *gamma, const double *beta, double *y, double *mean,
                   double *var) {
    for (int j = 0; j < c; j++) {
        double m = 0.0, v = 0.0;
        for (long r = 0; r < rows; r++) m += x[r * c + j];
        m /= (double)rows;
        for (long r = 0; r < rows; r++) v += (x[r * c + j] - m) * (x[r * c + j] - m);
        v /= (double)rows;
        if (mean) mean[j] = m;
        if (var) var[j] = v;
        for (long r = 0; r < rows; r++) y[r * c + j] = (x[r * c + j] - m) / sqrt(v + BN_EPS) * gamma[j] + beta[j];
    }
}

typedef struct {
    long rows;
    int c;
    double *x, *gamma, *beta, *r, *y;
} BnCtx;

static double bn_objective(void *p) {
    BnCtx *b = p;
    ref_bn(b->rows, b->c, b->x, b->gamma, b->beta, b->y, NULL, NULL);
    double L = 0.0;
    for (long i = 0; i < b->rows * b->c; i++) L += b->r[i] * b->y[i];
    return L;
}

/* A BatchNorm layer's training step as the model runs it through the table, its batch of n samples split over
 * `ranks` ranks (samples [q*n/ranks, (q+1)*n/ranks) on rank q): each rank's local sums added in rank order where
 * SyncBatchNorm all-reduces them (ranks 1: the plain layer, nothing summed). dgamma, dbeta: the summed gradient
 * sums; dx with beta_dx. */
typedef struct {
    float *y, *dx, *dgamma, *dbeta, *mean, *invstd;
} BnOut;
static void bn_layer(int n, long S, int c, int ranks, const float *x, const float *gamma, const float *beta,
                     const float *dy, float *rm, float *rv, BnOut *o, float beta_dx) {
    const BatchNormOps *bn = backend_cpu()->batchnorm;
    const double count = (double)n * S;
    float *sum = fnew(c), *sq = fnew(c), *part = fnew(c), *a = fnew(c), *b = fnew(c);
    for (int j = 0; j < c; j++) sum[j] = sq[j] = o->dgamma[j] = o->dbeta[j] = 0.0f;
#define BN_RANKS(...)                                                                                         \
    for (int q = 0; q < ranks; q++) {                                                                         \
        const int n0 = q * n / ranks, n1 = (q + 1) * n / ranks;                                               \
        const BatchNormShape s = {.n = n1 - n0, .spatial = S, .c = c, .dtype = DT_F32};                       \
        const long off = (long)n0 * S * c;                                                                    \
        __VA_ARGS__;                                                                                          \
    }
    BN_RANKS({
        bn->stats(&s, x + off, NULL, count, part);
        for (int j = 0; j < c; j++) sum[j] += part[j];
    });
    BN_RANKS({
        bn->stats(&s, x + off, sum, count, part);
        for (int j = 0; j < c; j++) sq[j] += part[j];
    });
    bn->finalize(c, count, BN_EPS, BN_MOM, 1, sum, sq, o->mean, o->invstd, rm, rv);
    BN_RANKS(bn->forward(&s, x + off, o->mean, o->invstd, gamma, beta, o->y + off));
    BN_RANKS({
        bn->backward_reduce(&s, dy + off, x + off, o->mean, o->invstd, NULL, NULL, a, b);
        for (int j = 0; j < c; j++) o->dbeta[j] += a[j], o->dgamma[j] += b[j];
    });
    BN_RANKS(bn->backward(&s, dy + off, x + off, o->mean, o->invstd, gamma, NULL, o->dbeta, o->dgamma, count,
                          o->dx + off, beta_dx));
#undef BN_RANKS
    free(sum), free(sq), free(part), free(a), free(b);
}

static BnOut bn_out_new(long cnt, int c) {
    return (BnOut){fnan(cnt), fnan(cnt), fnan(c), fnan(c), fnan(c), fnan(c)};
}
static void bn_out_free(BnOut *o) { free(o->y), free(o->dx), free(o->dgamma), free(o->dbeta), free(o->mean), free(o->invstd); }

/* The composition stats -> stats(center) -> finalize -> forward, and backward_reduce -> backward, against float64:
 * y and the running statistics against the definition, dx, dgamma, dbeta against finite differences of the whole
 * float64 training forward (statistics included); the same with the batch split over 2 and 4 ranks whose sums are
 * added (SyncBatchNorm's use), which must also match the one-rank results; beta_dx 1 adds. */
static void check_batchnorm(int n, long S, int c) {
    const long rows = (long)n * S, cnt = rows * c;
    float *x = frand(cnt, -1, 1);
    for (long i = 0; i < cnt; i++) x[i] = 0.5f + (float)(i % c) * 0.2f + x[i] * (1.0f + (float)(i % c) * 0.3f);
    float *gamma = frand(c, 0.5, 1.5), *beta = frand(c, -0.5, 0.5), *r = frand(cnt, -1, 1);
    float *rm0 = frand(c, -0.5, 0.5), *rv0 = frand(c, 0.5, 1.5);
    BnCtx ctx = {.rows = rows, .c = c, .x = to_d(x, cnt), .gamma = to_d(gamma, c), .beta = to_d(beta, c),
                 .r = to_d(r, cnt), .y = dnew(cnt)};
    double *rmean = dnew(c), *rvar = dnew(c);
    ref_bn(rows, c, ctx.x, ctx.gamma, ctx.beta, ctx.y, rmean, rvar);
    double *want_rm = dnew(c), *want_rv = dnew(c), *want_invstd = dnew(c);
    for (int j = 0; j < c; j++) {
        want_rm[j] = 0.9 * rm0[j] + 0.1 * rmean[j];
        want_rv[j] = 0.9 * rv0[j] + 0.1 * rvar[j] * (double)rows / (double)(rows - 1); /* unbiased */
        want_invstd[j] = 1.0 / sqrt(rvar[j] + BN_EPS);
    }
    BnOut one = bn_out_new(cnt, c);
    const int split[3] = {1, 2, 4};
    for (int t = 0; t < 3 && split[t] <= n; t++) {
        BnOut o = t == 0 ? one : bn_out_new(cnt, c); /* rank 1: into `one` itself */
        float *rm = fcopy(rm0, c), *rv = fcopy(rv0, c);
        bn_layer(n, S, c, split[t], x, gamma, beta, r, rm, rv, &o, 0.0f);
        const BnOut *g = &o;
        expect_close("batchnorm y", g->y, ctx.y, cnt, FWD_TOL);
        expect_close("batchnorm mean", g->mean, rmean, c, FWD_TOL);
        expect_close("batchnorm invstd", g->invstd, want_invstd, c, FWD_TOL);
        expect_close("batchnorm running_mean", rm, want_rm, c, FWD_TOL);
        expect_close("batchnorm running_var", rv, want_rv, c, FWD_TOL);
        expect_grad("batchnorm dx", bn_objective, &ctx, ctx.x, cnt, g->dx);
        expect_grad("batchnorm dgamma", bn_objective, &ctx, ctx.gamma, c, g->dgamma);
        expect_grad("batchnorm dbeta", bn_objective, &ctx, ctx.beta, c, g->dbeta);
        if (t > 0) { /* the ranks' sums give the one-rank layer to float rounding */
            double *d = to_d(one.dx, cnt), *yy = to_d(one.y, cnt);
            expect_close("batchnorm dx, ranks vs one", o.dx, d, cnt, 1e-6);
            expect_close("batchnorm y, ranks vs one", o.y, yy, cnt, 1e-6);
            free(d), free(yy);
        }
        free(rm), free(rv);
        if (t > 0) bn_out_free(&o);
    }
    /* beta_dx 1: dx adds to what is there */
    BnOut acc = bn_out_new(cnt, c);
    float *dx0 = frand(cnt, -1, 1), *rm = fcopy(rm0, c), *rv = fcopy(rv0, c);
    memcpy(acc.dx, dx0, sizeof(float) * (size_t)cnt);
    bn_layer(n, S, c, 1, x, gamma, beta, r, rm, rv, &acc, 1.0f);
    expect_accumulated("batchnorm dx beta 1", acc.dx, dx0, one.dx, cnt);
    bn_out_free(&acc), bn_out_free(&one);
    free(dx0), free(rm), free(rv), free(x), free(gamma), free(beta), free(r), free(rm0), free(rv0), free(rmean), free(rvar);
    free(want_rm), free(want_rv), free(want_invstd), free(ctx.x), free(ctx.gamma), free(ctx.beta), free(ctx.r), free(ctx.y);
}

static void test_batchnorm(void **state) {
    check_batchnorm(4, 2 * 3 * 4, 5);
    check_batchnorm(2, 5 * 6 * 7, 3); /* more rows than one partial-sum block */
    check_batchnorm(4, 1, 6);         /* one position per sample (the head's 1x1x1 features) */
}

/* Eval: finalize(train 0) takes the running statistics and leaves them alone; forward normalises with them. */
static void test_batchnorm_eval(void **state) {
    const BatchNormOps *bn = backend_cpu()->batchnorm;
    const int c = 7;
    const long S = 30, cnt = 2 * S * c;
    float *x = frand(cnt, -2, 2), *gamma = frand(c, 0.5, 1.5), *beta = frand(c, -0.5, 0.5);
    float *rm = frand(c, -0.5, 0.5), *rv = frand(c, 0.5, 1.5), *rm0 = fcopy(rm, c), *rv0 = fcopy(rv, c);
    float *mean = fnan(c), *invstd = fnan(c), *y = fnan(cnt);
    bn->finalize(c, 60.0, BN_EPS, BN_MOM, 0, NULL, NULL, mean, invstd, rm, rv);
    assert_memory_equal(rm, rm0, sizeof(float) * c);
    assert_memory_equal(rv, rv0, sizeof(float) * c);
    assert_memory_equal(mean, rm0, sizeof(float) * c);
    const BatchNormShape s = {.n = 2, .spatial = S, .c = c, .dtype = DT_F32};
    bn->forward(&s, x, mean, invstd, gamma, beta, y);
    double *want = dnew(cnt);
    for (long i = 0; i < cnt; i++) {
        const int j = (int)(i % c);
        want[i] = ((double)x[i] - rm0[j]) / sqrt((double)rv0[j] + BN_EPS) * gamma[j] + beta[j];
    }
    expect_close("batchnorm eval y", y, want, cnt, FWD_TOL);
    free(x), free(gamma), free(beta), free(rm), free(rv), free(rm0), free(rv0), free(mean), free(invstd), free(y), free(want);
}

/* The sums are bit-identical on 1 and 2 threads (fixed blocks added in order). */
static void test_batchnorm_threads(void **state) {
    const BatchNormOps *bn = backend_cpu()->batchnorm;
    const BatchNormShape s = {.n = 2, .spatial = 3001, .c = 12, .dtype = DT_F32};
    const long cnt = 2L * 3001 * 12;
    float *x = frand(cnt, -2, 3), *dy = frand(cnt, -1, 1), *mean = frand(12, 0, 1), *invstd = frand(12, 0.5, 2);
    float o[2][4][12];
    for (int th = 0; th < 2; th++) {
        set_threads(th + 1);
        bn->stats(&s, x, NULL, 6002.0, o[th][0]);
        bn->stats(&s, x, o[th][0], 6002.0, o[th][1]);
        bn->backward_reduce(&s, dy, x, mean, invstd, NULL, NULL, o[th][2], o[th][3]);
    }
    set_threads(2);
    assert_memory_equal(o[0], o[1], sizeof o[0]);
    free(x), free(dy), free(mean), free(invstd);
}

/* train.fuse's BatchNorm+ReLU (shape.relu): the bits of BatchNorm then ReLU, forward, both backward pieces and dx
 * with beta 0 and 1; the statistics from the batch, beta spread so that about half the outputs are clamped */
static void test_batchnorm_relu_fused(void **state) {
    const BatchNormOps *bn = backend_cpu()->batchnorm;
    const ReluOps *re = backend_cpu()->relu;
    BatchNormShape s = {.n = 2, .spatial = 1001, .c = 12, .dtype = DT_F32};
    const long cnt = 2L * 1001 * 12;
    const double count = 2002.0;
    float *x = frand(cnt, -2, 3), *dy = frand(cnt, -1, 1), *gamma = frand(12, 0.5, 1.5), *beta = frand(12, -1, 1);
    float sum[12], sq[12], mean[12], invstd[12], rm[12] = {0}, rv[12] = {0};
    bn->stats(&s, x, NULL, count, sum);
    bn->stats(&s, x, sum, count, sq);
    bn->finalize(12, count, 1e-5f, 0.1f, 1, sum, sq, mean, invstd, rm, rv);
    /* apart: y0 = bn(x), r = relu(y0); dz = relu'(r) dy; the BatchNorm's pieces on dz */
    float *y0 = fnan(cnt), *r = fnan(cnt), *dz = fnan(cnt), *dx0 = frand(cnt, -1, 1), *dx1 = fcopy(dx0, cnt);
    float s0[2][12], s1[2][12];
    bn->forward(&s, x, mean, invstd, gamma, beta, y0);
    re->forward(DT_F32, cnt, y0, r);
    re->backward(DT_F32, cnt, r, dy, dz, 0.0f);
    bn->backward_reduce(&s, dz, x, mean, invstd, NULL, NULL, s0[0], s0[1]);
    bn->backward(&s, dz, x, mean, invstd, gamma, NULL, s0[0], s0[1], count, dx0, 1.0f);
    /* fused */
    s.relu = 1;
    float *y1 = fnan(cnt);
    bn->forward(&s, x, mean, invstd, gamma, beta, y1);
    assert_memory_equal(y1, r, sizeof(float) * (size_t)cnt);
    long zeros = 0;
    for (long i = 0; i < cnt; i++) zeros += y1[i] == 0.0f;
    assert_true(zeros > cnt / 5 && zeros < cnt * 4 / 5); /* the mask matters: both sides of it are met */
    bn->backward_reduce(&s, dy, x, mean, invstd, gamma, beta, s1[0], s1[1]);
    assert_memory_equal(s1, s0, sizeof s0);
    bn->backward(&s, dy, x, mean, invstd, gamma, beta, s1[0], s1[1], count, dx1, 1.0f);
    assert_memory_equal(dx1, dx0, sizeof(float) * (size_t)cnt);
    s.relu = 0;
    bn->backward(&s, dz, x, mean, invstd, gamma, NULL, s0[0], s0[1], count, dx0, 0.0f);
    s.relu = 1;
    bn->backward(&s, dy, x, mean, invstd, gamma, beta, s1[0], s1[1], count, dx1, 0.0f);
    assert_memory_equal(dx1, dx0, sizeof(float) * (size_t)cnt);
    free(x), free(dy), free(gamma), free(beta), free(y0), free(r), free(dz), free(dx0), free(dx1), free(y1);
}

/* ---- relu, avgpool, dropout ------------------------------------------------------------------------------------ */

typedef struct {
    long n;
    double *x, *r;
    double (*f)(const void *ctx, const double *x, long i); /* the op's value at output i, from x */
    const void *f_ctx;
    long n_out;
} MapCtx;

static double map_objective(void *p) {
    MapCtx *m = p;
    double L = 0.0;
    for (long i = 0; i < m->n_out; i++) L += m->r[i] * m->f(m->f_ctx, m->x, i);
    return L;
}

static double relu_at(const void *ctx, const double *x, long i) { return x[i] > 0 ? x[i] : 0.0; }

static void test_relu(void **state) {
    const ReluOps *re = backend_cpu()->relu;
    const long n = 3001;
    float *x = frand(n, -1, 1), *r = frand(n, -1, 1), *y = fnan(n), *dx = fnan(n);
    x[5] = 0.0f; /* y = 0 there, and so is the gradient (as PyTorch) */
    re->forward(DT_F32, n, x, y);
    for (long i = 0; i < n; i++) assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    re->backward(DT_F32, n, y, r, dx, 0.0f);
    assert_true(dx[5] == 0.0f);
    x[5] = 0.25f; /* finite differences need a point away from the kink */
    MapCtx m = {.n = n, .x = to_d(x, n), .r = to_d(r, n), .f = relu_at, .n_out = n};
    re->forward(DT_F32, n, x, y);
    re->backward(DT_F32, n, y, r, dx, 0.0f);
    expect_grad("relu dx", map_objective, &m, m.x, n, dx);
    float *dx1 = frand(n, -1, 1), *dx0 = fcopy(dx1, n);
    re->backward(DT_F32, n, y, r, dx1, 1.0f);
    expect_accumulated("relu dx beta 1", dx1, dx0, dx, n);
    /* NaN passes through the forward */
    const float nan_in = NAN;
    float nan_out = 0.0f;
    re->forward(DT_F32, 1, &nan_in, &nan_out);
    assert_true(nan_out != nan_out);
    free(x), free(r), free(y), free(dx), free(dx1), free(dx0), free(m.x), free(m.r);
}

typedef struct {
    int n, c;
    long S;
} PoolDims;
static double avgpool_at(const void *ctx, const double *x, long i) {
    const PoolDims *d = ctx;
    const long b = i / d->c, j = i % d->c;
    double s = 0.0;
    for (long p = 0; p < d->S; p++) s += x[(b * d->S + p) * d->c + j];
    return s / (double)d->S;
}

static void test_avgpool(void **state) {
    const AvgPoolOps *ap = backend_cpu()->avgpool;
    const PoolDims d = {.n = 3, .c = 70, .S = 27}; /* more channels than one work item */
    const long nx = (long)d.n * d.S * d.c, ny = (long)d.n * d.c;
    float *x = frand(nx, -1, 1), *r = frand(ny, -1, 1), *y = fnan(ny), *dx = fnan(nx);
    ap->forward(DT_F32, d.n, d.S, d.c, x, y);
    MapCtx m = {.x = to_d(x, nx), .r = to_d(r, ny), .f = avgpool_at, .f_ctx = &d, .n_out = ny};
    double *ry = dnew(ny);
    for (long i = 0; i < ny; i++) ry[i] = avgpool_at(&d, m.x, i);
    expect_close("avgpool forward", y, ry, ny, FWD_TOL);
    ap->backward(DT_F32, d.n, d.S, d.c, r, dx, 0.0f);
    expect_grad("avgpool dx", map_objective, &m, m.x, nx, dx);
    float *dx1 = frand(nx, -1, 1), *dx0 = fcopy(dx1, nx);
    ap->backward(DT_F32, d.n, d.S, d.c, r, dx1, 1.0f);
    expect_accumulated("avgpool dx beta 1", dx1, dx0, dx, nx);
    /* bit-identical on 1 and 2 threads */
    const PoolDims big = {.n = 4, .c = 300, .S = 512};
    const long nb = (long)big.n * big.S * big.c;
    float *xb = frand(nb, -1, 1), *yb[2] = {fnew(big.n * big.c), fnew(big.n * big.c)};
    for (int th = 0; th < 2; th++) {
        set_threads(th + 1);
        ap->forward(DT_F32, big.n, big.S, big.c, xb, yb[th]);
    }
    set_threads(2);
    assert_memory_equal(yb[0], yb[1], sizeof(float) * (size_t)(big.n * big.c));
    free(x), free(r), free(y), free(dx), free(dx1), free(dx0), free(m.x), free(m.r), free(ry), free(xb), free(yb[0]);
    free(yb[1]);
}

typedef struct {
    DropoutShape s;
    uint64_t first;
} DropCtx;
static double dropout_at(const void *ctx, const double *x, long i) {
    const DropCtx *d = ctx;
    const uint64_t k = (d->first + (uint64_t)(i / d->s.per_sample)) * (uint64_t)d->s.per_sample +
                       (uint64_t)(i % d->s.per_sample);
    return vx_uniform01(vx_hash3(d->s.seed, d->s.stream, k)) >= d->s.p ? x[i] / (1.0 - d->s.p) : 0.0;
}

/* dropout.h's key: value j of global sample s kept when vx_uniform01(vx_hash3(seed, stream, s*per_sample + j)) >= p;
 * the same sample gets the same mask in any batch; p 0 is the identity, p 1 drops everything; backward against
 * finite differences; about p of the values dropped. */
static void test_dropout(void **state) {
    const DropoutOps *dr = backend_cpu()->dropout;
    const DropCtx d = {.s = {.n = 4, .per_sample = 777, .p = 0.3f, .seed = 99, .stream = 4, .dtype = DT_F32},
                       .first = 1000};
    const long n = d.s.n * d.s.per_sample;
    float *x = frand(n, -1, 1), *r = frand(n, -1, 1), *y = fnan(n), *dx = fnan(n);
    dr->forward(&d.s, &d.first, x, y);
    MapCtx m = {.x = to_d(x, n), .r = to_d(r, n), .f = dropout_at, .f_ctx = &d, .n_out = n};
    double *ry = dnew(n);
    long dropped = 0;
    for (long i = 0; i < n; i++) ry[i] = dropout_at(&d, m.x, i), dropped += y[i] == 0.0f;
    expect_close("dropout forward", y, ry, n, 1e-7);
    assert_true(fabs((double)dropped / n - 0.3) < 0.03);
    dr->backward(&d.s, &d.first, r, dx, 0.0f);
    expect_grad("dropout dx", map_objective, &m, m.x, n, dx);
    float *dx1 = frand(n, -1, 1), *dx0 = fcopy(dx1, n);
    dr->backward(&d.s, &d.first, r, dx1, 1.0f);
    expect_accumulated("dropout dx beta 1", dx1, dx0, dx, n);
    /* samples 1002 and 1003 of this batch, as a batch of their own: the same values, bit for bit */
    DropoutShape tail = d.s;
    tail.n = 2;
    const uint64_t first2 = d.first + 2;
    float *y2 = fnan(2 * d.s.per_sample);
    dr->forward(&tail, &first2, x + 2 * d.s.per_sample, y2);
    assert_memory_equal(y2, y + 2 * d.s.per_sample, sizeof(float) * (size_t)(2 * d.s.per_sample));
    /* p 0: y = x; p 1: y = 0 */
    DropoutShape id = d.s, all = d.s;
    id.p = 0.0f, all.p = 1.0f;
    dr->forward(&id, &d.first, x, y);
    assert_memory_equal(y, x, sizeof(float) * (size_t)n);
    dr->forward(&all, &d.first, x, y);
    for (long i = 0; i < n; i++) assert_true(y[i] == 0.0f);
    free(x), free(r), free(y), free(dx), free(dx1), free(dx0), free(m.x), free(m.r), free(ry), free(y2);
}

/* ---- maxpool ----------------------------------------------------------------------------------------------- */

typedef struct {
    MaxPoolShape s;
} MpCtx;
static double maxpool_at(const void *ctx, const double *x, long t) {
    const MaxPoolShape *s = &((const MpCtx *)ctx)->s;
    const int j = (int)(t % s->c);
    long q = t / s->c;
    const int ox = (int)(q % s->ow), oy = (int)(q / s->ow % s->oh), oz = (int)(q / ((long)s->ow * s->oh) % s->od);
    const long b = q / ((long)s->ow * s->oh * s->od);
    double best = -INFINITY;
    for (int kd = 0; kd < s->k; kd++)
        for (int kh = 0; kh < s->k; kh++)
            for (int kw = 0; kw < s->k; kw++) {
                const int z = oz * s->stride - s->pad + kd, y = oy * s->stride - s->pad + kh,
                          xx = ox * s->stride - s->pad + kw;
                if (z < 0 || z >= s->d || y < 0 || y >= s->h || xx < 0 || xx >= s->w) continue;
                const double v = x[(((b * s->d + z) * s->h + y) * s->w + xx) * s->c + j];
                best = v > best ? v : best;
            }
    return best;
}

/* forward against the float64 max; backward (through the saved args) against finite differences, on distinct
 * values (a permutation of a 1e-3 grid: no ties, so the max is differentiable); beta 1 adds */
static void check_maxpool(int n, int d, int h, int w, int c, int k, int stride, int pad) {
    const MaxPoolOps *mp = backend_cpu()->maxpool;
    const MpCtx mc = {maxpool_shape(n, d, h, w, c, k, stride, pad)};
    const MaxPoolShape *s = &mc.s;
    const long nx = (long)n * d * h * w * c, ny = (long)n * s->od * s->oh * s->ow * c;
    float *x = fnew(nx), *r = frand(ny, -1, 1), *y = fnan(ny), *dx = fnan(nx);
    int32_t *arg = malloc(sizeof(int32_t) * (size_t)ny);
    for (long i = 0; i < nx; i++) x[i] = (float)i;
    for (long i = nx - 1; i > 0; i--) { /* shuffle */
        const long j = (long)(urand() * (i + 1));
        const float t = x[i];
        x[i] = x[j], x[j] = t;
    }
    for (long i = 0; i < nx; i++) x[i] = (x[i] - (float)nx / 2) * 1e-3f;
    mp->forward(s, x, y, arg);
    MapCtx m = {.x = to_d(x, nx), .r = to_d(r, ny), .f = maxpool_at, .f_ctx = &mc, .n_out = ny};
    double *ry = dnew(ny);
    for (long i = 0; i < ny; i++) ry[i] = maxpool_at(&mc, m.x, i);
    expect_close("maxpool forward", y, ry, ny, 0);
    mp->backward(s, r, arg, dx, 0.0f);
    expect_grad("maxpool dx", map_objective, &m, m.x, nx, dx);
    float *dx1 = frand(nx, -1, 1), *dx0 = fcopy(dx1, nx);
    mp->backward(s, r, arg, dx1, 1.0f);
    expect_accumulated("maxpool dx beta 1", dx1, dx0, dx, nx);
    free(x), free(r), free(y), free(dx), free(arg), free(dx1), free(dx0), free(m.x), free(m.r), free(ry);
}

static void test_maxpool(void **state) {
    check_maxpool(2, 7, 8, 9, 3, 3, 2, 1); /* MONAI's: k3 s2 p1 */
    check_maxpool(1, 5, 5, 5, 2, 3, 1, 1); /* overlapping windows */
    check_maxpool(2, 4, 6, 5, 3, 2, 2, 0);
    check_maxpool(1, 1, 7, 6, 4, 3, 2, 1); /* depth 1 */
    check_maxpool(1, 3, 4, 5, 2, 4, 3, 2); /* even window, pad k/2 */
}

/* The tie rule (maxpool.h): the first maximum in window order wins; padding never wins, even over -infinity or
 * values below any padding value one might pick; a NaN wins (the first one); the gradient goes to the winner only. */
static void test_maxpool_ties(void **state) {
    const MaxPoolOps *mp = backend_cpu()->maxpool;
    /* one channel, 3x3x3 input, k3 s2 p1: output 2x2x2; output (0,0,0)'s window covers input [0,1]^3 at taps
     * (1..2)^3, so its first real tap is (1,1,1) = 13 */
    const MaxPoolShape s = maxpool_shape(1, 3, 3, 3, 1, 3, 2, 1);
    float x[27], y[8], dy[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dx[27];
    int32_t arg[8];
    for (int i = 0; i < 27; i++) x[i] = 1.0f; /* all tied: every window's first real position */
    mp->forward(&s, x, y, arg);
    assert_int_equal(arg[0], 13);                 /* (kd,kh,kw) = (1,1,1): input (0,0,0) */
    assert_int_equal(arg[7], 0);                  /* output (1,1,1) starts at input (1,1,1): tap (0,0,0) */
    for (int i = 0; i < 27; i++) x[i] = -INFINITY; /* padding (-inf) must still not win */
    mp->forward(&s, x, y, arg);
    assert_int_equal(arg[0], 13);
    assert_true(isinf(y[0]) && y[0] < 0);
    for (int i = 0; i < 27; i++) x[i] = -5.0f;
    x[4] = -1.0f, x[13] = -1.0f; /* input (0,1,1) and (1,1,1), both in output (0,0,0)'s window: the first wins */
    mp->forward(&s, x, y, arg);
    assert_true(y[0] == -1.0f);
    assert_int_equal(arg[0], (1 * 3 + 2) * 3 + 2); /* input (0,1,1) is tap (1,2,2) */
    mp->backward(&s, dy, arg, dx, 0.0f);
    /* every input holds the dy of the outputs whose winner it is, added in output order */
    float want[27] = {0};
    for (int o = 0; o < 8; o++) {
        const int oz = o / 4, oy = o / 2 % 2, ox = o % 2, a = arg[o];
        want[((oz * 2 - 1 + a / 9) * 3 + oy * 2 - 1 + a / 3 % 3) * 3 + ox * 2 - 1 + a % 3] += dy[o];
    }
    assert_memory_equal(dx, want, sizeof want);
    assert_true(dx[4] >= 1.0f && dx[0] == 0.0f);
    x[14] = NAN; /* input (1,1,2), in output (0,0,1)'s window: the NaN shows there */
    mp->forward(&s, x, y, arg);
    assert_true(y[1] != y[1]);
}

/* ---- linear ------------------------------------------------------------------------------------------------ */

typedef struct {
    LinearShape s;
    double *x, *w, *b, *r;
} LinCtx;
static double lin_objective(void *p) {
    const LinCtx *l = p;
    double L = 0.0;
    for (int r = 0; r < l->s.n; r++)
        for (int o = 0; o < l->s.out; o++) {
            double y = l->b[o];
            for (int i = 0; i < l->s.in; i++) y += l->x[(long)r * l->s.in + i] * l->w[(long)o * l->s.in + i];
            L += l->r[(long)r * l->s.out + o] * y;
        }
    return L;
}

static void check_linear(int n, int in, int out) {
    const LinearOps *li = backend_cpu()->linear;
    const LinearShape s = {.n = n, .in = in, .out = out, .dtype = DT_F32};
    const long nx = (long)n * in, nw = (long)out * in, ny = (long)n * out;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *b = frand(out, -1, 1), *r = frand(ny, -1, 1);
    LinCtx l = {.s = s, .x = to_d(x, nx), .w = to_d(w, nw), .b = to_d(b, out), .r = to_d(r, ny)};
    float *y = fnan(ny), *dx = fnan(nx), *dw = fnan(nw), *db = fnan(out);
    li->forward(&s, x, w, b, y);
    double *ry = dnew(ny);
    for (long t = 0; t < ny; t++) {
        ry[t] = l.b[t % out];
        for (int i = 0; i < in; i++) ry[t] += l.x[t / out * in + i] * l.w[t % out * in + i];
    }
    expect_close("linear forward", y, ry, ny, FWD_TOL);
    li->backward_data(&s, r, w, dx, 0.0f);
    li->backward_filter(&s, x, r, dw, db, 0.0f);
    expect_grad("linear dx", lin_objective, &l, l.x, nx, dx);
    expect_grad("linear dw", lin_objective, &l, l.w, nw, dw);
    expect_grad("linear db", lin_objective, &l, l.b, out, db);
    /* no bias: y without b; db NULL: dw alone, the same bits */
    float *y0 = fnan(ny), *dw2 = fnan(nw);
    li->forward(&s, x, w, NULL, y0);
    for (long t = 0; t < ny; t++) ry[t] -= l.b[t % out];
    expect_close("linear forward without bias", y0, ry, ny, FWD_TOL);
    li->backward_filter(&s, x, r, dw2, NULL, 0.0f);
    assert_memory_equal(dw2, dw, sizeof(float) * (size_t)nw);
    /* beta 1 */
    float *dx1 = frand(nx, -1, 1), *dw1 = frand(nw, -1, 1), *db1 = frand(out, -1, 1);
    float *dx0 = fcopy(dx1, nx), *dw0 = fcopy(dw1, nw), *db0 = fcopy(db1, out);
    li->backward_data(&s, r, w, dx1, 1.0f);
    li->backward_filter(&s, x, r, dw1, db1, 1.0f);
    expect_accumulated("linear dx beta 1", dx1, dx0, dx, nx);
    expect_accumulated("linear dw beta 1", dw1, dw0, dw, nw);
    expect_accumulated("linear db beta 1", db1, db0, db, out);
    free(x), free(w), free(b), free(r), free(y), free(dx), free(dw), free(db), free(ry), free(y0), free(dw2);
    free(dx1), free(dw1), free(db1), free(dx0), free(dw0), free(db0), free(l.x), free(l.w), free(l.b), free(l.r);
}

static void test_linear(void **state) {
    check_linear(5, 7, 3);
    check_linear(37, 20, 1); /* a risk score; more samples than one chunk */
    check_linear(2, 64, 10);
}

/* bit-identical on 1 and 2 threads */
static void test_linear_threads(void **state) {
    const LinearOps *li = backend_cpu()->linear;
    const LinearShape s = {.n = 100, .in = 300, .out = 17, .dtype = DT_F32};
    float *x = frand(30000, -1, 1), *w = frand(5100, -1, 1), *b = frand(17, -1, 1), *dy = frand(1700, -1, 1);
    float *o[2][4];
    for (int th = 0; th < 2; th++) {
        set_threads(th + 1);
        o[th][0] = fnew(1700), o[th][1] = fnew(30000), o[th][2] = fnew(5100), o[th][3] = fnew(17);
        li->forward(&s, x, w, b, o[th][0]);
        li->backward_data(&s, dy, w, o[th][1], 0.0f);
        li->backward_filter(&s, x, dy, o[th][2], o[th][3], 0.0f);
    }
    set_threads(2);
    const long sizes[4] = {1700, 30000, 5100, 17};
    for (int j = 0; j < 4; j++) assert_memory_equal(o[0][j], o[1][j], sizeof(float) * (size_t)sizes[j]);
    for (int th = 0; th < 2; th++)
        for (int j = 0; j < 4; j++) free(o[th][j]);
    free(x), free(w), free(b), free(dy);
}

/* ---- head losses --------------------------------------------------------------------------------------------- */

typedef struct {
    HeadLossKind kind;
    int n, k;
    double *z;
    const float *target, *weight;
} HeadCtx;

/* float64 losses from head_loss.h's definitions (no shifts or stable forms but where double needs them) */
static double head_objective(void *p) {
    const HeadCtx *h = p;
    double L = 0.0, W = 0.0, E = 0.0;
    if (h->kind == HEAD_LOSS_CE) {
        for (int i = 0; i < h->n; i++) {
            const int t = (int)h->target[i];
            const double w = h->weight ? h->weight[t] : 1.0;
            double se = 0.0;
            for (int j = 0; j < h->k; j++) se += exp(h->z[(long)i * h->k + j]);
            L += w * (log(se) - h->z[(long)i * h->k + t]);
            W += w;
        }
        return L / W;
    }
    if (h->kind == HEAD_LOSS_BCE) {
        for (long e = 0; e < (long)h->n * h->k; e++) {
            const double z = h->z[e], t = h->target[e], pw = h->weight ? h->weight[e % h->k] : 1.0;
            const double sg = 1.0 / (1.0 + exp(-z));
            L += -(pw * t * log(sg) + (1 - t) * log(1 - sg));
        }
        return L / ((double)h->n * h->k);
    }
    for (int i = 0; i < h->n; i++) {
        if (h->target[2 * i + 1] == 0.0f) continue;
        E += 1;
        double S = 0.0; /* relative to exp(z_i): z_i - log sum exp(z_j) = -log S */
        for (int j = 0; j < h->n; j++)
            if (h->target[2 * j] >= h->target[2 * i]) S += exp(h->z[j] - h->z[i]);
        L += log(S);
    }
    return E > 0 ? L / E : 0.0;
}

/* loss against the float64 definition, dz (scaled by grad_scale and the loss scale, read from host memory) against
 * finite differences; without dz the same loss */
static void check_head(HeadLossKind kind, int n, int k, const float *z, const float *target, const float *weight) {
    const HeadLossOps *hl = backend_cpu()->head_loss;
    const HeadLossShape s = {.kind = kind, .n = n, .k = k, .dtype = DT_F32};
    const long nz = (long)n * k;
    const float scale = 4.0f, gs = 0.5f;
    float loss = NAN, loss2 = NAN, *dz = fnan(nz);
    hl->run(&s, z, target, weight, &loss, dz, gs, &scale);
    HeadCtx h = {.kind = kind, .n = n, .k = k, .z = to_d(z, nz), .target = target, .weight = weight};
    const double ref = head_objective(&h);
    expect_close("head loss value", &loss, &ref, 1, FWD_TOL);
    for (long i = 0; i < nz; i++) dz[i] /= gs * scale; /* exact: powers of two */
    expect_grad("head loss dz", head_objective, &h, h.z, nz, dz);
    hl->run(&s, z, target, weight, &loss2, NULL, gs, NULL);
    assert_true(loss2 == loss);
    free(dz), free(h.z);
}

static void test_head_loss_ce(void **state) {
    const int n = 9, k = 5;
    float *z = frand(n * k, -3, 3), *w = frand(k, 0.5, 2), t[9];
    for (int i = 0; i < n; i++) t[i] = (float)(i * 7 % k);
    check_head(HEAD_LOSS_CE, n, k, z, t, NULL);
    check_head(HEAD_LOSS_CE, n, k, z, t, w); /* class weights: sum w_t nll / sum w_t */
    /* large logits stay finite (log-sum-exp from the row's max) */
    for (int i = 0; i < n * k; i++) z[i] *= 300.0f;
    const HeadLossShape s = {.kind = HEAD_LOSS_CE, .n = n, .k = k, .dtype = DT_F32};
    float loss, dz[45];
    backend_cpu()->head_loss->run(&s, z, t, w, &loss, dz, 1.0f, NULL);
    assert_true(isfinite(loss));
    for (int i = 0; i < n * k; i++) assert_true(isfinite(dz[i]));
    /* a target that is not a class index makes the loss NaN (the run then stops as diverged) */
    t[3] = 2.5f;
    backend_cpu()->head_loss->run(&s, z, t, w, &loss, dz, 1.0f, NULL);
    assert_true(loss != loss);
    free(z), free(w);
}

static void test_head_loss_bce(void **state) {
    const int n = 6, k = 4;
    float *z = frand(n * k, -4, 4), *pw = frand(k, 0.5, 3), t[24];
    for (int i = 0; i < n * k; i++) t[i] = i % 5 == 2 ? 0.3f : (float)(i * 3 % 2);
    check_head(HEAD_LOSS_BCE, n, k, z, t, NULL);
    check_head(HEAD_LOSS_BCE, n, k, z, t, pw);
    /* large |z|: finite, and the value and gradient the limits give (softplus(x) -> max(x, 0)) */
    const float big[4] = {-100.0f, 100.0f, -1000.0f, 1000.0f}, tb[4] = {1, 0, 0, 1}, one = 1.0f;
    const HeadLossShape s = {.kind = HEAD_LOSS_BCE, .n = 4, .k = 1, .dtype = DT_F32};
    float loss, dz[4];
    backend_cpu()->head_loss->run(&s, big, tb, &one, &loss, dz, 4.0f, NULL); /* grad_scale 4 undoes the mean */
    assert_true(fabs(loss - 200.0 / 4) < 1e-4); /* -100 with t 1 and 100 with t 0 cost 100 each; the others 0 */
    assert_true(dz[0] == -1.0f && dz[1] == 1.0f && dz[2] == 0.0f && dz[3] == 0.0f);
    free(z), free(pw);
}

/* Cox with Breslow ties and censoring against the float64 definition; every sample censored: loss 0, dz 0 */
static void test_head_loss_cox(void **state) {
    const int n = 12;
    float *z = frand(n, -2, 2), t[24];
    for (int i = 0; i < n; i++) {
        t[2 * i] = (float)(1 + i * 5 % 4);        /* times 1..4: ties */
        t[2 * i + 1] = i % 3 == 1 ? 0.0f : 1.0f;  /* a third censored */
    }
    check_head(HEAD_LOSS_COX, n, 1, z, t, NULL);
    z[4] = 40.0f; /* exp(40) is beyond float: the shift by the max keeps it finite */
    check_head(HEAD_LOSS_COX, n, 1, z, t, NULL);
    check_head(HEAD_LOSS_COX, 1, 1, z, t, NULL); /* a single event: its own risk set, loss 0 */
    for (int i = 0; i < n; i++) t[2 * i + 1] = 0.0f;
    const HeadLossShape s = {.kind = HEAD_LOSS_COX, .n = n, .k = 1, .dtype = DT_F32};
    float loss = NAN, *dz = fnan(n);
    backend_cpu()->head_loss->run(&s, z, t, NULL, &loss, dz, 1.0f, NULL);
    assert_true(loss == 0.0f);
    for (int i = 0; i < n; i++) assert_true(dz[i] == 0.0f);
    free(z), free(dz);
}

/* ---- backend table ---------------------------------------------------------------------------------------- */

static void test_backend_table(void **state) {
    const Backend *be = backend_cpu();
    assert_non_null(be);
    assert_string_equal(be->name, "cpu");
    assert_true(be->alloc && be->release && be->copy_to_device && be->copy_to_host && be->zero && be->synchronize);
    /* the cross-stream events are tokens on the CPU: program order is the only order there */
    void *ev = be->event_create();
    assert_non_null(ev);
    be->event_record(ev);
    be->event_wait(ev);
    be->event_destroy(ev);
    /* the float32 reference: every op in float32, none in 16 bits but the two casts; no graphs */
    int n_ops;
    const KernelOp *ops = kernel_ops(&n_ops);
    for (int op = 0; op < n_ops; op++) {
        assert_true(kernel_op_table(be, op) != NULL);
        assert_true(kernel_op_supported(be, op, DT_F32));
        const int cast = kernel_op_table(be, op) == backend_op(be, OPID_elementwise) &&
                         (ops[op].fn == EW_CAST || ops[op].fn == EW_PAD_CHANNELS);
        for (int dt = DT_BF16; dt <= DT_F16; dt++) assert_int_equal(kernel_op_supported(be, op, (DType)dt), cast);
    }
    for (int id = 0; id < OPID_COUNT; id++) assert_non_null(backend_op(be, (OpId)id)); /* every registered op */
    assert_true(be->conv3d->workspace_bytes != NULL && be->elementwise->scale == scale_cpu &&
                be->elementwise->cast == cast_cpu && be->optim->sumsq == sumsq_cpu);
    assert_null(be->graph_capture_begin);
    float *buf = be->alloc(1000 * sizeof(float));
    assert_true(((uintptr_t)buf & 63) == 0);
    be->zero(buf, 1000 * sizeof(float));
    for (int i = 0; i < 1000; i++) assert_true(buf[i] == 0.0f);
    float src[4] = {1, 2, 3, 4}, back[4];
    be->copy_to_device(buf, src, sizeof src);
    be->copy_to_host(back, buf, sizeof back);
    assert_memory_equal(src, back, sizeof src);
    be->synchronize();
    be->release(buf);
    backend_cpu_set_threads(1);
    assert_int_equal(omp_get_max_threads(), 1);
    backend_cpu_set_threads(0);
    assert_int_equal(omp_get_max_threads(), omp_get_num_procs());
}

/* The entries every backend has beside the ops: pinned-or-aligned host buffers, uploads, timers, accounting. */
static void test_backend_extras(void **state) {
    const Backend *be = backend_cpu();
    const size_t before = be->bytes_in_use();
    float *a = be->alloc(1000 * sizeof(float)), *b = be->alloc(3);
    assert_true(((uintptr_t)a & 63) == 0 && ((uintptr_t)b & 63) == 0);
    assert_int_equal(be->bytes_in_use(), before + 1000 * sizeof(float) + 3);
    assert_true(be->peak_bytes() >= before + 1000 * sizeof(float) + 3);
    be->release(b);
    assert_int_equal(be->bytes_in_use(), before + 1000 * sizeof(float));
    float *h = be->alloc_host(1000 * sizeof(float));
    assert_true(((uintptr_t)h & 63) == 0);
    assert_int_equal(be->bytes_in_use(), before + 1000 * sizeof(float)); /* host buffers are not counted */
    for (int i = 0; i < 1000; i++) h[i] = (float)i;
    be->upload_async(a, h, 1000 * sizeof(float), NULL);
    be->upload_wait();
    assert_memory_equal(a, h, 1000 * sizeof(float));
    be->release_host(h);
    be->release(a);
    be->release(NULL);
    assert_int_equal(be->bytes_in_use(), before);
    be->timer_mark(0);
    double s = 0.0;
    for (int i = 0; i < 1000000; i++) s += sqrt((double)i);
    be->timer_mark(7);
    const double ms = be->timer_elapsed_ms(0, 7);
    assert_true(s > 0.0 && ms >= 0.0 && ms < 60000.0);
    char reason[128];
#ifndef VX_CUDA
    assert_int_equal(backend_cuda_init(0, reason, sizeof reason), 0); /* the CPU-only build's stub */
    assert_non_null(strstr(reason, "no CUDA"));
    assert_null(backend_cuda());
#else
    (void)reason;
#endif
}

/* float16's loss gradient and the loss-scale floor (optim_loss_scale_floor), on the CPU's float16 conversion (the
 * rounding the GPU's stores do, dtype.h): each element of the L1 gradient is grad_scale x scale / count. At 256^3 x 4
 * voxels (count 2^26) with the scale backed off to 1 it rounds to exactly 0, the step still finite: the silent
 * failure the floor prevents. At the floor it is a non-zero float16 (the smallest subnormal at least), a factor two
 * below it zero again; bf16 and float32 keep float32's range and only the old 2^-24 bound. */
static void test_loss_scale_floor_keeps_the_fp16_loss_gradient(void **state) {
    (void)state;
    const struct {
        double count, grad_scale, floor;
    } cases[] = {{0x1p26, 1.0, 4.0},          /* 256^3 x 4, one rank, one micro-batch */
                 {0x1p26, 0.25, 16.0},        /* the same with 4 micro-batches (or ranks) */
                 {0x1p16, 0x1p-8, 1.0},       /* the emulation's case (tests/tools/cuda_emu) */
                 {3.0 * 0x1p20, 1.0, 0.25},   /* not a power of two: the next power of two above 0.1875 */
                 {32768.0 * 2, 1.0, 0x1p-8}}; /* the default config: 32^3 x 2 */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const double c = cases[i].count, gs = cases[i].grad_scale, f = optim_loss_scale_floor(DT_F16, c, gs);
        assert_float_equal(f, cases[i].floor, 0);
        uint16_t h[2];
        dtype_store(DT_F16, h, 0, (float)(gs * f / c));
        dtype_store(DT_F16, h, 1, (float)(gs * (f / 2) / c));
        assert_true(dtype_load(DT_F16, h, 0) > 0.0f); /* at the floor: still a gradient */
        if (f == 0x1p-24 * c / gs) assert_true(dtype_load(DT_F16, h, 1) == 0.0f); /* below it: none (powers of two) */
    }
    uint16_t h;
    dtype_store(DT_F16, &h, 0, (float)(1.0 / 0x1p26)); /* the case: scale 1 at 256^3 x 4 */
    assert_true(dtype_load(DT_F16, &h, 0) == 0.0f);
    assert_float_equal(optim_loss_scale_floor(DT_BF16, 0x1p26, 1.0), 0x1p-24, 0);
    assert_float_equal(optim_loss_scale_floor(DT_F32, 0x1p26, 1.0), 0x1p-24, 0);
}

int main(void) {
    set_threads(2 < omp_get_num_procs() ? 2 : omp_get_num_procs());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_shape),        cmocka_unit_test(test_conv_k3s1),
        cmocka_unit_test(test_conv_k3s1_c12),     cmocka_unit_test(test_conv_k3s2_odd),
        cmocka_unit_test(test_conv_k3s2_even),    cmocka_unit_test(test_conv_k1),
        cmocka_unit_test(test_conv_k2s2),         cmocka_unit_test(test_conv_k1s2),
        cmocka_unit_test(test_conv_k3p0),         cmocka_unit_test(test_conv_k3s3),
        cmocka_unit_test(test_conv_c1),           cmocka_unit_test(test_conv_anisotropic),
        cmocka_unit_test(test_conv_chunked_s1),   cmocka_unit_test(test_conv_chunked_s2),
        cmocka_unit_test(test_conv_chunked_wide), cmocka_unit_test(test_conv_chunked_groups),
        cmocka_unit_test(test_conv_threads),
        cmocka_unit_test(test_groupnorm_g1),      cmocka_unit_test(test_groupnorm_gc),
        cmocka_unit_test(test_groupnorm_g3),      cmocka_unit_test(test_groupnorm_c5),
        cmocka_unit_test(test_groupnorm_blocks),  cmocka_unit_test(test_groupnorm_threads),
        cmocka_unit_test(test_silu),              cmocka_unit_test(test_gelu_erf_far_tail),
        cmocka_unit_test(test_upsample),
        cmocka_unit_test(test_elementwise),       cmocka_unit_test(test_loss_l1),
        cmocka_unit_test(test_loss_mse),          cmocka_unit_test(test_loss_small),
        cmocka_unit_test(test_latent),            cmocka_unit_test(test_latent_no_eps),
        cmocka_unit_test(test_latent_hand),       cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sumsq),             cmocka_unit_test(test_normal_fill),
        cmocka_unit_test(test_gemm_keeps_the_openmp_team),
        cmocka_unit_test(test_bias_grad_threads),
        cmocka_unit_test(test_latent_kl_gradient_near_zero_logvar),
        cmocka_unit_test(test_relu),              cmocka_unit_test(test_avgpool),
        cmocka_unit_test(test_dropout),           cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_maxpool_ties),      cmocka_unit_test(test_linear),
        cmocka_unit_test(test_linear_threads),    cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_batchnorm_eval),    cmocka_unit_test(test_batchnorm_threads),
        cmocka_unit_test(test_batchnorm_relu_fused),
        cmocka_unit_test(test_head_loss_ce),      cmocka_unit_test(test_head_loss_bce),
        cmocka_unit_test(test_head_loss_cox),
        cmocka_unit_test(test_backend_table),     cmocka_unit_test(test_backend_extras),
        cmocka_unit_test(test_loss_scale_floor_keeps_the_fp16_loss_gradient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

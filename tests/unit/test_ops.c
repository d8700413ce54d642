/* test_ops.c: cmocka tests of the float32 CPU backend's ops (the kernels/..._cpu.c files).
 * Every op is checked against a naive float64 reference written here with plain loops, independent of the
 * optimized code: (a) the float32 forward against the float64 forward, and (b) every float32 gradient against
 * central finite differences of the float64 forward of a random scalar objective L = sum(r * y). On top of that:
 * beta 1 accumulation, beta 0 overwriting NaN, the multi-chunk convolution paths, bit-identical reductions for 1
 * and 2 threads, AdamW against a double transcription of torch's formula, and the counter-based RNG's statistics
 * and offset property. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/spec_table.h"
#include "conv3d/conv3d.h"
#include "elementwise/elementwise.h"
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
    const int k = s->k;
    for (int n = 0; n < s->n; n++)
        for (int oz = 0; oz < s->od; oz++)
            for (int oy = 0; oy < s->oh; oy++)
                for (int ox = 0; ox < s->ow; ox++)
                    for (int co = 0; co < s->c_out; co++) {
                        double acc = b[co];
                        for (int kd = 0; kd < k; kd++)
                            for (int kh = 0; kh < k; kh++)
                                for (int kw = 0; kw < k; kw++) {
                                    const int iz = oz * s->stride - s->pad + kd;
                                    const int iy = oy * s->stride - s->pad + kh;
                                    const int ix = ox * s->stride - s->pad + kw;
                                    if (iz < 0 || iz >= s->d || iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                                    for (int ci = 0; ci < s->c_in; ci++)
                                        acc += w[((((long)co * k + kd) * k + kh) * k + kw) * s->c_in + ci] *
                                               x[((((long)n * s->d + iz) * s->h + iy) * s->w + ix) * s->c_in + ci];
                                }
                        y[((((long)n * s->od + oz) * s->oh + oy) * s->ow + ox) * s->c_out + co] = acc;
                    }
}

/* direct scatter-form gradients of sum(dy * y): used for the shapes too large for finite differences */
static void ref_conv_backward(const Conv3dShape *s, const double *x, const double *w, const double *dy, double *dx,
                              double *dw, double *db) {
    const int k = s->k;
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
                        for (int kd = 0; kd < k; kd++)
                            for (int kh = 0; kh < k; kh++)
                                for (int kw = 0; kw < k; kw++) {
                                    const int iz = oz * s->stride - s->pad + kd;
                                    const int iy = oy * s->stride - s->pad + kh;
                                    const int ix = ox * s->stride - s->pad + kw;
                                    if (iz < 0 || iz >= s->d || iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
                                    const long wo = ((((long)co * k + kd) * k + kh) * k + kw) * s->c_in;
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
static void check_conv(ConvCase cc, int use_fd) {
    const Conv3dShape s = conv3d_shape(cc.n, cc.d, cc.h, cc.w, cc.ci, cc.co, cc.k, cc.stride, cc.pad);
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

static void test_conv_shape(void **state) {
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
    for (int t = 0; t < 3; t++) {
        const ConvCase cc = cases[t];
        const Conv3dShape s = conv3d_shape(cc.n, cc.d, cc.h, cc.w, cc.ci, cc.co, cc.k, cc.stride, cc.pad);
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
    assert_true(be->conv3d->workspace_bytes == conv3d_workspace_bytes_cpu && be->elementwise->scale == scale_cpu &&
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
        cmocka_unit_test(test_conv_c1),
        cmocka_unit_test(test_conv_chunked_s1),   cmocka_unit_test(test_conv_chunked_s2),
        cmocka_unit_test(test_conv_chunked_wide), cmocka_unit_test(test_conv_chunked_groups),
        cmocka_unit_test(test_conv_threads),
        cmocka_unit_test(test_groupnorm_g1),      cmocka_unit_test(test_groupnorm_gc),
        cmocka_unit_test(test_groupnorm_g3),      cmocka_unit_test(test_groupnorm_c5),
        cmocka_unit_test(test_groupnorm_blocks),  cmocka_unit_test(test_groupnorm_threads),
        cmocka_unit_test(test_silu),              cmocka_unit_test(test_upsample),
        cmocka_unit_test(test_elementwise),       cmocka_unit_test(test_loss_l1),
        cmocka_unit_test(test_loss_mse),          cmocka_unit_test(test_loss_small),
        cmocka_unit_test(test_latent),            cmocka_unit_test(test_latent_no_eps),
        cmocka_unit_test(test_latent_hand),       cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sumsq),             cmocka_unit_test(test_normal_fill),
        cmocka_unit_test(test_latent_kl_gradient_near_zero_logvar),
        cmocka_unit_test(test_backend_table),     cmocka_unit_test(test_backend_extras),
        cmocka_unit_test(test_loss_scale_floor_keeps_the_fp16_loss_gradient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

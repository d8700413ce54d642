/* test_ops_cuda.c: cmocka tests of the CUDA backend (the kernels/..._cuda.cu files) against the CPU backend, the
 * reference. Every CUDA op runs on the same fresh random inputs as its CPU op (copied to the device, results copied
 * back) and the two are compared by relative norm error ||gpu - cpu|| / ||cpu|| <= 1e-4 (1e-6 for the single values
 * both backends reduce in double). TF32 is OFF for these comparisons (BackendOptions.allow_tf32 = 0): with
 * TF32 the convolutions carry about 1e-3 relative error by design. Covered: conv3d forward (with and without
 * bias), backward data and filter (dbias and NULL) over odd volumes, batch 3, channel counts 1, 3, 5, 12, 20,
 * stride 1 and 2, k 1 and 3; GroupNorm forward and backward with 1, 4 and per-channel groups, multi-block
 * spatial sizes and more than 256 vector lanes; silu, upsample, add/accumulate/scale, L1 and MSE loss, latent
 * (eps and eps NULL), AdamW over several steps, sumsq, normal_fill; every beta 0 (into NaN) and beta 1 path;
 * the float4 and scalar paths (counts not divisible by 4, misaligned pointers); upload_async/upload_wait
 * ordering, the cross-stream events (event_record/event_wait, each direction able to fail), the timers and the
 * memory accounting; and, under BackendOptions.deterministic, bitwise-identical results of two runs of conv
 * backward-filter and GroupNorm backward.
 * Without a usable GPU (always in a CPU-only build) it prints exactly one line, "skipped: no CUDA device
 * (<reason>)", and exits 0 without running cmocka; with VX_REQUIRE_GPU=1 (ci/gpu.sh on a GPU machine) that is a
 * failure instead, exit 1. `test_ops_cuda --list` prints the test names; `test_ops_cuda PATTERN...` runs only the
 * tests whose names match one of the shell patterns, so each test can run in a process of its own and a fatal
 * CUDA error in one does not hide the others. Every buffer is released and the backend shut down, so the
 * binary runs clean under compute-sanitizer --tool memcheck --leak-check full. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "require_gpu.h"
#ifdef VX_CUDA
#include <cuda_runtime.h> /* a second stream, as the NCCL communicator has, for the cross-stream events */
#endif
#include "rng.h"

#define TOL 1e-4        /* relative norm error, GPU vs CPU */
#define TOL_REDUCED 1e-6 /* single values reduced in double by both backends */
#define NORMAL_MAX_ULP 16 /* normal_fill: logf/cosf/sqrtf rounding on each side */

static const Backend *cpu, *gpu;

/* ---- helpers ---------------------------------------------------------------------------------------------- */

#define TEST_RNG_SEED 0x5EED0C0DAull
#include "test_random.h"

static float *fnan(long n) {
    float *p = fnew(n);
    for (long i = 0; i < n; i++) p[i] = NAN;
    return p;
}
static float *fcopy(const float *f, long n) {
    float *p = fnew(n);
    memcpy(p, f, sizeof(float) * (size_t)n);
    return p;
}

/* Device buffers: dalloc(n, off) allocates n + off floats and returns the base + off (off 1 makes a pointer that
 * is 4- but not 16-byte aligned, forcing the scalar paths); dfree takes the same off. */
static float *dalloc(long n, int off) {
    return (float *)gpu->alloc(sizeof(float) * (size_t)(n + off > 0 ? n + off : 1)) + off;
}
static void dfree(float *d, int off) { gpu->release(d - off); }
static float *dput_off(const float *h, long n, int off) {
    float *d = dalloc(n, off);
    if (n > 0) gpu->copy_to_device(d, h, sizeof(float) * (size_t)n);
    return d;
}
static float *dput(const float *h, long n) { return dput_off(h, n, 0); }
static float *dget(const float *d, long n) {
    float *h = fnew(n);
    if (n > 0) gpu->copy_to_host(h, d, sizeof(float) * (size_t)n);
    return h;
}

/* ||got - ref|| / ||ref|| (absolute when ref is 0; infinite when got has a NaN) */
static double rel_err(const float *got, const float *ref, long n) {
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        const double e = (double)got[i] - (double)ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    if (num != num) return INFINITY;
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* The device buffer d_gpu (n floats) against the CPU result. */
static void expect_close(const char *what, const float *d_gpu, const float *cpu_ref, long n, double tol) {
    float *g = dget(d_gpu, n);
    const double e = rel_err(g, cpu_ref, n);
    if (!(e <= tol)) print_error("%s: GPU vs CPU relative error %.3g > %.3g\n", what, e, tol);
    free(g);
    assert_true(e <= tol);
}

static void expect_bitwise(const char *what, const float *d_a, const float *d_b, long n) {
    float *a = dget(d_a, n), *b = dget(d_b, n);
    const int same = memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    if (!same) print_error("%s: two runs differ\n", what);
    free(a);
    free(b);
    assert_true(same);
}

static void set_options(int deterministic, int tf32) {
    const BackendOptions o = {.deterministic = deterministic, .allow_tf32 = tf32};
    backend_cuda_set_options(&o);
}

/* ---- conv3d ----------------------------------------------------------------------------------------------- */

typedef struct {
    int n, d, h, w, ci, co, k, stride, pad;
} ConvCase;

static void check_conv(ConvCase cc) {
    const Conv3dShape s = conv3d_shape(cc.n, cc.d, cc.h, cc.w, cc.ci, cc.co, cc.k, cc.stride, cc.pad);
    const long nx = conv3d_input_count(&s), ny = conv3d_output_count(&s), nw = conv3d_weight_count(&s), nb = cc.co;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *b = frand(nb, -1, 1), *r = frand(ny, -1, 1);
    void *cws = malloc(cpu->conv3d_workspace_bytes(&s) + 1);
    void *gws = gpu->alloc(gpu->conv3d_workspace_bytes(&s));
    float *X = dput(x, nx), *W = dput(w, nw), *B = dput(b, nb), *R = dput(r, ny);

    /* forward, with and without bias; the GPU output starts NaN */
    float *y = fnan(ny), *Y = dput(y, ny);
    cpu->conv3d_forward(&s, x, w, b, y, cws);
    gpu->conv3d_forward(&s, X, W, B, Y, gws);
    expect_close("conv forward", Y, y, ny, TOL);
    cpu->conv3d_forward(&s, x, w, NULL, y, cws);
    gpu->conv3d_forward(&s, X, W, NULL, Y, gws);
    expect_close("conv forward, no bias", Y, y, ny, TOL);

    /* backward, beta 0 into NaN */
    float *dx = fnan(nx), *dw = fnan(nw), *db = fnan(nb);
    float *DX = dput(dx, nx), *DW = dput(dw, nw), *DB = dput(db, nb);
    cpu->conv3d_backward_data(&s, r, w, dx, 0.0f, cws);
    cpu->conv3d_backward_filter(&s, x, r, dw, db, 0.0f, cws);
    gpu->conv3d_backward_data(&s, R, W, DX, 0.0f, gws);
    gpu->conv3d_backward_filter(&s, X, R, DW, DB, 0.0f, gws);
    expect_close("conv dx", DX, dx, nx, TOL);
    expect_close("conv dw", DW, dw, nw, TOL);
    expect_close("conv dbias", DB, db, nb, TOL);

    /* dbias NULL: dw alone */
    float *nanw = fnan(nw);
    gpu->copy_to_device(DW, nanw, sizeof(float) * (size_t)nw);
    gpu->conv3d_backward_filter(&s, X, R, DW, NULL, 0.0f, gws);
    expect_close("conv dw (dbias NULL)", DW, dw, nw, TOL);

    /* beta 1 adds to the same random starting values on both sides */
    float *dx1 = frand(nx, -1, 1), *dw1 = frand(nw, -1, 1), *db1 = frand(nb, -1, 1);
    gpu->copy_to_device(DX, dx1, sizeof(float) * (size_t)nx);
    gpu->copy_to_device(DW, dw1, sizeof(float) * (size_t)nw);
    gpu->copy_to_device(DB, db1, sizeof(float) * (size_t)nb);
    cpu->conv3d_backward_data(&s, r, w, dx1, 1.0f, cws);
    cpu->conv3d_backward_filter(&s, x, r, dw1, db1, 1.0f, cws);
    gpu->conv3d_backward_data(&s, R, W, DX, 1.0f, gws);
    gpu->conv3d_backward_filter(&s, X, R, DW, DB, 1.0f, gws);
    expect_close("conv dx beta 1", DX, dx1, nx, TOL);
    expect_close("conv dw beta 1", DW, dw1, nw, TOL);
    expect_close("conv dbias beta 1", DB, db1, nb, TOL);

    free(x), free(w), free(b), free(r), free(cws), free(y), free(dx), free(dw), free(db), free(nanw);
    free(dx1), free(dw1), free(db1);
    gpu->release(gws);
    dfree(X, 0), dfree(W, 0), dfree(B, 0), dfree(R, 0), dfree(Y, 0), dfree(DX, 0), dfree(DW, 0), dfree(DB, 0);
}

/* odd volume 5x7x9, batch 3, 3 -> 5 channels, k3 s1 p1 */
static void test_conv_k3s1(void **state) { check_conv((ConvCase){3, 5, 7, 9, 3, 5, 3, 1, 1}); }
/* stride 2 on odd sizes, 12 -> 20 channels */
static void test_conv_k3s2(void **state) { check_conv((ConvCase){3, 5, 7, 9, 12, 20, 3, 2, 1}); }
/* stride 2, mixed even/odd sizes, 5 -> 3 channels */
static void test_conv_k3s2_even(void **state) { check_conv((ConvCase){3, 6, 5, 8, 5, 3, 3, 2, 1}); }
/* pointwise 1x1x1 (the 1x1 shortcuts and the latent heads), 20 -> 12 and 12 -> 5 */
static void test_conv_k1(void **state) {
    check_conv((ConvCase){3, 5, 7, 9, 20, 12, 1, 1, 0});
    check_conv((ConvCase){2, 5, 7, 9, 12, 5, 1, 1, 0});
}
/* k1 stride 2: input positions no tap reads get dx 0 */
static void test_conv_k1s2(void **state) { check_conv((ConvCase){2, 5, 6, 7, 12, 12, 1, 2, 0}); }
/* one input channel (the first layer) and one output channel (the last) */
static void test_conv_c1(void **state) {
    check_conv((ConvCase){2, 9, 8, 7, 1, 8, 3, 1, 1});
    check_conv((ConvCase){2, 9, 8, 7, 8, 1, 3, 1, 1});
}
/* model-like sizes: 16 -> 32 channels on 17x18x19, and a stride-2 32 -> 32 downsampling */
static void test_conv_larger(void **state) {
    check_conv((ConvCase){1, 17, 18, 19, 16, 32, 3, 1, 1});
    check_conv((ConvCase){2, 12, 12, 12, 32, 32, 3, 2, 1});
}

/* ---- groupnorm -------------------------------------------------------------------------------------------- */

/* off 1: the big tensors at misaligned addresses (scalar path even when c % 4 == 0) */
static void check_groupnorm_act(int n, long spatial, int c, int groups, int off, int silu) {
    const GroupNormShape s = {.n = n, .spatial = spatial, .c = c, .groups = groups, .eps = 1e-5f, .silu = silu};
    const long cnt = (long)n * spatial * c, ng = (long)n * groups;
    float *x = frand(cnt, -1, 1);
    for (long i = 0; i < cnt; i++) x[i] = 0.5f + x[i] * (1.0f + (float)(i % c) * 0.3f); /* offset, per-channel scale */
    float *gamma = frand(c, 0.5, 1.5), *beta = frand(c, -0.5, 0.5), *r = frand(cnt, -1, 1);
    float *X = dput_off(x, cnt, off), *G = dput(gamma, c), *Bt = dput(beta, c), *R = dput_off(r, cnt, off);

    float *y = fnan(cnt), *mean = fnan(ng), *rstd = fnan(ng);
    float *Y = dput_off(y, cnt, off), *M = dput(mean, ng), *RS = dput(rstd, ng);
    cpu->groupnorm_forward(&s, x, gamma, beta, y, mean, rstd);
    gpu->groupnorm_forward(&s, X, G, Bt, Y, M, RS);
    expect_close("groupnorm y", Y, y, cnt, TOL);
    expect_close("groupnorm mean", M, mean, ng, TOL);
    expect_close("groupnorm rstd", RS, rstd, ng, TOL);

    /* backward from the CPU's statistics (the same inputs on both sides), every beta combination */
    gpu->copy_to_device(M, mean, sizeof(float) * (size_t)ng);
    gpu->copy_to_device(RS, rstd, sizeof(float) * (size_t)ng);
    float *DX = dalloc(cnt, off), *DG = dalloc(c, 0), *DB = dalloc(c, 0);
    for (int bdx = 0; bdx < 2; bdx++)
        for (int bp = 0; bp < 2; bp++) {
            float *dx = bdx ? frand(cnt, -1, 1) : fnan(cnt), *dg = bp ? frand(c, -1, 1) : fnan(c);
            float *db = bp ? frand(c, -1, 1) : fnan(c);
            gpu->copy_to_device(DX, dx, sizeof(float) * (size_t)cnt);
            gpu->copy_to_device(DG, dg, sizeof(float) * (size_t)c);
            gpu->copy_to_device(DB, db, sizeof(float) * (size_t)c);
            cpu->groupnorm_backward(&s, r, x, gamma, beta, mean, rstd, dx, dg, db, (float)bdx, (float)bp);
            gpu->groupnorm_backward(&s, R, X, G, Bt, M, RS, DX, DG, DB, (float)bdx, (float)bp);
            char what[80];
            snprintf(what, sizeof what, "groupnorm%s dx (beta_dx %d, beta_dparam %d)", silu ? "+silu" : "", bdx, bp);
            expect_close(what, DX, dx, cnt, TOL);
            snprintf(what, sizeof what, "groupnorm%s dgamma (beta_dx %d, beta_dparam %d)", silu ? "+silu" : "", bdx, bp);
            expect_close(what, DG, dg, c, TOL);
            snprintf(what, sizeof what, "groupnorm%s dbeta (beta_dx %d, beta_dparam %d)", silu ? "+silu" : "", bdx, bp);
            expect_close(what, DB, db, c, TOL);
            free(dx), free(dg), free(db);
        }
    free(x), free(gamma), free(beta), free(r), free(y), free(mean), free(rstd);
    dfree(X, off), dfree(G, 0), dfree(Bt, 0), dfree(R, off), dfree(Y, off), dfree(M, 0), dfree(RS, 0);
    dfree(DX, off), dfree(DG, 0), dfree(DB, 0);
}

/* plain and fused with SiLU */
static void check_groupnorm(int n, long spatial, int c, int groups, int off) {
    check_groupnorm_act(n, spatial, c, groups, off, 0);
    check_groupnorm_act(n, spatial, c, groups, off, 1);
}

/* 5x7x9 volumes, batch 3, 12 and 20 channels in 4 groups (float4 path), 5 channels in 1 group (scalar) */
static void test_groupnorm_small(void **state) {
    check_groupnorm(3, 5 * 7 * 9, 12, 4, 0);
    check_groupnorm(3, 5 * 7 * 9, 20, 4, 0);
    check_groupnorm(2, 5 * 7 * 9, 5, 1, 0);
    check_groupnorm(2, 3 * 4 * 5, 12, 12, 0); /* one channel per group */
    check_groupnorm(2, 3 * 4 * 5, 12, 1, 1);  /* misaligned: scalar path with c % 4 == 0 */
}
/* many partial-sum blocks per sample (40^3 positions), and 64 channels in 16 groups at 33^3 */
static void test_groupnorm_blocks(void **state) {
    check_groupnorm(2, 40 * 40 * 40, 16, 4, 0);
    check_groupnorm(1, 33 * 33 * 33, 64, 16, 0);
}
/* more vector lanes than threads in a block: 258 scalar channels, 1040 channels as 260 float4 lanes */
static void test_groupnorm_wide(void **state) {
    check_groupnorm(2, 50, 258, 2, 0);
    check_groupnorm(1, 30, 1040, 8, 0);
}

/* ---- silu, upsample, elementwise -------------------------------------------------------------------------- */

static void check_silu(long n, int off) {
    float *x = frand(n, -12, 12), *r = frand(n, -1, 1);
    x[0] = -100.0f; /* beyond the exp clamp */
    float *X = dput_off(x, n, off), *R = dput_off(r, n, off);
    float *y = fnan(n), *Y = dput_off(y, n, off);
    cpu->silu_forward(n, x, y);
    gpu->silu_forward(n, X, Y);
    expect_close("silu forward", Y, y, n, TOL);
    for (int beta = 0; beta < 2; beta++) {
        float *dx = beta ? frand(n, -1, 1) : fnan(n);
        float *DX = dput_off(dx, n, off);
        cpu->silu_backward(n, x, r, dx, (float)beta);
        gpu->silu_backward(n, X, R, DX, (float)beta);
        expect_close(beta ? "silu dx beta 1" : "silu dx beta 0", DX, dx, n, TOL);
        free(dx);
        dfree(DX, off);
    }
    free(x), free(r), free(y);
    dfree(X, off), dfree(R, off), dfree(Y, off);
}

static void test_silu(void **state) {
    check_silu(1001, 0);   /* scalar: count % 4 != 0 */
    check_silu(70000, 0);  /* float4 */
    check_silu(4096, 1);   /* scalar: misaligned */
}

static void check_upsample(int n, int d, int h, int w, int c) {
    const long nx = (long)n * d * h * w * c, ny = 8 * nx;
    float *x = frand(nx, -1, 1), *r = frand(ny, -1, 1), *y = fnan(ny);
    float *X = dput(x, nx), *R = dput(r, ny), *Y = dput(y, ny);
    cpu->upsample2x_forward(n, d, h, w, c, x, y);
    gpu->upsample2x_forward(n, d, h, w, c, X, Y);
    expect_close("upsample forward", Y, y, ny, TOL);
    for (int beta = 0; beta < 2; beta++) {
        float *dx = beta ? frand(nx, -1, 1) : fnan(nx);
        float *DX = dput(dx, nx);
        cpu->upsample2x_backward(n, d, h, w, c, r, dx, (float)beta);
        gpu->upsample2x_backward(n, d, h, w, c, R, DX, (float)beta);
        expect_close(beta ? "upsample dx beta 1" : "upsample dx beta 0", DX, dx, nx, TOL);
        free(dx);
        dfree(DX, 0);
    }
    free(x), free(r), free(y);
    dfree(X, 0), dfree(R, 0), dfree(Y, 0);
}

static void test_upsample(void **state) {
    check_upsample(3, 5, 7, 9, 3);  /* scalar */
    check_upsample(2, 3, 4, 5, 12); /* float4 */
    check_upsample(1, 2, 3, 2, 20);
}

/* data.augment's flips and rotations after the upload: the same values as the loader's CPU path, moved exactly */
static void test_augment(void **state) {
    const int dims[2][4] = {{6, 9, 9, 1}, {5, 7, 11, 3}};
    for (int t = 0; t < 2; t++) {
        const int d = dims[t][0], h = dims[t][1], w = dims[t][2], c = dims[t][3];
        const long n = (long)d * h * w * c;
        float *x = frand(n, -1, 1), *X = dput_off(x, n, 0);
        for (uint32_t code = 0; code < 32; code++) {
            if (h != w && ((code >> AUGMENT_ROT_SHIFT) & 1u)) continue;
            float *y = fnan(n), *Y = dput_off(y, n, 0);
            cpu->augment(d, h, w, c, code, x, y);
            gpu->augment(d, h, w, c, code, X, Y);
            expect_close("augment", Y, y, n, 0.0);
            free(y);
            dfree(Y, 0);
        }
        free(x);
        dfree(X, 0);
    }
}

static void check_elementwise(long n, int off) {
    float *a = frand(n, -1, 1), *b = frand(n, -1, 1), *y = fnan(n);
    float *A = dput_off(a, n, off), *Bv = dput_off(b, n, off), *Y = dput_off(y, n, off);
    cpu->add_forward(n, a, b, y);
    gpu->add_forward(n, A, Bv, Y);
    expect_close("add", Y, y, n, TOL);
    float *dst = fnan(n), *D = dput_off(dst, n, off);
    cpu->accumulate(n, a, dst, 0.0f); /* beta 0 overwrites NaN */
    gpu->accumulate(n, A, D, 0.0f);
    expect_close("accumulate beta 0", D, dst, n, TOL);
    cpu->accumulate(n, b, dst, 1.0f);
    gpu->accumulate(n, Bv, D, 1.0f);
    expect_close("accumulate beta 1", D, dst, n, TOL);
    cpu->scale(n, dst, 0.375f);
    gpu->scale(n, D, 0.375f);
    expect_close("scale", D, dst, n, TOL);
    free(a), free(b), free(y), free(dst);
    dfree(A, off), dfree(Bv, off), dfree(Y, off), dfree(D, off);
}

static void test_elementwise(void **state) {
    check_elementwise(1001, 0);
    check_elementwise(70000, 0);
    check_elementwise(70000, 1);
}

/* ---- loss, latent, optimizer, rng ------------------------------------------------------------------------- */

static void check_loss(ReconLoss kind, long n, int off) {
    float *pred = frand(n, -1, 1), *target = frand(n, -1, 1);
    for (long i = 3; i < n; i += 10) target[i] = pred[i]; /* exact ties: the L1 subgradient there is 0 */
    float *P = dput_off(pred, n, off), *T = dput_off(target, n, off), *L = dalloc(1, 0);
    float *dp = fnan(n), *DP = dput_off(dp, n, off);
    float loss = NAN;
    cpu->recon_loss(kind, n, pred, target, &loss, dp, 0.75f);
    gpu->recon_loss(kind, n, P, T, L, DP, 0.75f);
    expect_close(kind == LOSS_L1 ? "L1 loss value" : "MSE loss value", L, &loss, 1, TOL_REDUCED);
    expect_close(kind == LOSS_L1 ? "L1 loss dpred" : "MSE loss dpred", DP, dp, n, TOL);
    gpu->recon_loss(kind, n, P, T, L, NULL, 0.75f); /* evaluation only */
    expect_close("loss value, dpred NULL", L, &loss, 1, TOL_REDUCED);
    free(pred), free(target), free(dp);
    dfree(P, off), dfree(T, off), dfree(L, 0), dfree(DP, off);
}

static void test_loss(void **state) {
    for (int k = 0; k < 2; k++) {
        const ReconLoss kind = k ? LOSS_MSE : LOSS_L1;
        check_loss(kind, 20011, 0);       /* scalar */
        check_loss(kind, 20012, 0);       /* float4 */
        check_loss(kind, 20012, 1);       /* misaligned */
        check_loss(kind, 3000001, 0);     /* more blocks than the reduction's cap */
    }
    /* count 0: the loss is 0 */
    float nan1 = NAN, zero = 0.0f, *L = dput(&nan1, 1);
    gpu->recon_loss(LOSS_L1, 0, L, L, L, NULL, 1.0f);
    expect_close("empty loss", L, &zero, 1, 0.0);
    dfree(L, 0);
}

static void check_latent(int n, long cps, int with_eps, int with_dz) {
    const LatentShape s = {.n = n, .count_per_sample = cps, .logvar_min = -5.0f, .logvar_max = 3.0f};
    const long cnt = (long)n * cps;
    float *mu = frand(cnt, -2, 2), *lv = frand(cnt, -7, 5), *eps = frand(cnt, -2, 2), *dz = frand(cnt, -1, 1);
    float *MU = dput(mu, cnt), *LV = dput(lv, cnt), *EPS = dput(eps, cnt), *DZ = dput(dz, cnt);
    float *z = fnan(cnt), *Z = dput(z, cnt), kl = NAN, *KL = dalloc(1, 0);
    cpu->latent_forward(&s, mu, lv, with_eps ? eps : NULL, z, &kl);
    gpu->latent_forward(&s, MU, LV, with_eps ? EPS : NULL, Z, KL);
    expect_close("latent z", Z, z, cnt, TOL);
    expect_close("latent kl", KL, &kl, 1, TOL_REDUCED);
    float *dmu = fnan(cnt), *dlv = fnan(cnt), *DMU = dput(dmu, cnt), *DLV = dput(dlv, cnt);
    cpu->latent_backward(&s, mu, lv, with_eps ? eps : NULL, with_dz ? dz : NULL, 0.3f, dmu, dlv);
    gpu->latent_backward(&s, MU, LV, with_eps ? EPS : NULL, with_dz ? DZ : NULL, 0.3f, DMU, DLV);
    expect_close("latent dmu", DMU, dmu, cnt, TOL);
    expect_close("latent dlogvar", DLV, dlv, cnt, TOL);
    free(mu), free(lv), free(eps), free(dz), free(z), free(dmu), free(dlv);
    dfree(MU, 0), dfree(LV, 0), dfree(EPS, 0), dfree(DZ, 0), dfree(Z, 0), dfree(KL, 0), dfree(DMU, 0), dfree(DLV, 0);
}

static void test_latent(void **state) {
    check_latent(3, 35, 1, 1);
    check_latent(3, 35, 0, 1);       /* eps NULL: z = mu */
    check_latent(2, 4096 * 5 + 7, 1, 1); /* several blocks per sample */
    check_latent(3, 35, 1, 0);       /* dz NULL: the KL gradient alone */
}

static void check_adamw(long n, int off) {
    float *p = frand(n, -1, 1), *m = frand(n, -0.1, 0.1), *v = frand(n, 0, 0.01);
    float *P = dput_off(p, n, off), *M = dput_off(m, n, off), *V = dput_off(v, n, off), *G = dalloc(n, off);
    AdamWParams a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.05f,
                     .grad_scale = 0.5f};
    for (long t = 1; t <= 5; t++) {
        float *g = frand(n, -1, 1);
        gpu->copy_to_device(G, g, sizeof(float) * (size_t)n);
        a.step = t;
        cpu->adamw(n, p, g, m, v, &a);
        gpu->adamw(n, P, G, M, V, &a);
        free(g);
    }
    expect_close("adamw p", P, p, n, TOL);
    expect_close("adamw m", M, m, n, TOL);
    expect_close("adamw v", V, v, n, TOL);
    free(p), free(m), free(v);
    dfree(P, off), dfree(M, off), dfree(V, off), dfree(G, off);
}

static void test_adamw(void **state) {
    check_adamw(1003, 0);
    check_adamw(4096, 0);
    check_adamw(4096, 1);
}

static void check_sumsq(long n, int off) {
    float *x = frand(n, -1, 1), out = NAN;
    float *X = dput_off(x, n, off), *O = dalloc(1, 0);
    cpu->sumsq(n, x, &out);
    gpu->sumsq(n, X, O);
    expect_close("sumsq", O, &out, 1, TOL_REDUCED);
    free(x);
    dfree(X, off), dfree(O, 0);
}

static void test_sumsq(void **state) {
    check_sumsq(1000003, 0);
    check_sumsq(4096, 0);
    check_sumsq(4096, 1);
    check_sumsq(3, 0);
    float nan1 = NAN, zero = 0.0f, *O = dput(&nan1, 1);
    gpu->sumsq(0, O, O);
    expect_close("sumsq of nothing", O, &zero, 1, 0.0);
    dfree(O, 0);
}

static long ulp_distance(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia; /* monotone integer order */
    if (ib < 0) ib = INT32_MIN - ib;
    return labs((long)ia - (long)ib);
}

static void check_normal(long n, uint64_t offset, int off) {
    float *h = fnew(n), *D = dalloc(n, off);
    cpu->normal_fill(n, 42, 7, offset, h);
    gpu->normal_fill(n, 42, 7, offset, D);
    float *g = dget(D, n);
    long worst = 0;
    for (long i = 0; i < n; i++) {
        const long u = ulp_distance(g[i], h[i]);
        if (u > worst) worst = u;
    }
    if (worst > NORMAL_MAX_ULP) print_error("normal_fill: GPU and CPU differ by %ld ulp\n", worst);
    assert_true(worst <= NORMAL_MAX_ULP); /* a different integer hash would give unrelated values */
    free(h), free(g);
    dfree(D, off);
}

static void test_normal_fill(void **state) {
    check_normal(100003, 777, 0); /* scalar */
    check_normal(100000, 0, 0);   /* float4 */
    check_normal(4096, 5, 1);     /* misaligned */
    /* offset k is the tail of a longer fill, bit for bit, on the GPU too */
    const long n = 10000, k = 333;
    float *A = dalloc(n + k, 0), *B = dalloc(n, 0);
    gpu->normal_fill(n + k, 9, 3, 0, A);
    gpu->normal_fill(n, 9, 3, k, B);
    expect_bitwise("normal_fill offset", A + k, B, n);
    dfree(A, 0), dfree(B, 0);
}

/* ---- memory, uploads, timers ------------------------------------------------------------------------------ */

static void test_memory_accounting(void **state) {
    const size_t before = gpu->bytes_in_use();
    void *a = gpu->alloc(12345), *b = gpu->alloc(1 << 20);
    assert_int_equal(gpu->bytes_in_use(), before + 12345 + (1 << 20));
    assert_true(gpu->peak_bytes() >= before + 12345 + (1 << 20));
    gpu->release(a);
    assert_int_equal(gpu->bytes_in_use(), before + (1 << 20));
    const size_t peak = gpu->peak_bytes();
    gpu->release(b);
    assert_int_equal(gpu->bytes_in_use(), before);
    assert_int_equal(gpu->peak_bytes(), peak); /* the peak stays */
    gpu->release(NULL);                       /* a no-op */
}

static void test_upload(void **state) {
    const long n = 1 << 22;
    const size_t bytes = sizeof(float) * (size_t)n;
    float *host = gpu->alloc_host(bytes), *ref = frand(n, -1, 1), *ref2 = frand(n, -1, 1);
    memcpy(host, ref, bytes);
    float *D = dalloc(n, 0), *E = dalloc(n, 0);
    /* compute enqueued after the upload sees the data */
    gpu->upload_async(D, host, bytes);
    gpu->scale(n, D, 2.0f);
    gpu->upload_wait();
    memset(host, 0xFF, bytes); /* the host buffer is free once upload_wait returns */
    float *twice = fcopy(ref, n);
    for (long i = 0; i < n; i++) twice[i] *= 2.0f;
    expect_close("upload then compute", D, twice, n, 0.0);
    /* the upload starts after compute enqueued before it: E gets D's old values, D the new ones */
    memcpy(host, ref2, bytes);
    gpu->accumulate(n, D, E, 0.0f);
    gpu->upload_async(D, host, bytes);
    gpu->upload_wait();
    gpu->synchronize();
    expect_close("compute before the upload", E, twice, n, 0.0);
    expect_close("second upload", D, ref2, n, 0.0);
    gpu->upload_async(D, host, 0); /* nothing */
    gpu->upload_wait();
    gpu->release_host(host);
    free(ref), free(ref2), free(twice);
    dfree(D, 0), dfree(E, 0);
}

/* The events that order the NCCL communicator's stream against the compute stream: a copy on a side stream waits
 * for the compute work recorded before it, and compute work after event_wait sees the copy. Each direction fails
 * visibly if broken: the compute stream is busy for a while before the record (a copy that did not wait would read
 * D undoubled), and a long copy goes first on the side stream (a compute stream that did not wait would halve E
 * before the ordered copy overwrote it with 2 x ref). */
static void test_cross_stream_events(void **state) {
#ifdef VX_CUDA
    const long n = 1 << 22, big = 1L << 26;
    const size_t bytes = sizeof(float) * (size_t)n;
    float *ref = frand(n, -1, 1), *D = dalloc(n, 0), *E = dalloc(n, 0), *B = dalloc(big, 0), *BC = dalloc(big, 0);
    cudaStream_t side;
    assert_int_equal(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    void *computed = gpu->event_create(), *copied = gpu->event_create();
    gpu->zero(B, sizeof(float) * (size_t)big);
    for (int round = 0; round < 3; round++) {
        gpu->copy_to_device(D, ref, bytes);
        gpu->zero(E, bytes);
        for (int i = 0; i < 100; i++) gpu->scale(n, D, 1.0f); /* keeps the compute stream busy for a while */
        gpu->scale(n, D, 2.0f);
        gpu->event_record(computed);
        assert_int_equal(cudaStreamWaitEvent(side, (cudaEvent_t)computed, 0), cudaSuccess);
        assert_int_equal(cudaMemcpyAsync(BC, B, sizeof(float) * (size_t)big, cudaMemcpyDeviceToDevice, side),
                         cudaSuccess); /* the side stream's long head start */
        assert_int_equal(cudaMemcpyAsync(E, D, bytes, cudaMemcpyDeviceToDevice, side), cudaSuccess);
        assert_int_equal(cudaEventRecord((cudaEvent_t)copied, side), cudaSuccess);
        gpu->event_wait(copied);
        gpu->scale(n, E, 0.5f); /* runs after the copy: E = D / 2 = ref */
        gpu->synchronize();
        expect_close("side-stream copy ordered by events", E, ref, n, 0.0);
    }
    gpu->event_destroy(computed);
    gpu->event_destroy(copied);
    cudaStreamDestroy(side);
    free(ref);
    dfree(D, 0), dfree(E, 0), dfree(B, 0), dfree(BC, 0);
#else
    (void)state;
#endif
}

static void test_timer(void **state) {
    const long n = 1 << 24;
    float *D = dalloc(n, 0), *E = dalloc(n, 0);
    gpu->zero(D, sizeof(float) * (size_t)n);
    gpu->timer_mark(0);
    for (int i = 0; i < 10; i++) gpu->silu_forward(n, D, E);
    gpu->timer_mark(1);
    gpu->scale(n, E, 0.5f);
    gpu->timer_mark(7);
    const double a = gpu->timer_elapsed_ms(0, 1), b = gpu->timer_elapsed_ms(0, 7);
    assert_true(isfinite(a) && a > 0.0 && a < 60000.0);
    assert_true(b >= a);
    dfree(D, 0), dfree(E, 0);
}

static void test_backend_table(void **state) {
    assert_non_null(gpu);
    assert_ptr_equal(gpu, backend_cuda());
    assert_string_equal(gpu->name, "cuda");
    const void *const fns[] = {
        (void *)gpu->alloc, (void *)gpu->release, (void *)gpu->copy_to_device, (void *)gpu->copy_to_host,
        (void *)gpu->zero, (void *)gpu->synchronize, (void *)gpu->alloc_host, (void *)gpu->release_host,
        (void *)gpu->upload_async, (void *)gpu->upload_wait, (void *)gpu->timer_mark, (void *)gpu->timer_elapsed_ms,
        (void *)gpu->bytes_in_use, (void *)gpu->peak_bytes, (void *)gpu->conv3d_workspace_bytes,
        (void *)gpu->conv3d_forward, (void *)gpu->conv3d_backward_data, (void *)gpu->conv3d_backward_filter,
        (void *)gpu->groupnorm_forward, (void *)gpu->groupnorm_backward, (void *)gpu->silu_forward,
        (void *)gpu->silu_backward, (void *)gpu->upsample2x_forward, (void *)gpu->upsample2x_backward,
        (void *)gpu->add_forward, (void *)gpu->accumulate, (void *)gpu->scale, (void *)gpu->recon_loss,
        (void *)gpu->latent_forward, (void *)gpu->latent_backward, (void *)gpu->normal_fill, (void *)gpu->adamw,
        (void *)gpu->sumsq};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) assert_non_null(fns[i]);
    char reason[64];
    assert_int_equal(backend_cuda_init(0, reason, sizeof reason), 1); /* a second init changes nothing */
    /* zero and the blocking copies */
    float src[5] = {1, 2, 3, 4, 5}, back[5], *D = dalloc(5, 0);
    gpu->copy_to_device(D, src, sizeof src);
    gpu->copy_to_host(back, D, sizeof back);
    assert_memory_equal(src, back, sizeof src);
    gpu->zero(D, sizeof src);
    gpu->copy_to_host(back, D, sizeof back);
    for (int i = 0; i < 5; i++) assert_true(back[i] == 0.0f);
    dfree(D, 0);
}

/* ---- determinism ------------------------------------------------------------------------------------------ */

static void test_deterministic(void **state) {
    set_options(1, 0);
    /* conv backward filter: a shape large enough for split reductions inside cuDNN */
    const Conv3dShape s = conv3d_shape(4, 16, 16, 16, 32, 32, 3, 1, 1);
    const long nx = conv3d_input_count(&s), ny = conv3d_output_count(&s), nw = conv3d_weight_count(&s);
    float *x = frand(nx, -1, 1), *r = frand(ny, -1, 1);
    float *X = dput(x, nx), *R = dput(r, ny), *DW1 = dalloc(nw, 0), *DW2 = dalloc(nw, 0), *DB1 = dalloc(32, 0),
          *DB2 = dalloc(32, 0);
    void *ws = gpu->alloc(gpu->conv3d_workspace_bytes(&s));
    gpu->conv3d_backward_filter(&s, X, R, DW1, DB1, 0.0f, ws);
    gpu->conv3d_backward_filter(&s, X, R, DW2, DB2, 0.0f, ws);
    expect_bitwise("deterministic conv dw", DW1, DW2, nw);
    expect_bitwise("deterministic conv dbias", DB1, DB2, 32);
    /* and it is still the right answer */
    float *dw = fnew(nw), *db = fnew(32);
    void *cws = malloc(cpu->conv3d_workspace_bytes(&s) + 1);
    cpu->conv3d_backward_filter(&s, x, r, dw, db, 0.0f, cws);
    expect_close("deterministic conv dw vs cpu", DW1, dw, nw, TOL);

    /* groupnorm backward at 24^3 x 64 channels, 16 groups, batch 4 */
    const GroupNormShape g = {.n = 4, .spatial = 24 * 24 * 24, .c = 64, .groups = 16, .eps = 1e-5f};
    const long cnt = (long)g.n * g.spatial * g.c;
    float *gx = frand(cnt, -1, 1), *gr = frand(cnt, -1, 1), *gam = frand(64, 0.5, 1.5), *bet = frand(64, -1, 1);
    float *GX = dput(gx, cnt), *GR = dput(gr, cnt), *GG = dput(gam, 64), *GB = dput(bet, 64);
    float *Y = dalloc(cnt, 0), *M = dalloc(64, 0), *RS = dalloc(64, 0);
    gpu->groupnorm_forward(&g, GX, GG, GB, Y, M, RS);
    float *DX[2], *DG[2], *DBt[2];
    for (int run = 0; run < 2; run++) {
        DX[run] = dalloc(cnt, 0), DG[run] = dalloc(64, 0), DBt[run] = dalloc(64, 0);
        gpu->groupnorm_backward(&g, GR, GX, GG, GB, M, RS, DX[run], DG[run], DBt[run], 0.0f, 0.0f);
    }
    expect_bitwise("deterministic groupnorm dx", DX[0], DX[1], cnt);
    expect_bitwise("deterministic groupnorm dgamma", DG[0], DG[1], 64);
    expect_bitwise("deterministic groupnorm dbeta", DBt[0], DBt[1], 64);
    set_options(0, 0);

    free(x), free(r), free(dw), free(db), free(cws), free(gx), free(gr), free(gam), free(bet);
    dfree(X, 0), dfree(R, 0), dfree(DW1, 0), dfree(DW2, 0), dfree(DB1, 0), dfree(DB2, 0);
    gpu->release(ws);
    dfree(GX, 0), dfree(GR, 0), dfree(GG, 0), dfree(GB, 0), dfree(Y, 0), dfree(M, 0), dfree(RS, 0);
    for (int run = 0; run < 2; run++) dfree(DX[run], 0), dfree(DG[run], 0), dfree(DBt[run], 0);
}

/* The test's device allocations are all released: nothing of ours is left in use. */
static int teardown_group(void **state) {
    const size_t left = gpu->bytes_in_use();
    if (left) fprintf(stderr, "test_ops_cuda: %zu bytes still allocated on the device\n", left);
    return left != 0;
}

int main(int argc, char **argv) {
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_backend_table),   cmocka_unit_test(test_conv_k3s1),
        cmocka_unit_test(test_conv_k3s2),       cmocka_unit_test(test_conv_k3s2_even),
        cmocka_unit_test(test_conv_k1),         cmocka_unit_test(test_conv_k1s2),
        cmocka_unit_test(test_conv_c1),         cmocka_unit_test(test_conv_larger),
        cmocka_unit_test(test_groupnorm_small), cmocka_unit_test(test_groupnorm_blocks),
        cmocka_unit_test(test_groupnorm_wide),  cmocka_unit_test(test_silu),
        cmocka_unit_test(test_upsample),        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_loss),            cmocka_unit_test(test_latent),
        cmocka_unit_test(test_adamw),           cmocka_unit_test(test_sumsq),
        cmocka_unit_test(test_normal_fill),     cmocka_unit_test(test_memory_accounting),
        cmocka_unit_test(test_upload),          cmocka_unit_test(test_timer),
        cmocka_unit_test(test_cross_stream_events), cmocka_unit_test(test_augment),
        cmocka_unit_test(test_deterministic),
    };
    const size_t n_all = sizeof all / sizeof all[0];
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n_all; i++) printf("%s\n", all[i].name);
        return 0;
    }
    struct CMUnitTest chosen[sizeof all / sizeof all[0]];
    size_t n = 0;
    for (size_t i = 0; i < n_all; i++) {
        int match = argc < 2;
        for (int a = 1; a < argc && !match; a++) match = fnmatch(argv[a], all[i].name, 0) == 0;
        if (match) chosen[n++] = all[i];
    }
    if (n == 0) {
        fprintf(stderr, "test_ops_cuda: no test matches the given patterns; --list prints the names\n");
        return 2;
    }

    set_options(0, 0); /* TF32 off: the comparisons need float32 accuracy */
    char reason[256];
    if (!backend_cuda_init(0, reason, sizeof reason)) {
        if (vx_require_gpu()) {
            printf("FAILED: no CUDA device (%s), and VX_REQUIRE_GPU=1 turns the skip into a failure\n", reason);
            return 1;
        }
        printf("skipped: no CUDA device (%s)\n", reason);
        return 0;
    }
    cpu = backend_cpu();
    gpu = backend_cuda();
    /* the function behind cmocka_run_group_tests, which takes the count from the array's size */
    const int failed = _cmocka_run_group_tests("test_ops_cuda", chosen, n, NULL, teardown_group);
    backend_cuda_shutdown();
    return failed;
}

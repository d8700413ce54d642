/* op_cases.c: the op tests' cases (see op_cases.h). */
#include "op_cases.h"

#include <stdio.h>
#include <string.h>

#include "augment/augment.h"
#include "batchnorm/batchnorm.h"
#include "conv3d/conv3d.h"
#include "dropout/dropout.h"
#include "groupnorm/groupnorm.h"
#include "head_loss/head_loss.h"
#include "latent/latent.h"
#include "linear/linear.h"
#include "maxpool/maxpool.h"
#include "backend/op_check.h"

#define MAX_CASES 1024

static OpTestCase cases[MAX_CASES];
static int n_cases;

static void add(const char *op, KernelCase k, int offset, int emu) {
    if (n_cases == MAX_CASES) return;
    cases[n_cases++] = (OpTestCase){.k = k, .op = op, .offset = offset, .emu = emu};
}

/* with beta 0 and 1 */
static void add_betas(const char *op, KernelCase k, int offset, int emu) {
    for (int b = 0; b < 2; b++) {
        k.beta = (float)b;
        add(op, k, offset, emu);
    }
}

static void conv_shape(const Conv3dShape s) {
    KernelCase k = {0};
    kernel_case_set_params(&k, &s, sizeof s);
    char ks[40];
    conv3d_kernel_label(&s, ks, sizeof ks);
    snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d->%d %s p%dx%dx%d", s.n, s.d, s.h, s.w, s.c_in, s.c_out, ks,
             s.pad[0], s.pad[1], s.pad[2]);
    add("conv3d_forward", k, 0, 0);
    add("conv3d_forward_add", k, 0, 0);
    add_betas("conv3d_backward_data", k, 0, 0);
    add_betas("conv3d_backward_filter", k, 0, 0);
}

static void conv(int n, int d, int h, int w, int ci, int co, int kk, int stride, int pad) {
    conv_shape(conv3d_shape(n, d, h, w, ci, co, kk, stride, pad));
}

/* k, stride and pad per axis (d, h, w) */
static void conv_3d(int n, int d, int h, int w, int ci, int co, const int k[3], const int stride[3], const int pad[3]) {
    conv_shape(conv3d_shape_3d(n, d, h, w, ci, co, k, stride, pad));
}

static void groupnorm(int n, long spatial, int c, int groups, int offset, int emu) {
    for (int silu = 0; silu < 2; silu++) {
        KernelCase k = {0};
        const GroupNormShape s = {.n = n, .spatial = spatial, .c = c, .groups = groups, .eps = 1e-5f, .silu = silu};
        kernel_case_set_params(&k, &s, sizeof s);
        snprintf(k.shape, sizeof k.shape, "n%d %ldx%d g%d", n, spatial, c, groups);
        add(silu ? "groupnorm_silu_forward" : "groupnorm_forward", k, offset, emu);
        add_betas(silu ? "groupnorm_silu_backward" : "groupnorm_backward", k, offset, emu);
    }
}

static KernelCase count(long n) {
    KernelCase k = {.count = n};
    snprintf(k.shape, sizeof k.shape, "%ld", n);
    return k;
}

static void elementwise(long n, int offset) {
    const int emu = n <= 10000;
    add("silu_forward", count(n), offset, emu);
    add_betas("silu_backward", count(n), offset, emu);
    add("add_forward", count(n), offset, emu);
    add_betas("accumulate", count(n), offset, emu);
    add("cast_to", count(n), offset, emu);
    add("cast_from", count(n), offset, emu);
    add("recon_loss_l1", count(n), offset, emu);
    add("recon_loss_mse", count(n), offset, emu);
    add("normal_fill", count(n), offset, emu);
    add("adamw", count(n), offset, emu);
    add("sumsq", count(n), offset, emu);
    add("sumsq_sharded", count(n), offset, emu);
}

/* padding (c_to > c_from: the first conv's input and weights), slicing (its weight gradient) and neither */
static void pad_channels(long rows, int c_from, int c_to, int offset, int emu) {
    KernelCase k = {.count = rows, .dims = {c_from, c_to}};
    snprintf(k.shape, sizeof k.shape, "%ld x c%d->%d", rows, c_from, c_to);
    add_betas("pad_channels_to", k, offset, emu);
    add_betas("pad_channels_from", k, offset, emu);
}

static void upsample(int n, int d, int h, int w, int c) {
    KernelCase k = {.dims = {n, d, h, w, c}};
    snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d", n, d, h, w, c);
    add("upsample2x_forward", k, 0, 1);
    add_betas("upsample2x_backward", k, 0, 1);
}

static void latent(int n, long cps, int emu) {
    KernelCase k = {0};
    const LatentShape s = {.n = n, .count_per_sample = cps, .logvar_min = -5, .logvar_max = 3};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d x%ld", n, cps);
    add("latent_forward", k, 0, emu);
    add("latent_backward", k, 0, emu);
}

/* every flip and rotation code on a cube, the even rotations on a box */
static void augment(int d, int h, int w, int c) {
    for (uint32_t code = 0; code < 32; code++) {
        if (h != w && ((code >> AUGMENT_ROT_SHIFT) & 1u)) continue;
        KernelCase k = {.dims = {d, h, w, c}, .count = code};
        snprintf(k.shape, sizeof k.shape, "%dx%dx%dx%d code %u", d, h, w, c, code);
        add("augment", k, 0, 1);
    }
}

/* ---- the ResNet family's ops (issue 27) ------------------------------------------------------------------------ */

/* every piece of BatchNorm; ranks > 1: the statistics summed over that many ranks of this batch (count =
 * ranks*n*spatial), as SyncBatchNorm gives them to stats(center), finalize and backward */
static void batchnorm(int n, long spatial, int c, int ranks, int offset, int emu) {
    KernelCase k = {.count = ranks > 1 ? (long)ranks * n * spatial : 0};
    const BatchNormShape s = {.n = n, .spatial = spatial, .c = c};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d %ldx%d ranks %d", n, spatial, c, ranks);
    add("batchnorm_stats", k, offset, emu);
    add("batchnorm_stats_centered", k, offset, emu);
    add("batchnorm_finalize", k, offset, emu);
    add("batchnorm_finalize_eval", k, offset, emu);
    add("batchnorm_forward", k, offset, emu);
    add("batchnorm_backward_reduce", k, offset, emu);
    add_betas("batchnorm_backward", k, offset, emu);
}

static void relu(long n, int offset, int emu) {
    add("relu_forward", count(n), offset, emu);
    add_betas("relu_backward", count(n), offset, emu);
}

static void maxpool(int n, int d, int h, int w, int c, int kk, int stride, int pad, int offset, int emu) {
    KernelCase k = {0};
    const MaxPoolShape s = maxpool_shape(n, d, h, w, c, kk, stride, pad);
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d k%d s%d p%d", n, d, h, w, c, kk, stride, pad);
    add("maxpool_forward", k, offset, emu);
    add_betas("maxpool_backward", k, offset, emu);
}

/* avgpool's case: dims {n, c}, count = spatial positions */
static void avgpool(int n, long spatial, int c, int offset, int emu) {
    KernelCase k = {.dims = {n, c}, .count = spatial};
    snprintf(k.shape, sizeof k.shape, "n%d %ldx%d", n, spatial, c);
    add("avgpool_forward", k, offset, emu);
    add_betas("avgpool_backward", k, offset, emu);
}

static void linear(int n, int in, int out, int offset, int emu) {
    KernelCase k = {0};
    const LinearShape s = {.n = n, .in = in, .out = out};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d %d->%d", n, in, out);
    add("linear_forward", k, offset, emu);
    add("linear_forward_nobias", k, offset, emu);
    add_betas("linear_backward_data", k, offset, emu);
    add_betas("linear_backward_filter", k, offset, emu);
}

static void dropout(int n, long per_sample, float p, int offset, int emu) {
    KernelCase k = {0};
    const DropoutShape s = {.n = n, .per_sample = per_sample, .p = p, .seed = 1234, .stream = 9};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d x%ld p%g", n, per_sample, (double)p);
    add("dropout_forward", k, offset, emu);
    add_betas("dropout_backward", k, offset, emu);
}

/* CE (with and without class weights) and BCE (with and without pos_weight) over n x k logits */
static void head_losses(int n, int kk, int emu) {
    KernelCase k = {0};
    const HeadLossShape s = {.n = n, .k = kk};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d k%d", n, kk);
    add("head_loss_ce", k, 0, emu);
    add("head_loss_ce_weighted", k, 0, emu);
    add("head_loss_bce", k, 0, emu);
    add("head_loss_bce_pos_weight", k, 0, emu);
}

/* Cox over n risk scores: ties and censoring, and every sample censored */
static void cox(int n, int emu) {
    KernelCase k = {0};
    const HeadLossShape s = {.kind = HEAD_LOSS_COX, .n = n, .k = 1};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d", n);
    add("head_loss_cox", k, 0, emu);
    add("head_loss_cox_censored", k, 0, emu);
}

static void resnet_ops(void) {
    batchnorm(3, 5 * 7 * 9, 12, 1, 0, 1);
    batchnorm(3, 5 * 7 * 9, 12, 3, 0, 1); /* the sums of three ranks */
    batchnorm(2, 60, 5, 1, 1, 1);
    batchnorm(2, 40, 258, 2, 0, 1);  /* more than 256 lanes, scalar */
    batchnorm(1, 30, 1040, 1, 0, 1); /* more than 256 vector lanes */
    batchnorm(2, 1, 7, 1, 0, 1);     /* one position per sample */
    batchnorm(1, 1, 3, 1, 0, 1);     /* one value per channel */
    batchnorm(2, 64000, 16, 1, 0, 0); /* many partial-sum blocks */
    relu(1001, 0, 1);
    relu(7000, 1, 1);
    relu(300001, 0, 0);
    maxpool(2, 7, 8, 9, 3, 3, 2, 1, 0, 1); /* MONAI's: k3 s2 p1, odd sizes */
    maxpool(2, 6, 6, 6, 4, 3, 2, 1, 1, 1);
    maxpool(1, 6, 5, 7, 5, 2, 2, 0, 0, 1);
    maxpool(2, 5, 5, 5, 4, 3, 1, 1, 0, 1); /* overlapping windows: several outputs per input */
    maxpool(1, 4, 6, 5, 2, 1, 1, 0, 0, 1);
    maxpool(1, 3, 4, 5, 3, 4, 3, 2, 0, 1); /* an even window with pad k/2 */
    maxpool(1, 1, 9, 8, 6, 3, 2, 1, 0, 1); /* depth 1: the window's padding along d */
    maxpool(4, 16, 16, 16, 64, 3, 2, 1, 0, 0);
    avgpool(3, 343, 12, 0, 1);
    avgpool(2, 1000, 5, 1, 1);
    avgpool(4, 64, 300, 0, 1); /* more than 256 channels */
    avgpool(2, 1, 7, 0, 1);
    avgpool(1, 5000, 3, 0, 1); /* many partial-sum blocks */
    avgpool(8, 8 * 8 * 8, 2048, 0, 0);
    linear(7, 33, 5, 0, 1);
    linear(3, 512, 10, 0, 1);
    linear(33, 2048, 2, 0, 1);
    linear(5, 17, 1, 0, 1); /* a risk score */
    linear(64, 130, 40, 1, 1);
    linear(100, 2048, 400, 0, 0);
    dropout(3, 1001, 0.3f, 0, 1);
    dropout(2, 4096, 0.5f, 1, 1);
    dropout(2, 1000, 0.0f, 0, 1); /* the identity */
    dropout(2, 1000, 1.0f, 0, 1); /* nothing kept */
    dropout(8, 40000, 0.2f, 0, 0);
    head_losses(7, 5, 1);
    head_losses(3, 1000, 1); /* more classes than threads in a block */
    head_losses(1, 1, 1);
    head_losses(40, 3, 1);
    head_losses(300, 14, 0);
    cox(1, 1);
    cox(2, 1);
    cox(37, 1);
    cox(300, 1);
    cox(2000, 0);
}

static void build(void) {
    resnet_ops();
    conv(3, 5, 7, 9, 3, 5, 3, 1, 1);
    conv(3, 5, 7, 9, 12, 20, 3, 2, 1);
    conv(3, 6, 5, 8, 5, 3, 3, 2, 1);
    conv(2, 5, 6, 7, 12, 5, 1, 1, 0);
    conv(2, 5, 6, 7, 12, 12, 1, 2, 0);
    conv(2, 6, 5, 7, 1, 8, 3, 1, 1); /* the first conv: a single input channel */
    conv(2, 6, 5, 7, 8, 1, 3, 1, 1); /* the last conv: a single output channel */
    /* per-axis shapes: MONAI's ResNet stem (k 7, stride 1x2x2, pad 3) on a small input, with 1 and 3 channels in; a
     * 1x3x3 conv (pad 0x1x1) on depth-1 volumes, stride 1 and 2; strides and kernels differing on every axis */
    conv_3d(2, 5, 9, 8, 1, 8, (const int[3]){7, 7, 7}, (const int[3]){1, 2, 2}, (const int[3]){3, 3, 3});
    conv_3d(1, 4, 7, 6, 3, 5, (const int[3]){7, 7, 7}, (const int[3]){1, 2, 2}, (const int[3]){3, 3, 3});
    conv_3d(3, 1, 7, 9, 6, 5, (const int[3]){1, 3, 3}, (const int[3]){1, 1, 1}, (const int[3]){0, 1, 1});
    conv_3d(2, 1, 8, 7, 5, 12, (const int[3]){1, 3, 3}, (const int[3]){1, 2, 2}, (const int[3]){0, 1, 1});
    conv_3d(2, 6, 5, 7, 4, 3, (const int[3]){3, 1, 2}, (const int[3]){2, 1, 3}, (const int[3]){1, 0, 1});
    groupnorm(3, 5 * 7 * 9, 12, 4, 0, 1);
    groupnorm(3, 5 * 7 * 9, 20, 4, 0, 1);
    groupnorm(2, 5 * 7 * 9, 5, 1, 0, 1);
    groupnorm(2, 60, 12, 12, 0, 1);
    groupnorm(2, 60, 12, 1, 1, 1);
    groupnorm(2, 50, 258, 2, 0, 1); /* more than 256 vector lanes */
    groupnorm(1, 30, 1040, 8, 0, 1);
    groupnorm(2, 40 * 40 * 40, 16, 4, 0, 0); /* many partial-sum blocks per sample */
    elementwise(1001, 0);
    elementwise(7000, 0);
    elementwise(7000, 1);
    elementwise(300001, 0);
    pad_channels(1001, 1, 8, 0, 1);
    pad_channels(1001, 8, 1, 0, 1);
    pad_channels(777, 3, 16, 1, 1);
    pad_channels(513, 12, 5, 1, 1);
    pad_channels(300, 4, 4, 0, 1);
    pad_channels(216 * 32, 8, 1, 0, 1); /* conv_in's weight gradient at 32 output channels */
    pad_channels(300001, 1, 8, 0, 0);
    upsample(3, 5, 7, 9, 3);
    upsample(2, 3, 4, 5, 12);
    upsample(1, 2, 3, 2, 20);
    latent(3, 35, 1);
    latent(2, 4096 * 5 + 7, 1);
    latent(1500, 3, 2); /* more samples than the reduction's 1024 blocks */
    augment(5, 6, 6, 1);
    augment(4, 5, 7, 3);
    augment(3, 8, 8, 2);
}

const OpTestCase *op_test_cases(int *n) {
    if (!n_cases) build();
    *n = n_cases;
    return cases;
}

void op_test_case_name(const OpTestCase *c, DType dt, char *out, size_t len) {
    snprintf(out, len, "%s %s [%s] beta %g offset %d", c->op, dtype_name(dt), c->k.shape, (double)c->k.beta, c->offset);
}

int op_test_case_check(const OpTestCase *c, int index, DType dt, const Backend *be, char *why, size_t why_len) {
    KernelCase k = c->k;
    k.dtype = dt;
    kernel_case_setup(&k, c->op, be);
    KernelCheck r;
    kernel_check_case(be, &k, c->offset, 0x5EEDu + (unsigned)index, kernel_check_tolerance(&k, 0), 0, &r);
    if (r.ok) return 1;
    char name[200];
    op_test_case_name(c, dt, name, sizeof name);
    snprintf(why, why_len, "%s on %s: error %.3g > %.3g: %s", name, be->name, r.err, r.tol, r.detail);
    return 0;
}

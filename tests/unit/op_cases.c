/* op_cases.c: the op tests' cases (see op_cases.h). */
#include "op_cases.h"

#include <stdio.h>
#include <string.h>

#include "adaln/adaln.h"
#include "attention/attention.h"
#include "augment/augment.h"
#include "batchnorm/batchnorm.h"
#include "conv3d/conv3d.h"
#include "diffusion/diffusion.h"
#include "drr/drr.h"
#include "dropout/dropout.h"
#include "ema/ema.h"
#include "gelu/gelu.h"
#include "gemm/gemm.h"
#include "groupnorm/groupnorm.h"
#include "head_loss/head_loss.h"
#include "latent/latent.h"
#include "layernorm/layernorm.h"
#include "linear/linear.h"
#include "maxpool/maxpool.h"
#include "pool_window/pool_window.h"
#include "upconv_phase/upconv_phase.h"
#include "patch/patch.h"
#include "softmax/softmax.h"
#include "timestep/timestep.h"
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

/* a slice of channels into another tensor's slice: concatenation (a at 0, b after it) and its gradient's split */
static void copy_channels(long rows, int c_src, int src_off, int c_dst, int dst_off, int n, int offset, int emu) {
    KernelCase k = {.count = rows, .dims = {c_src, src_off, c_dst, dst_off, n}};
    snprintf(k.shape, sizeof k.shape, "%ld x c%d[%d:%d] -> c%d[%d:]", rows, c_src, src_off, src_off + n, c_dst, dst_off);
    add_betas("copy_channels", k, offset, emu);
}

static void upsample(int n, int d, int h, int w, int c) {
    KernelCase k = {.dims = {n, d, h, w, c}};
    snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d", n, d, h, w, c);
    add("upsample2x_forward", k, 0, 1);
    add_betas("upsample2x_backward", k, 0, 1);
}

/* trilinear resampling: dims are the input's n, d, h, w, c, params its output grid (resample_spec.c) */
static void resample(int n, int d, int h, int w, int c, int od, int oh, int ow, int offset) {
    KernelCase k = {.dims = {n, d, h, w, c}};
    kernel_case_set_params(&k, (const int[3]){od, oh, ow}, 3 * sizeof(int));
    snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d -> %dx%dx%d c%d", n, d, h, w, od, oh, ow, c);
    add("resample_trilinear", k, offset, 1);
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
 * ranks*n*spatial), as SyncBatchNorm gives them to stats(center), finalize and backward; ldx > c: x and dx the first
 * c channels of rows ldx apart (a dense layer's norm over its block's buffer) */
static void batchnorm_strided(int n, long spatial, int c, long ldx, int ranks, int offset, int emu) {
    KernelCase k = {.count = ranks > 1 ? (long)ranks * n * spatial : 0};
    const BatchNormShape s = {.n = n, .spatial = spatial, .c = c, .ldx = ldx};
    kernel_case_set_params(&k, &s, sizeof s);
    if (ldx == c) snprintf(k.shape, sizeof k.shape, "n%d %ldx%d ranks %d", n, spatial, c, ranks);
    else snprintf(k.shape, sizeof k.shape, "n%d %ldx%d ranks %d ldx %ld", n, spatial, c, ranks, ldx);
    add("batchnorm_stats", k, offset, emu);
    add("batchnorm_stats_centered", k, offset, emu);
    add("batchnorm_finalize", k, offset, emu);
    add("batchnorm_finalize_eval", k, offset, emu);
    add("batchnorm_forward", k, offset, emu);
    add("batchnorm_backward_reduce", k, offset, emu);
    add_betas("batchnorm_backward", k, offset, emu);
    add("batchnorm_forward_relu", k, offset, emu); /* train.fuse's BatchNorm+ReLU */
    add("batchnorm_backward_reduce_relu", k, offset, emu);
    add_betas("batchnorm_backward_relu", k, offset, emu);
}
static void batchnorm(int n, long spatial, int c, int ranks, int offset, int emu) {
    batchnorm_strided(n, spatial, c, c, ranks, offset, emu);
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

/* DenseNet's transitions: 2x2 windows on films (depth 1), 2x2x2 on volumes, odd sizes leaving a floor row */
static void pool_window(int n, int d, int h, int w, int c, int kd, int kh, int kw, int offset, int emu) {
    KernelCase k = {0};
    const PoolWindowShape s = pool_window_shape(n, d, h, w, c, (int[]){kd, kh, kw});
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d k%dx%dx%d", n, d, h, w, c, kd, kh, kw);
    add("pool_window_forward", k, offset, emu);
    add_betas("pool_window_backward", k, offset, emu);
}

/* the autoencoder decoder's nearest x2 + 3x3x3 convolution as one phase convolution: its weights, their gradient's
 * fold, and the output's shuffle and its transpose */
static void upconv_phase(int n, int d, int h, int w, int c_in, int c_out, int offset, int emu) {
    KernelCase k = {0};
    const UpconvPhaseShape s = {.n = n, .d = d, .h = h, .w = w, .c_in = c_in, .c_out = c_out, .dtype = DT_F32};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d->%d", n, d, h, w, c_in, c_out);
    add("upconv_phase_weights", k, offset, emu);
    add_betas("upconv_phase_fold", k, offset, emu);
    add("upconv_phase_shuffle", k, offset, emu);
    add("upconv_phase_unshuffle", k, offset, emu);
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
    pool_window(2, 1, 8, 6, 5, 1, 2, 2, 0, 1);    /* a film's transition */
    pool_window(1, 1, 9, 7, 3, 1, 2, 2, 1, 1);    /* odd sides: the last row and column in no window */
    pool_window(2, 4, 6, 5, 4, 2, 2, 2, 0, 1);    /* a volume's */
    pool_window(2, 1, 80, 80, 128, 1, 2, 2, 0, 0);
    upconv_phase(2, 3, 4, 5, 3, 2, 0, 1);     /* odd sides, every phase's edge planes */
    upconv_phase(1, 1, 2, 2, 5, 7, 1, 1);     /* one voxel deep */
    upconv_phase(2, 4, 4, 4, 16, 16, 0, 1);
    upconv_phase(2, 16, 16, 16, 32, 32, 0, 0); /* the default config's decoder.up.1.upsample */
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

/* ---- the transformer family's ops (issue 21) -------------------------------------------------------------------- */

static void gelu(long n, int offset, int emu) {
    for (int kind = 0; kind < 2; kind++) {
        KernelCase k = {0};
        const GeluShape s = {.count = n, .kind = kind};
        kernel_case_set_params(&k, &s, sizeof s);
        snprintf(k.shape, sizeof k.shape, "%ld %s", n, kind == GELU_TANH ? "tanh" : "erf");
        add("gelu_forward", k, offset, emu);
        add_betas("gelu_backward", k, offset, emu);
    }
}

static void softmax(long rows, int cols, int offset, int emu) {
    KernelCase k = {0};
    const SoftmaxShape s = {.rows = rows, .cols = cols};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "%ld x %d", rows, cols);
    add("softmax_forward", k, offset, emu);
    add_betas("softmax_backward", k, offset, emu);
}

static void layernorm(long rows, int c, int offset, int emu) {
    for (int affine = 0; affine < 2; affine++) {
        KernelCase k = {0};
        const LayerNormShape s = {.rows = rows, .c = c, .eps = 1e-6f, .affine = affine};
        kernel_case_set_params(&k, &s, sizeof s);
        snprintf(k.shape, sizeof k.shape, "%ld x %d%s", rows, c, affine ? " affine" : "");
        add("layernorm_forward", k, offset, emu);
        add_betas("layernorm_backward", k, offset, emu);
    }
}

/* mod_stride c: separate [n][c] vectors; 6c: inside adaLN's packed [n][6c] */
static void adaln(int n, long tokens, int c, long mod_stride, int offset, int emu) {
    KernelCase k = {0};
    const AdaLNShape s = {.n = n, .tokens = tokens, .c = c, .mod_stride = mod_stride};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d %ldx%d stride %ld", n, tokens, c, mod_stride);
    add("adaln_modulate", k, offset, emu);
    add_betas("adaln_modulate_backward", k, offset, emu);
    add("adaln_gate", k, offset, emu);
    add_betas("adaln_gate_backward", k, offset, emu);
}

static void timestep(int n, int dim, int emu) {
    KernelCase k = {0};
    const TimestepShape s = {.n = n, .dim = dim, .max_period = 10000.0f};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d dim %d", n, dim);
    add("timestep_embed", k, 0, emu);
}

/* one product: C [m][n] = alpha op(A) op(B), batch entries packed (or B shared: stride 0 when shared_b) */
static GemmShape gemm_shape(int batch, int m, int n, int k, int ta, int tb, int shared_b, float alpha, int c_f32) {
    return (GemmShape){.batch = batch, .m = m, .n = n, .k = k, .trans_a = ta, .trans_b = tb,
                       .stride_a = (long)m * k, .stride_b = shared_b ? 0 : (long)k * n, .stride_c = (long)m * n,
                       .alpha = alpha, .c_f32 = c_f32};
}

static void gemm_case(const char *op, GemmShape s, int bias, int offset, int emu, int betas) {
    KernelCase k = {.dims = {bias}};
    kernel_case_set_params(&k, &s, sizeof s);
    static const char *const epi[] = {"", " gelu", " gelu-erf", " dgelu", " dgelu-erf"};
    snprintf(k.shape, sizeof k.shape, "b%d %dx%dx%d %c%c%s%s%s%s", s.batch, s.m, s.n, s.k, s.trans_a ? 'T' : 'N',
             s.trans_b ? 'T' : 'N', s.stride_b == 0 && s.batch > 1 && s.k > 0 ? " shared-B" : "", bias ? " bias" : "",
             s.c_f32 ? " f32-C" : "", epi[s.epilogue]);
    if (betas) add_betas(op, k, offset, emu);
    else add(op, k, offset, emu);
}

/* a Linear over rows (x W^T + b), its dX (dY W) and dW (dY^T X into float32), and their epilogue forms */
static void gemm_linear(int rows, int in, int out, int offset, int emu) {
    gemm_case("gemm", gemm_shape(1, rows, out, in, 0, 1, 0, 1.0f, 0), 1, offset, emu, 1);
    gemm_case("gemm", gemm_shape(1, rows, in, out, 0, 0, 0, 1.0f, 0), 0, offset, emu, 1);
    gemm_case("gemm", gemm_shape(1, out, in, rows, 1, 0, 0, 1.0f, 1), 0, offset, emu, 1);
    for (int e = GEMM_EPI_GELU_TANH; e <= GEMM_EPI_GELU_ERF; e++) {
        GemmShape g = gemm_shape(1, rows, out, in, 0, 1, 0, 1.0f, 0);
        g.epilogue = e;
        gemm_case("gemm_gelu", g, 1, offset, emu, 0);
        GemmShape d = gemm_shape(1, rows, in, out, 0, 0, 0, 1.0f, 0); /* dH = dY W2, times gelu'(pre) */
        d.epilogue = e + 2;
        gemm_case("gemm_dgelu", d, 0, offset, emu, 0);
    }
    KernelCase k = {0};
    const GemmShape bg = {.m = rows, .n = out};
    kernel_case_set_params(&k, &bg, sizeof bg);
    snprintf(k.shape, sizeof k.shape, "%d x %d", rows, out);
    add_betas("gemm_bias_grad", k, offset, emu);
}

static void vit_gemm(void) {
    gemm_linear(37, 33, 20, 0, 1);
    gemm_linear(5, 7, 1, 0, 1);      /* one output */
    gemm_linear(70, 24, 40, 1, 1);   /* misaligned, more than one tile of rows */
    gemm_linear(130, 96, 136, 0, 1); /* several tiles both ways, multiples of 8 (cuBLASLt's aux) */
    gemm_linear(300, 40, 530, 1, 1); /* the CPU's jobs: 2 blocks of rows (160 + 140) x 2 panels of columns (272 + 258) */
    gemm_linear(600, 16, 24, 0, 1);  /* 3 blocks of rows made 4 (3 x 160 + 120); dW's 24 x 600: 2 panels (304 + 296) */
    gemm_linear(2048, 384, 1536, 0, 0);
    gemm_case("gemm", gemm_shape(4, 29, 31, 16, 0, 1, 0, 0.25f, 0), 0, 0, 1, 1); /* scores-like: batched, scaled */
    gemm_case("gemm", gemm_shape(3, 17, 9, 40, 1, 1, 0, 1.0f, 0), 1, 0, 1, 1);  /* both transposed */
    gemm_case("gemm", gemm_shape(3, 33, 12, 20, 0, 1, 1, 1.0f, 0), 1, 1, 1, 1); /* one weight for every batch entry */
    gemm_case("gemm", gemm_shape(2, 5, 7, 0, 0, 0, 0, 1.0f, 0), 1, 0, 1, 1);   /* k 0: bias (and beta C) only */
    GemmShape per_sample = gemm_shape(2, 3 * 27, 20, 33, 0, 1, 1, 1.0f, 0); /* a Linear over 3 samples' 27 tokens: */
    per_sample.sample_rows = 27;                                             /* the CPU's jobs cut per sample */
    gemm_case("gemm", per_sample, 1, 1, 1, 1);
    per_sample.sample_rows = 1; /* rows that are samples (adaLN's conditioning): a job per row */
    gemm_case("gemm", per_sample, 1, 0, 1, 1);
    gemm_case("gemm", gemm_shape(96, 64, 64, 64, 0, 1, 0, 0.125f, 0), 0, 0, 2, 0);
    KernelCase k = {0};
    const GemmShape bg = {.m = 5000, .n = 16}; /* many partial-sum blocks */
    kernel_case_set_params(&k, &bg, sizeof bg);
    snprintf(k.shape, sizeof k.shape, "5000 x 16");
    add_betas("gemm_bias_grad", k, 0, 1);
    /* more columns than the CUDA reduction scratch holds partials of (32 MiB / 8 = 4194304): pos_embed's gradient,
     * [tokens*C] over the batch's rows, is 32768*384 = 12582912 columns at 256^3 (the CUDA op refused it) */
    KernelCase w = {0};
    const GemmShape wide = {.m = 3, .n = (32 << 20) / 8 + 5};
    kernel_case_set_params(&w, &wide, sizeof wide);
    snprintf(w.shape, sizeof w.shape, "%d x %d", wide.m, wide.n);
    add_betas("gemm_bias_grad", w, 0, 2);
}

static void attention(AttentionShape s, const char *what, int offset, int emu) {
    KernelCase k = {0};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "b%d h%d %dx%d d%d%s", s.batch, s.heads, s.tq, s.tk, s.d, what);
    add("attention_forward", k, offset, emu);
    add_betas("attention_backward", k, offset, emu);
    /* not under the host emulation: CUDA's step is its forward kernel then its backward kernel, nothing saved between
     * (attention_cuda.cu), the two rows above; emulating it again took 45 of the emulation's 214 s */
    add_betas("attention_step", k, offset, 0);
}

/* rows of a packed [tokens][3*heads*d] QKV projection (o and dO packed [tokens][heads*d]) */
static AttentionShape packed_qkv(AttentionShape s) {
    s.ld_q = s.ld_k = s.ld_v = 3 * s.heads * s.d;
    return s;
}

static void vit_attention(void) {
    attention(attention_shape(2, 3, 37, 37, 32, DT_F32), "", 0, 1);  /* odd tokens, d 32: two lanes a row */
    attention(attention_shape(1, 2, 70, 70, 64, DT_F32), "", 1, 1);  /* d 64, misaligned, several tiles */
    attention(attention_shape(1, 1, 1, 1, 16, DT_F32), "", 0, 1);    /* one query, one key: o = v */
    attention(attention_shape(2, 2, 33, 5, 64, DT_F32), " cross", 0, 1);  /* fewer keys than a tile */
    attention(attention_shape(1, 2, 7, 100, 48, DT_F32), " cross", 0, 1); /* more keys; d 48 leaves lanes idle */
    attention(attention_shape(1, 1, 0, 9, 32, DT_F32), " no queries", 0, 1); /* dk dv 0 (or kept, beta 1) */
    attention(attention_shape(1, 2, 45, 45, 128, DT_F32), "", 0, 1); /* eight lanes a row */
    attention(attention_shape(1, 1, 40, 40, 80, DT_F32), "", 0, 1);
    AttentionShape peaked = attention_shape(1, 2, 50, 77, 32, DT_F32);
    peaked.scale = 1.0f; /* scores spread over tens of units: the online max is tested */
    attention(peaked, " scale 1", 0, 1);
    attention(packed_qkv(attention_shape(2, 3, 29, 29, 32, DT_F32)), " packed qkv", 1, 1);
    attention(attention_shape(1, 6, 1000, 1000, 64, DT_F32), "", 0, 0);
    /* past ATT_FWD_BK keys: the CPU recomputes P (nothing saved), several key tiles per query block. Two heads, not a
     * model's batch 2 x 6: the float64 reference of attention_step is the full forward of every row, and at 2 x 6
     * it took 56 of test_backend_ops' 74 s (run twice in CI, by the unit tests and the ISA sweep); the (b, h) jobs
     * are covered by the small cases above */
    attention(attention_shape(1, 2, 4096, 4096, 64, DT_F32), "", 0, 0);
}

static void patch(int n, int d, int h, int w, int c, int pd, int ph, int pw, int offset, int emu) {
    KernelCase k = {0};
    const PatchShape s = {.n = n, .d = d, .h = h, .w = w, .c = c, .p = {pd, ph, pw}};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d p%dx%dx%d", n, d, h, w, c, pd, ph, pw);
    add_betas("patch_to_tokens", k, offset, emu);
    add_betas("patch_to_volume", k, offset, emu);
}

static void vit_patch(void) {
    patch(2, 4, 6, 8, 3, 2, 2, 2, 0, 1);
    patch(1, 6, 4, 8, 5, 3, 1, 4, 1, 1); /* anisotropic patches, misaligned */
    patch(2, 3, 5, 7, 2, 1, 1, 1, 0, 1); /* patch 1: tokens are the voxels */
    patch(3, 1, 8, 12, 1, 1, 4, 4, 0, 1); /* a 2-D view: d = 1, one channel */
    patch(1, 4, 4, 4, 2, 4, 4, 4, 0, 1); /* one token: the whole volume */
    patch(2, 64, 64, 64, 1, 8, 8, 8, 0, 0);
}

static void vit_ops(void) {
    vit_gemm();
    vit_attention();
    vit_patch();
    gelu(1001, 0, 1);
    gelu(4096, 0, 1);
    gelu(7000, 1, 1);
    gelu(300001, 0, 0);
    softmax(7, 5, 0, 1);
    softmax(3, 1, 0, 1);   /* one column: y = 1, dx = 0 */
    softmax(33, 300, 0, 1); /* more columns than threads */
    softmax(5, 1000, 1, 1);
    softmax(4096, 512, 0, 0);
    layernorm(7, 5, 0, 1);
    layernorm(3, 1, 0, 1);   /* one channel: var 0 */
    layernorm(33, 384, 0, 1);
    layernorm(9, 1030, 1, 1); /* more than 1024 channels, misaligned */
    /* many partial-sum blocks: on CUDA 38 of 32 rows, the last half full; on the CPU 10 chunks of 128, the last
     * short (5000 rows took 61 s of the host emulation's 214: it starts a std::thread per CUDA thread) */
    layernorm(1200, 16, 0, 1);
    layernorm(8192, 384, 0, 0);
    adaln(2, 37, 5, 5, 0, 1);
    adaln(3, 100, 12, 72, 0, 1); /* inside a packed [n][6c] */
    adaln(1, 1, 3, 3, 0, 1);
    adaln(2, 300, 300, 1800, 1, 1); /* more channels than threads, misaligned */
    adaln(1, 5000, 8, 8, 0, 1);     /* many partial-sum blocks */
    adaln(4, 4096, 384, 2304, 0, 0);
    timestep(5, 256, 1);
    timestep(3, 7, 1); /* odd width: a zero column */
    timestep(1, 2, 1);
    timestep(64, 384, 1);
}

/* ---- the diffusion model's ops (issue 21): DRRs, the diffusion pieces, the weights' average -------------------- */

/* attenuation scaled so that the rays' integrals are about 1 (mu_scale * spacing * extent * mean x ~ 1) */
static void drr(int n, int d, int h, int w, int view, int img, int offset, int emu) {
    KernelCase k = {0};
    const int extent = view == 0 ? h : w;
    const DrrShape s = {.n = n, .d = d, .h = h, .w = w, .view = view, .img = img, .mu_scale = 0.5f,
                        .spacing = 4.0f / (float)extent};
    kernel_case_set_params(&k, &s, sizeof s);
    snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d view %d img %d", n, d, h, w, view, img);
    add("drr_forward", k, offset, emu);
    add_betas("drr_backward", k, offset, emu);
    add("drr_backproject", k, offset, emu);
}

static void diffusion_scaled(int n, long count, float data_scale, int offset, int emu) {
    for (int param = DIFFUSION_V; param <= DIFFUSION_EPS; param++) {
        KernelCase k = {0};
        const DiffusionShape s = {.n = n, .count = count, .param = param, .data_scale = data_scale};
        kernel_case_set_params(&k, &s, sizeof s);
        snprintf(k.shape, sizeof k.shape, "n%d x%ld %s scale %g", n, count, param == DIFFUSION_V ? "v" : "eps",
                 data_scale);
        add("diffusion_q_sample", k, offset, emu);
        add("diffusion_predict_x0", k, offset, emu);
        add_betas("diffusion_predict_x0_backward", k, offset, emu);
        add("diffusion_loss", k, offset, emu);
        add("diffusion_loss_unweighted", k, offset, emu);
        add("diffusion_ddim_step", k, offset, emu);
    }
}
static void diffusion(int n, long count, int offset, int emu) { diffusion_scaled(n, count, 0.0f, offset, emu); }

static void ema(long n, int offset, int emu) {
    add("ema_update", count(n), offset, emu);
    add("ema_update_flag", count(n), offset, emu);
    add("ema_update_skipped", count(n), offset, emu);
}

static void diffusion_ops(void) {
    drr(2, 5, 6, 7, 0, 9, 0, 1);    /* odd sizes, upsampled */
    drr(2, 5, 6, 7, 1, 9, 0, 1);    /* the lateral view */
    drr(1, 8, 8, 8, 0, 8, 0, 1);    /* same size: the resampling is the identity */
    drr(1, 12, 10, 9, 1, 4, 1, 1);  /* downsampled, misaligned */
    drr(3, 4, 4, 4, 0, 1, 0, 1);    /* a one-pixel image */
    drr(1, 1, 3, 5, 1, 6, 0, 1);    /* depth 1: every row reads the same source row */
    drr(2, 16, 12, 20, 0, 64, 0, 1); /* 4x up: many outputs gather onto one source */
    drr(2, 64, 64, 64, 1, 128, 0, 0);
    diffusion(3, 1001, 0, 1);
    diffusion(2, 4096, 1, 1);
    diffusion(1, 1, 0, 1);
    diffusion(5, 7, 0, 1);
    diffusion_scaled(3, 1001, 6.5f, 0, 1); /* diffusion.data_scale */
    diffusion(1500, 3, 0, 2); /* more elements than one reduction block's share, many samples */
    diffusion(4, 300001, 0, 0);
    ema(1001, 0, 1);
    ema(7000, 1, 1);
    ema(1, 0, 1);
    ema(300001, 0, 0);
}

static void build(void) {
    resnet_ops();
    vit_ops();
    diffusion_ops();
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
    copy_channels(1001, 40, 0, 72, 0, 40, 0, 1);   /* a dense layer's input into the concatenation */
    copy_channels(1001, 32, 0, 72, 40, 32, 1, 1);  /* its new features after it */
    copy_channels(777, 72, 40, 32, 0, 32, 0, 1);   /* the gradient's split */
    copy_channels(200003, 64, 0, 96, 0, 64, 0, 0);
    upsample(3, 5, 7, 9, 3);
    upsample(2, 3, 4, 5, 12);
    upsample(1, 2, 3, 2, 20);
    resample(2, 4, 6, 8, 3, 6, 4, 3, 0);  /* non-integer ratios on every axis: 4->6 up, 6->4 and 8->3 down */
    resample(2, 2, 3, 4, 1, 4, 6, 8, 1);  /* 2x up (the stages' position tables), one channel, misaligned */
    resample(1, 8, 4, 6, 3, 4, 2, 3, 0);  /* 2x down: every output between two source cells */
    resample(2, 5, 7, 3, 1, 5, 7, 3, 0);  /* the same grid: the identity */
    resample(1, 1, 5, 9, 3, 3, 1, 4, 1);  /* one plane in D read by every output, H down to 1, misaligned */
    resample(1, 3, 3, 3, 5, 16, 11, 7, 0); /* several outputs per source cell; c 5 */
    latent(3, 35, 1);
    latent(2, 4096 * 5 + 7, 1);
    latent(1500, 3, 2); /* more samples than the reduction's 1024 blocks */
    augment(5, 6, 6, 1);
    augment(4, 5, 7, 3);
    augment(3, 8, 8, 2);
    /* last, so that the cases before keep their seeds (each case's inputs are drawn from its index) */
    batchnorm_strided(2, 45, 24, 40, 1, 0, 1); /* a dense layer's prefix of its block's buffer: vectors */
    batchnorm_strided(2, 45, 12, 40, 2, 1, 1); /* offset: scalar */
    batchnorm_strided(1, 33, 5, 7, 1, 0, 1);   /* odd channels and stride: scalar */
}

const OpTestCase *op_test_cases(int *n) {
    if (!n_cases) build();
    *n = n_cases;
    return cases;
}

void op_test_case_name(const OpTestCase *c, DType dt, char *out, size_t len) {
    snprintf(out, len, "%s %s [%s] beta %g offset %d", c->op, dtype_name(dt), c->k.shape, (double)c->k.beta, c->offset);
}

int op_test_case_check_math(const OpTestCase *c, int index, DType dt, int bf16_math, const Backend *be, double *err,
                            char *why, size_t why_len) {
    KernelCase k = c->k;
    k.dtype = dt;
    k.bf16_math = bf16_math;
    kernel_case_setup(&k, c->op, be);
    KernelCheck r;
    kernel_check_case(be, &k, c->offset, 0x5EEDu + (unsigned)index, kernel_check_tolerance(&k, 0), 0, &r);
    if (err) *err = r.err;
    if (r.ok) return 1;
    char name[200];
    op_test_case_name(c, dt, name, sizeof name);
    snprintf(why, why_len, "%s%s on %s: error %.3g > %.3g: %s", name, bf16_math ? " bf16 math" : "", be->name, r.err,
             r.tol, r.detail);
    return 0;
}

int op_test_case_check(const OpTestCase *c, int index, DType dt, const Backend *be, char *why, size_t why_len) {
    return op_test_case_check_math(c, index, dt, 0, be, NULL, why, why_len);
}

/* kernel_cases.c: the cases a model calls the op table with (see kernel_cases.h): one per distinct (op, shape) of
 * its nodes, plus the loss, AdamW and sumsq over the flat parameter buffer. */
#include "bench/kernel_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "conv3d/conv3d.h"
#include "latent/latent.h"
#include "batchnorm/batchnorm.h"
#include "dropout/dropout.h"
#include "head_loss/head_loss.h"
#include "linear/linear.h"
#include "maxpool/maxpool.h"
#include "attention/attention.h"
#include "gelu/gelu.h"
#include "gemm/gemm.h"
#include "layernorm/layernorm.h"
#include "patch/patch.h"
#include "adaln/adaln.h"
#include "diffusion/diffusion.h"
#include "drr/drr.h"
#include "timestep/timestep.h"

/* ---- the cases of a model --------------------------------------------------------------------------------- */

typedef struct {
    KernelCase *v;
    int n, cap;
    const Backend *be;
} CaseList;

static void add_case(CaseList *l, KernelCase k, const char *op) {
    k.op = kernel_op_find(op);
    VX_CHECK(k.op >= 0, "bench kernels: no op named %s in the table", op);
    for (int i = 0; i < l->n; i++)
        if (l->v[i].op == k.op && strcmp(l->v[i].shape, k.shape) == 0) return;
    kernel_case_setup(&k, op, l->be);
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
        VX_CHECK(l->v != NULL, "out of memory listing kernel cases");
    }
    l->v[l->n++] = k;
}

/* stable insertion sort by op: one op's shapes together, in the order they were added */
static void sort_by_op(CaseList *l) {
    for (int i = 1; i < l->n; i++)
        for (int j = i; j > 0 && l->v[j - 1].op > l->v[j].op; j--) {
            const KernelCase t = l->v[j];
            l->v[j] = l->v[j - 1], l->v[j - 1] = t;
        }
}

static KernelCase count_case(long count, DType dt) {
    KernelCase k = {.count = count, .dtype = dt};
    snprintf(k.shape, sizeof k.shape, "%ld", count);
    return k;
}

/* rows of c_from channels to c_to (pad_channels_*) */
static KernelCase pad_case(long rows, int c_from, int c_to, DType dt) {
    KernelCase k = {.count = rows, .dims = {c_from, c_to}, .dtype = dt};
    snprintf(k.shape, sizeof k.shape, "%ld x c%d->%d", rows, c_from, c_to);
    return k;
}

/* a product of gemm.h, with bias (dims[0]) and beta */
static KernelCase gemm_case(GemmShape g, int bias, float beta) {
    KernelCase k = {.dims = {bias}, .dtype = g.dtype, .beta = beta};
    kernel_case_set_params(&k, &g, sizeof g);
    snprintf(k.shape, sizeof k.shape, "%dx%dx%d %c%c%s%s", g.m, g.n, g.k, g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N',
             bias ? " bias" : "", g.c_f32 ? " f32-C" : "");
    return k;
}

/* vit3d's nodes: a Linear over rows (forward, GELU's gradient, dW, db, dx), LayerNorm, attention, the positions'
 * add and their gradient, un-patchify */
static void vit_cases(CaseList *l, const Model *m, const Node *nd, const Tensor *tx) {
    const DType dt = tx->dtype;
    KernelCase k = {.dtype = dt};
    switch (nd->kind) {
    case OP_LAYERNORM:
        kernel_case_set_params(&k, &nd->ln, sizeof nd->ln);
        snprintf(k.shape, sizeof k.shape, "%ldx%d", nd->ln.rows, nd->ln.c);
        add_case(l, k, "layernorm_forward");
        add_case(l, k, "layernorm_backward");
        break;
    case OP_GEMM: {
        const GemmShape f = nd->gemm;
        add_case(l, gemm_case(f, 1, 0.0f), f.epilogue != GEMM_EPI_NONE ? "gemm_gelu" : "gemm");
        if (f.epilogue != GEMM_EPI_NONE) {
            const GeluShape g = {.count = (long)f.m * f.n, .kind = GELU_ERF, .dtype = dt};
            kernel_case_set_params(&k, &g, sizeof g);
            snprintf(k.shape, sizeof k.shape, "%ld erf", g.count);
            add_case(l, k, "gelu_backward");
        }
        const GemmShape dw = {.batch = 1, .m = f.n, .n = f.k, .k = f.m, .trans_a = 1, .stride_a = (long)f.m * f.n,
                              .stride_b = (long)f.m * f.k, .stride_c = (long)f.n * f.k, .alpha = 1.0f, .c_f32 = 1,
                              .dtype = dt, .bf16_math = f.bf16_math};
        add_case(l, gemm_case(dw, 0, 1.0f), "gemm");
        const GemmShape bg = {.m = f.m, .n = f.n, .dtype = dt};
        KernelCase b = {.dtype = dt, .beta = 1.0f};
        kernel_case_set_params(&b, &bg, sizeof bg);
        snprintf(b.shape, sizeof b.shape, "%d x %d", f.m, f.n);
        add_case(l, b, "gemm_bias_grad");
        if (tx->grad >= 0) {
            const GemmShape dd = {.batch = 1, .m = f.m, .n = f.k, .k = f.n, .stride_a = (long)f.m * f.n,
                                  .stride_b = (long)f.n * f.k, .stride_c = (long)f.m * f.k, .alpha = 1.0f, .dtype = dt,
                                  .bf16_math = f.bf16_math};
            add_case(l, gemm_case(dd, 0, nd->dx_beta[0]), "gemm");
        }
        break;
    }
    case OP_ATTENTION:
        kernel_case_set_params(&k, &nd->att, sizeof nd->att);
        snprintf(k.shape, sizeof k.shape, "b%d h%d %dx%d d%d", nd->att.batch, nd->att.heads, nd->att.tq, nd->att.tk,
                 nd->att.d);
        add_case(l, k, "attention_forward");
        add_case(l, k, "attention_backward");
        add_case(l, k, "attention_step"); /* the pair through the saved memory: the model's path */
        break;
    case OP_POS: {
        KernelCase acc = count_case(tx->count / tx->dims.n, dt);
        acc.beta = 1.0f;
        add_case(l, count_case(tx->count, dt), "accumulate");
        add_case(l, acc, "accumulate");
        const GemmShape bg = {.m = tx->dims.n, .n = (int)(tx->count / tx->dims.n), .dtype = dt};
        KernelCase b = {.dtype = dt, .beta = 1.0f};
        kernel_case_set_params(&b, &bg, sizeof bg);
        snprintf(b.shape, sizeof b.shape, "%d x %d", bg.m, bg.n);
        add_case(l, b, "gemm_bias_grad");
        break;
    }
    case OP_UNPATCH:
        kernel_case_set_params(&k, &nd->patch, sizeof nd->patch);
        snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d p%dx%dx%d", nd->patch.n, nd->patch.d, nd->patch.h,
                 nd->patch.w, nd->patch.c, nd->patch.p[0], nd->patch.p[1], nd->patch.p[2]);
        add_case(l, k, "patch_to_volume");
        add_case(l, k, "patch_to_tokens");
        break;
    case OP_QSAMPLE: { /* the noise, then x_t and the target in one pass */
        const DiffusionShape d = {.n = m->batch, .count = tx->count / m->batch, .dtype = m->tensors[nd->out].dtype,
                                  .data_scale = (float)m->cfg.diff.data_scale};
        add_case(l, count_case(tx->count, DT_F32), "normal_fill");
        kernel_case_set_params(&k, &d, sizeof d);
        k.dtype = d.dtype;
        snprintf(k.shape, sizeof k.shape, "n%d x %ld", d.n, d.count);
        add_case(l, k, "diffusion_q_sample");
        break;
    }
    case OP_DRR: /* both views of each sample: one call per view and sample */
        for (int v = 0; v < 2; v++) {
            const DrrShape d = {.n = 1, .d = tx->dims.d, .h = tx->dims.h, .w = tx->dims.w, .view = v,
                                .img = m->cfg.diff.img_size, .mu_scale = (float)m->cfg.diff.mu_scale,
                                .spacing = 1.0f / (float)(v ? tx->dims.w : tx->dims.h), .dtype = DT_F32};
            KernelCase c = {.dtype = DT_F32};
            kernel_case_set_params(&c, &d, sizeof d);
            snprintf(c.shape, sizeof c.shape, "%dx%dx%d view %d -> %d^2", d.d, d.h, d.w, v, d.img);
            add_case(l, c, "drr_forward");
        }
        break;
    case OP_BACKPROJECT: {
        const Tensor *y = &m->tensors[nd->out];
        const DrrShape d = {.n = m->batch, .d = y->dims.d, .h = y->dims.h, .w = y->dims.w, .img = m->cfg.diff.img_size,
                            .mu_scale = (float)m->cfg.diff.mu_scale, .spacing = 1.0f, .dtype = dt};
        kernel_case_set_params(&k, &d, sizeof d);
        snprintf(k.shape, sizeof k.shape, "n%d %d^2 -> %dx%dx%d x2", d.n, d.img, d.d, d.h, d.w);
        add_case(l, k, "drr_backproject");
        break;
    }
    case OP_TIMESTEP: {
        const TimestepShape t = {.n = m->batch, .dim = m->tensors[nd->out].dims.c, .max_period = 10000.0f, .dtype = dt};
        kernel_case_set_params(&k, &t, sizeof t);
        snprintf(k.shape, sizeof k.shape, "n%d dim %d", t.n, t.dim);
        add_case(l, k, "timestep_embed");
        break;
    }
    case OP_MODULATE:
    case OP_GATE: {
        const Tensor *y = &m->tensors[nd->out];
        const AdaLNShape a = {.n = y->dims.n, .tokens = y->count / y->dims.n / y->dims.c, .c = y->dims.c,
                              .mod_stride = m->tensors[nd->in[2]].dims.c, .dtype = dt};
        kernel_case_set_params(&k, &a, sizeof a);
        snprintf(k.shape, sizeof k.shape, "n%d %ldx%d", a.n, a.tokens, a.c);
        const int gate = nd->kind == OP_GATE;
        add_case(l, k, gate ? "adaln_gate" : "adaln_modulate");
        add_case(l, k, gate ? "adaln_gate_backward" : "adaln_modulate_backward");
        if (gate) add_case(l, count_case(y->count, dt), "accumulate"); /* the residual's gradient */
        break;
    }
    default: vx_fatal("bench kernels: node %s has no cases", nd->name);
    }
}

static void node_cases(CaseList *l, const Model *m);
static int loss_cases(CaseList *l, const Model *m, KernelCase **out);

/* OP_CASCADE: the volume resampled to the earlier network's grid, its estimate back, and the earlier network's own
 * shapes (the cases its stage had: a shape's kernel is one row whatever runs it) */
static void cascade_cases(CaseList *l, const Model *m, const Node *nd) {
    const Model *p = m->cascade_prev;
    const Dims hi = m->tensors[nd->out].dims, lo = p->tensors[p->t_input].dims;
    const int grids[2][2][3] = {{{hi.d, hi.h, hi.w}, {lo.d, lo.h, lo.w}}, {{lo.d, lo.h, lo.w}, {hi.d, hi.h, hi.w}}};
    for (int dir = 0; dir < 2; dir++) {
        const int *in = grids[dir][0], *out = grids[dir][1];
        KernelCase k = {.dtype = DT_F32, .dims = {hi.n, in[0], in[1], in[2], hi.c}};
        kernel_case_set_params(&k, out, 3 * sizeof(int));
        snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d -> %dx%dx%d c%d", hi.n, in[0], in[1], in[2], out[0], out[1],
                 out[2], hi.c);
        add_case(l, k, "resample_trilinear");
    }
    node_cases(l, p);
}

int kernel_cases_of_model(const Model *m, const Backend *be, KernelCase **out) {
    CaseList l = {.be = be};
    node_cases(&l, m);
    return loss_cases(&l, m, out);
}

static void node_cases(CaseList *lp, const Model *m) {
#define l (*lp)
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        const Tensor *tx = &m->tensors[nd->in[0]];
        const DType dt = tx->dtype;
        KernelCase k = {.dtype = dt};
        switch (nd->kind) {
        case OP_CONV: {
            const Conv3dShape *s = &nd->conv;
            kernel_case_set_params(&k, s, sizeof *s);
            char ks[40];
            conv3d_kernel_label(s, ks, sizeof ks);
            snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d->%d %s", s->n, s->d, s->h, s->w, s->c_in, s->c_out, ks);
            add_case(&l, k, nd->in[1] >= 0 ? "conv3d_forward_add" : "conv3d_forward");
            if (nd->pad_w >= 0) { /* padded channels (graph/conv_pad.h): what its forward and backward add */
                const ParamView *w = &m->params[nd->weight];
                const int ci = w->shape[4], co = w->shape[0], k3 = s->k[0] * s->k[1] * s->k[2];
                const Tensor *ty = &m->tensors[nd->out];
                add_case(&l, pad_case((long)co * k3, ci, s->c_in, dt), "pad_channels_to");      /* weights */
                add_case(&l, pad_case((long)co * k3, s->c_in, ci, DT_F32), "pad_channels_to");  /* their gradient */
                if (nd->bias >= 0) add_case(&l, count_case(co, DT_F32), "accumulate");         /* the bias's */
                if (nd->pad_b >= 0) add_case(&l, pad_case(1, co, s->c_out, DT_F32), "pad_channels_to");
                if (nd->pad_x >= 0) {
                    add_case(&l, pad_case(tx->count / tx->dims.c, tx->dims.c, s->c_in, dt), "pad_channels_to");
                    if (nd->pad_dx >= 0)
                        add_case(&l, pad_case(tx->count / tx->dims.c, s->c_in, tx->dims.c, dt), "pad_channels_to");
                }
                if (nd->pad_y >= 0) {
                    add_case(&l, pad_case(ty->count / ty->dims.c, s->c_out, ty->dims.c, dt), "pad_channels_to");
                    add_case(&l, pad_case(ty->count / ty->dims.c, ty->dims.c, s->c_out, dt), "pad_channels_to");
                    if (nd->in[1] >= 0) { /* the fused residual, added after the slice */
                        KernelCase acc = count_case(ty->count, dt);
                        acc.beta = 1.0f;
                        add_case(&l, acc, "accumulate");
                    }
                }
            }
            if (tx->grad >= 0) add_case(&l, k, "conv3d_backward_data");
            add_case(&l, k, "conv3d_backward_filter");
            if (nd->in[1] >= 0) { /* the fused residual's gradient: the output's, copied or added to the skip's */
                KernelCase acc = count_case(m->tensors[nd->out].count, dt);
                acc.beta = nd->dx_beta[1];
                add_case(&l, acc, "accumulate");
            }
            break;
        }
        case OP_GROUPNORM:
            kernel_case_set_params(&k, &nd->gn, sizeof nd->gn);
            snprintf(k.shape, sizeof k.shape, "n%d %ldx%d g%d", nd->gn.n, nd->gn.spatial, nd->gn.c, nd->gn.groups);
            add_case(&l, k, nd->gn.silu ? "groupnorm_silu_forward" : "groupnorm_forward");
            add_case(&l, k, nd->gn.silu ? "groupnorm_silu_backward" : "groupnorm_backward");
            break;
        case OP_SILU:
            add_case(&l, count_case(tx->count, dt), "silu_forward");
            add_case(&l, count_case(tx->count, dt), "silu_backward");
            break;
        case OP_CAST: {
            const Tensor *ty = &m->tensors[nd->out];
            if (ty->dims.c == tx->dims.c) add_case(&l, count_case(tx->count, ty->dtype), "cast_to");
            else add_case(&l, pad_case(tx->count / tx->dims.c, tx->dims.c, ty->dims.c, ty->dtype), "pad_channels_to");
            break;
        }
        case OP_UPCONV: { /* its phase convolution, and the weights, fold and (un)shuffle around it */
            const Conv3dShape *s = &nd->conv;
            kernel_case_set_params(&k, s, sizeof *s);
            char ks[40];
            conv3d_kernel_label(s, ks, sizeof ks);
            snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d->%d %s", s->n, s->d, s->h, s->w, s->c_in, s->c_out, ks);
            add_case(&l, k, "conv3d_forward");
            if (tx->grad >= 0) add_case(&l, k, "conv3d_backward_data");
            add_case(&l, k, "conv3d_backward_filter");
            KernelCase u = {.dtype = dt};
            UpconvPhaseShape us = nd->up;
            us.dtype = dt;
            kernel_case_set_params(&u, &us, sizeof us);
            snprintf(u.shape, sizeof u.shape, "n%d %dx%dx%d c%d->%d", us.n, us.d, us.h, us.w, us.c_in, us.c_out);
            add_case(&l, u, "upconv_phase_weights");
            add_case(&l, u, "upconv_phase_shuffle");
            add_case(&l, u, "upconv_phase_unshuffle");
            add_case(&l, u, "upconv_phase_fold");
            break;
        }
        case OP_UPSAMPLE:
            memcpy(k.dims, (int[]){tx->dims.n, tx->dims.d, tx->dims.h, tx->dims.w, tx->dims.c}, sizeof k.dims);
            snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d", k.dims[0], k.dims[1], k.dims[2], k.dims[3], k.dims[4]);
            add_case(&l, k, "upsample2x_forward");
            add_case(&l, k, "upsample2x_backward");
            break;
        case OP_ADD: {
            add_case(&l, count_case(tx->count, dt), "add_forward");
            KernelCase acc = count_case(tx->count, dt);
            acc.beta = 1.0f; /* the second addend's gradient adds to what is there */
            add_case(&l, acc, "accumulate");
            break;
        }
        case OP_LATENT: {
            const LatentShape lat = {.n = tx->dims.n, .count_per_sample = tx->count / tx->dims.n,
                                  .logvar_min = (float)m->cfg.logvar_min, .logvar_max = (float)m->cfg.logvar_max,
                                  .dtype = dt};
            kernel_case_set_params(&k, &lat, sizeof lat);
            snprintf(k.shape, sizeof k.shape, "n%d x%ld", lat.n, lat.count_per_sample);
            add_case(&l, k, "latent_forward");
            add_case(&l, k, "latent_backward");
            break;
        }
        case OP_BATCHNORM: { /* the training forward's two passes, finalize, the forward, the backward's two */
            BatchNormShape bn = nd->bn;
            bn.dtype = dt;
            kernel_case_set_params(&k, &bn, sizeof bn);
            if (batchnorm_ldx(&bn) == bn.c) snprintf(k.shape, sizeof k.shape, "n%d %ldx%d", bn.n, bn.spatial, bn.c);
            else snprintf(k.shape, sizeof k.shape, "n%d %ldx%d ldx %ld", bn.n, bn.spatial, bn.c, bn.ldx);
            static const char *const BN[] = {"batchnorm_stats", "batchnorm_stats_centered", "batchnorm_finalize",
                                             "batchnorm_forward", "batchnorm_backward_reduce", "batchnorm_backward"};
            static const char *const BN_RELU[] = {"batchnorm_stats", "batchnorm_stats_centered", "batchnorm_finalize",
                                                  "batchnorm_forward_relu", "batchnorm_backward_reduce_relu",
                                                  "batchnorm_backward_relu"}; /* train.fuse's BatchNorm+ReLU */
            for (size_t b = 0; b < sizeof BN / sizeof BN[0]; b++)
                if (b != 5 || tx->grad >= 0) add_case(&l, k, bn.relu ? BN_RELU[b] : BN[b]);
            KernelCase acc = count_case(bn.c, DT_F32); /* the sums into dgamma and dbeta */
            acc.beta = 1.0f;
            add_case(&l, acc, "accumulate");
            break;
        }
        case OP_RELU:
            add_case(&l, count_case(tx->count, dt), "relu_forward");
            add_case(&l, count_case(tx->count, dt), "relu_backward");
            break;
        case OP_MAXPOOL: {
            MaxPoolShape ps = nd->pool;
            ps.dtype = dt;
            kernel_case_set_params(&k, &ps, sizeof ps);
            snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d k%d s%d", ps.n, ps.d, ps.h, ps.w, ps.c, ps.k, ps.stride);
            add_case(&l, k, "maxpool_forward");
            add_case(&l, k, "maxpool_backward");
            break;
        }
        case OP_AVGPOOL: {
            const Dims d = tx->dims;
            KernelCase ap = {.dims = {d.n, d.c}, .count = (long)d.d * d.h * d.w, .dtype = dt};
            snprintf(ap.shape, sizeof ap.shape, "n%d %ldx%d", d.n, ap.count, d.c);
            add_case(&l, ap, "avgpool_forward");
            add_case(&l, ap, "avgpool_backward");
            break;
        }
        case OP_CONCAT: { /* a copy per part forward, the split backward; a part's offset does not change its cost,
                             so one case per (rows, part's channels, concatenation's channels) */
            const int cy = m->tensors[nd->out].dims.c;
            const long rows = m->tensors[nd->out].count / cy;
            for (int p = 0, at = 0; p < NODE_MAX_IN && nd->in[p] >= 0; p++) {
                const int cp = m->tensors[nd->in[p]].dims.c;
                KernelCase c = {.count = rows, .dtype = dt, .dims = {cp, 0, cy, at, cp}};
                snprintf(c.shape, sizeof c.shape, "%ld x c%d -> c%d", rows, cp, cy);
                add_case(&l, c, "copy_channels");
                at += cp;
            }
            break;
        }
        case OP_CHANNEL_WRITE: { /* x into its channels of the buffer, and their gradient back (the block's input: the
                                    buffer's first channels, a layer's features: after the channels before them) */
            const int cx = tx->dims.c, ld = (int)model_row_stride(m, nd->out), at = m->tensors[nd->out].c_at;
            const long rows = tx->count / cx;
            KernelCase c = {.count = rows, .dtype = dt, .dims = {cx, 0, ld, at, cx}};
            snprintf(c.shape, sizeof c.shape, "%ld x c%d -> c%d", rows, cx, ld);
            add_case(&l, c, "copy_channels");
            if (tx->grad >= 0) {
                KernelCase b = {.count = rows, .dtype = dt, .dims = {ld, at, cx, 0, cx}, .beta = nd->dx_beta[0]};
                snprintf(b.shape, sizeof b.shape, "%ld x c%d <- c%d", rows, cx, ld);
                add_case(&l, b, "copy_channels");
            }
            break;
        }
        case OP_POOL_WINDOW: {
            PoolWindowShape ps = nd->pw;
            ps.dtype = dt;
            kernel_case_set_params(&k, &ps, sizeof ps);
            snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d k%dx%dx%d", ps.n, ps.d, ps.h, ps.w, ps.c, ps.k[0],
                     ps.k[1], ps.k[2]);
            add_case(&l, k, "pool_window_forward");
            add_case(&l, k, "pool_window_backward");
            break;
        }
        case OP_LINEAR: {
            LinearShape ls = nd->lin;
            ls.dtype = dt;
            kernel_case_set_params(&k, &ls, sizeof ls);
            snprintf(k.shape, sizeof k.shape, "n%d %d->%d", ls.n, ls.in, ls.out);
            add_case(&l, k, "linear_forward");
            if (tx->grad >= 0) add_case(&l, k, "linear_backward_data");
            add_case(&l, k, "linear_backward_filter");
            break;
        }
        case OP_DROPOUT: {
            DropoutShape ds = nd->drop;
            ds.dtype = dt;
            kernel_case_set_params(&k, &ds, sizeof ds);
            snprintf(k.shape, sizeof k.shape, "n%d x%ld p%g", ds.n, ds.per_sample, (double)ds.p);
            add_case(&l, k, "dropout_forward");
            add_case(&l, k, "dropout_backward");
            break;
        }
        case OP_LAYERNORM:
        case OP_GEMM:
        case OP_ATTENTION:
        case OP_POS:
        case OP_UNPATCH:
        case OP_QSAMPLE:
        case OP_DRR:
        case OP_BACKPROJECT:
        case OP_TIMESTEP:
        case OP_MODULATE:
        case OP_GATE: vit_cases(&l, m, nd, tx); break;
        case OP_CASCADE: cascade_cases(&l, m, nd); break;
        }
    }
#undef l
}

/* the loss's and the optimizer's cases, then the list sorted by op into *out */
static int loss_cases(CaseList *lp, const Model *m, KernelCase **out) {
    CaseList l = *lp;
    if (m->t_recon >= 0) { /* ae3d, vit3d */
        add_case(&l, count_case(m->tensors[m->t_recon].count, m->dtype),
                 strcmp(m->cfg.loss, "mse") == 0 ? "recon_loss_mse" : "recon_loss_l1");
    } else { /* the head's loss (survival's over the global batch: the cases of one rank) */
        const Tensor *t = &m->tensors[m->t_out];
        if (m->task == TASK_REGRESSION) {
            add_case(&l, count_case(t->count, t->dtype), "recon_loss_mse");
        } else {
            const HeadLossShape hs = {.kind = m->task == TASK_SURVIVAL ? HEAD_LOSS_COX
                                              : m->task == TASK_MULTILABEL ? HEAD_LOSS_BCE : HEAD_LOSS_CE,
                                      .n = m->batch, .k = t->dims.c,
                                      .dtype = m->task == TASK_SURVIVAL ? DT_F32 : t->dtype};
            KernelCase hk = {.dtype = hs.dtype};
            kernel_case_set_params(&hk, &hs, sizeof hs);
            snprintf(hk.shape, sizeof hk.shape, "n%d k%d", hs.n, hs.k);
            const int weighted = m->head_weight != NULL || m->cfg.head.class_weights.n || m->cfg.head.pos_weight.n;
            add_case(&l, hk, m->task == TASK_SURVIVAL ? "head_loss_cox"
                             : m->task == TASK_MULTILABEL ? (weighted ? "head_loss_bce_pos_weight" : "head_loss_bce")
                                                          : (weighted ? "head_loss_ce_weighted" : "head_loss_ce"));
        }
    }
    add_case(&l, count_case(m->param_floats, m->dtype), "adamw"); /* with the low-precision copy in mixed precision */
    add_case(&l, count_case(m->param_floats, DT_F32), "sumsq");
    sort_by_op(&l);
    *out = l.v;
    return l.n;
}

int kernel_cases_add_attention(KernelCase **cases, int n, const Backend *be, const int *tokens, int n_tokens, DType dt) {
    CaseList l = {.v = *cases, .n = n, .cap = n, .be = be};
    for (int i = 0; i < n_tokens; i++) {
        const AttentionShape s = attention_shape(1, 1, tokens[i], tokens[i], 64, dt);
        KernelCase k = {.dtype = dt};
        kernel_case_set_params(&k, &s, sizeof s);
        snprintf(k.shape, sizeof k.shape, "b%d h%d %dx%d d%d", s.batch, s.heads, s.tq, s.tk, s.d);
        add_case(&l, k, "attention_forward"); /* (a model's own case of the same shape stays the one row) */
        add_case(&l, k, "attention_backward");
        /* the step's check needs every row's forward in double (its backward sums over all of them): ~2e9
         * multiply-adds at 4096 tokens, 64x that at 32768, so that shape gets the two rows alone */
        if ((double)s.tq * s.tk * s.d <= 2e9) add_case(&l, k, "attention_step");
    }
    sort_by_op(&l);
    *cases = l.v;
    return l.n;
}

/* build_ae3d.c: the autoencoder's graph (model.family ae3d; the network model.h describes): encoder, latent and
 * decoder as nodes, with train.fuse's GroupNorm+SiLU nodes and residual adds in conv epilogues, and a Block per
 * ResBlock for activation checkpointing. */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "families/build.h"
#include "graph/conv_pad.h"

/* A cubic convolution with "same" padding and a bias, as every conv of the autoencoder is (w_cin: see build_conv) */
static int conv_on(Model *m, const char *name, int x, int w_cin, int c_out, int k, int stride) {
    const int kk[3] = {k, k, k}, ss[3] = {stride, stride, stride}, pp[3] = {k / 2, k / 2, k / 2};
    return build_conv(m, name, x, w_cin, c_out, kk, ss, pp, 1);
}

static int conv(Model *m, const char *name, int x, int c_out, int k, int stride) {
    return conv_on(m, name, x, m->tensors[x].dims.c, c_out, k, stride);
}

static int groupnorm(Model *m, const char *name, int x) {
    Dims in = m->tensors[x].dims;
    Node *nd = build_node(m, OP_GROUPNORM, name, x, -1, in);
    nd->gn = (GroupNormShape){.n = in.n, .spatial = (long)in.d * in.h * in.w, .c = in.c,
                              .groups = m->cfg.norm_groups, .eps = (float)m->cfg.norm_eps, .dtype = m->dtype};
    nd->weight = build_param(m, name, "weight", 1, (int[]){in.c});
    nd->bias = build_param(m, name, "bias", 1, (int[]){in.c});
    return nd->out;
}

static int silu(Model *m, const char *name, int x) {
    return build_node(m, OP_SILU, name, x, -1, m->tensors[x].dims)->out;
}

/* GroupNorm then SiLU: one fused node when train.fuse (named "<norm>+<act>", its parameters the norm's), else two */
static int norm_silu(Model *m, const char *norm_name, const char *act_name, int x) {
    const int y = groupnorm(m, norm_name, x);
    if (!m->fuse) return silu(m, act_name, y);
    build_fused_norm(m, norm_name, act_name)->gn.silu = 1;
    return y;
}

static int add(Model *m, const char *name, int a, int b) {
    return build_node(m, OP_ADD, name, a, b, m->tensors[a].dims)->out;
}

static int upsample(Model *m, const char *name, int x) {
    Dims d = m->tensors[x].dims;
    return build_node(m, OP_UPSAMPLE, name, x, -1, (Dims){d.n, 2 * d.d, 2 * d.h, 2 * d.w, d.c})->out;
}

/* Nearest x2 upsampling then conv 3^3 (stride 1, padding 1, bias) to c_out: two nodes (interpolate_name, then
 * conv_name), or with train.fuse one OP_UPCONV named as the conv (graph/upconv.h: one 2x2x2 phase convolution at
 * x's resolution), the same parameters either way. 16-bit storage whose channels conv_pad.h pads keeps the pair (the
 * phase convolution's 8*c_out outputs are a multiple of 8, its input would not be); ModelOptions.pad_all_types (a
 * float32 test of the padding) does not change the choice, so padded and unpadded models have the same nodes. */
static int upsample_conv(Model *m, const char *interpolate_name, const char *conv_name, int x, int c_out) {
    const Dims d = m->tensors[x].dims;
    if (!m->fuse || conv_pad_channels(m->dtype, d.c, 0) != d.c)
        return conv(m, conv_name, upsample(m, interpolate_name, x), c_out, 3, 1);
    Node *nd = build_node(m, OP_UPCONV, conv_name, x, -1, (Dims){d.n, 2 * d.d, 2 * d.h, 2 * d.w, c_out});
    nd->up = (UpconvPhaseShape){.n = d.n, .d = d.d, .h = d.h, .w = d.w, .c_in = d.c, .c_out = c_out, .dtype = m->dtype};
    nd->conv = conv3d_shape(d.n, d.d, d.h, d.w, d.c, 8 * c_out, 2, 1, 1);
    nd->conv.dtype = m->dtype;
    nd->conv.bf16_math = m->bf16_math;
    nd->weight = build_param(m, conv_name, "weight", 5, (int[]){c_out, 3, 3, 3, d.c});
    nd->bias = build_param(m, conv_name, "bias", 1, (int[]){c_out});
    return nd->out;
}

/* The residual add h + skip: a node of its own, or (train.fuse) folded into the convolution that produced the later
 * of the two, which then adds the other in its epilogue: conv(x) + bias + other, the same sum in the same order
 * (float addition commutes), one tensor and one pass fewer each way. */
static int residual_add(Model *m, const char *name, int h, int skip) {
    const int later = m->tensors[h].producer > m->tensors[skip].producer ? h : skip;
    Node *last = &m->nodes[m->n_nodes - 1];
    if (!m->fuse || last->kind != OP_CONV || last->out != later) return add(m, name, h, skip);
    last->in[1] = later == h ? skip : h;
    snprintf(last->name + strlen(last->name), sizeof last->name - strlen(last->name), "+add");
    return later;
}

/* GN -> SiLU -> conv3 -> GN -> SiLU -> conv3, plus the input (1x1 conv when channels change); one Block, the unit
 * activation checkpointing recomputes. */
static int resblock(Model *m, const char *prefix, int x, int c_out) {
    const int first = m->n_nodes;
    char n[80], n2[80];
    int c_in = m->tensors[x].dims.c;
#define NAME(s) (snprintf(n, sizeof n, "%s.%s", prefix, s), n)
#define NAME2(s) (snprintf(n2, sizeof n2, "%s.%s", prefix, s), n2)
    int h = norm_silu(m, NAME("norm1"), NAME2("act1"), x);
    h = conv(m, NAME("conv1"), h, c_out, 3, 1);
    h = norm_silu(m, NAME("norm2"), NAME2("act2"), h);
    h = conv(m, NAME("conv2"), h, c_out, 3, 1);
    int skip = c_in == c_out ? x : conv(m, NAME("shortcut"), x, c_out, 1, 1);
    const int out = residual_add(m, NAME("add"), h, skip);
    build_segment(m, first);
    return out;
#undef NAME
#undef NAME2
}

void build_ae3d(Model *m) {
    const ModelConfig *c = &m->cfg;
    char n[80];
    int L = c->levels;
    build_input(m);

    int h = conv_on(m, "encoder.conv_in", m->t_input_lp, c->in_channels, c->channels[0], 3, 1);
    for (int l = 0; l < L; l++) {
        for (int b = 0; b < c->res_blocks; b++) {
            snprintf(n, sizeof n, "encoder.down.%d.res.%d", l, b);
            h = resblock(m, n, h, c->channels[l]);
        }
        if (l < L - 1) {
            snprintf(n, sizeof n, "encoder.down.%d.downsample", l);
            h = conv(m, n, h, m->tensors[h].dims.c, 3, 2);
        }
    }
    h = norm_silu(m, "encoder.norm_out", "encoder.act_out", h);
    m->t_mu = conv(m, "encoder.mu", h, c->latent_channels, 1, 1);
    m->t_logvar = conv(m, "encoder.logvar", h, c->latent_channels, 1, 1);
    m->t_z = build_node(m, OP_LATENT, "latent", m->t_mu, m->t_logvar, m->tensors[m->t_mu].dims)->out;

    h = conv(m, "decoder.conv_in", m->t_z, c->channels[L - 1], 3, 1);
    for (int l = L - 1; l >= 0; l--) {
        for (int b = 0; b < c->res_blocks; b++) {
            snprintf(n, sizeof n, "decoder.up.%d.res.%d", l, b);
            h = resblock(m, n, h, c->channels[l]);
        }
        if (l > 0) {
            /* the nearest-neighbour resize and the conv after it are two nodes: they need two names in traces
             * (F.interpolate's, then the conv module's, whose parameters PyTorch names decoder.up.L.upsample.*) */
            char conv_name[80];
            snprintf(n, sizeof n, "decoder.up.%d.interpolate", l);
            snprintf(conv_name, sizeof conv_name, "decoder.up.%d.upsample", l);
            h = upsample_conv(m, n, conv_name, h, m->tensors[h].dims.c);
        }
    }
    h = norm_silu(m, "decoder.norm_out", "decoder.act_out", h);
    m->t_recon = conv(m, "decoder.conv_out", h, c->in_channels, 3, 1);
}


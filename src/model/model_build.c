/* model_build.c: turns a Config into the autoencoder's node list, parameter views and arena plan (model.h).
 * Nothing here touches backend memory; model_exec.c runs what this builds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "model/model.h"
#include "model/conv_pad.h"
#include "conv3d/conv3d.h"
#include "groupnorm/groupnorm.h"

#define GROW(arr, n, cap)                                                                                        \
    do {                                                                                                         \
        if ((n) == (cap)) {                                                                                      \
            (cap) = (cap) ? 2 * (cap) : 64;                                                                      \
            (arr) = realloc((arr), (size_t)(cap) * sizeof *(arr));                                              \
            if (!(arr)) vx_fatal("out of memory building the model");                                           \
        }                                                                                                        \
    } while (0)

static int add_tensor(Model *m, Dims d, int producer, DType dtype) {
    GROW(m->tensors, m->n_tensors, m->cap_tensors);
    m->tensors[m->n_tensors] = (Tensor){.dims = d, .count = (long)d.n * d.d * d.h * d.w * d.c, .dtype = dtype,
                                        .act = -1, .grad = -1, .producer = producer};
    return m->n_tensors++;
}

static int add_param(Model *m, const char *prefix, const char *suffix, int ndim, const int *shape) {
    GROW(m->params, m->n_params, m->cap_params);
    ParamView *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s.%s", prefix, suffix);
    p->ndim = ndim;
    p->count = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->count *= shape[i];
    }
    p->offset = m->param_count; /* creation order for now; reversed in finish_params */
    m->param_count += p->count;
    return m->n_params++;
}

static Node *add_node(Model *m, OpKind kind, const char *name, int in0, int in1, Dims out) {
    GROW(m->nodes, m->n_nodes, m->cap_nodes);
    Node *nd = &m->nodes[m->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    snprintf(nd->name, sizeof nd->name, "%s", name);
    nd->in[0] = in0;
    nd->in[1] = in1;
    nd->weight = nd->bias = nd->stats = -1;
    nd->pad_w = nd->pad_dw = nd->pad_db = -1;
    nd->out = add_tensor(m, out, m->n_nodes, m->dtype);
    m->n_nodes++;
    return nd;
}

/* A convolution of x whose weights have w_cin input channels: x's own count, or fewer when x is padded with zero
 * channels (conv_in under model.pad_input_channels), which the weights then are too, in a copy of their own. */
static int conv_on(Model *m, const char *name, int x, int w_cin, int c_out, int k, int stride) {
    Dims in = m->tensors[x].dims;
    int pad = k / 2;
    Conv3dShape s = conv3d_shape(in.n, in.d, in.h, in.w, in.c, c_out, k, stride, pad);
    s.dtype = m->dtype;
    conv_pad_shape(m, &s, x == m->t_input_lp); /* 16-bit: channels padded to multiples of 8 (conv_pad.h) */
    Node *nd = add_node(m, OP_CONV, name, x, -1, (Dims){in.n, s.od, s.oh, s.ow, c_out});
    nd->conv = s;
    nd->weight = add_param(m, name, "weight", 5, (int[]){c_out, k, k, k, w_cin});
    nd->bias = add_param(m, name, "bias", 1, (int[]){c_out});
    return nd->out;
}

static int conv(Model *m, const char *name, int x, int c_out, int k, int stride) {
    return conv_on(m, name, x, m->tensors[x].dims.c, c_out, k, stride);
}

static int groupnorm(Model *m, const char *name, int x) {
    Dims in = m->tensors[x].dims;
    Node *nd = add_node(m, OP_GROUPNORM, name, x, -1, in);
    nd->gn = (GroupNormShape){.n = in.n, .spatial = (long)in.d * in.h * in.w, .c = in.c,
                              .groups = m->cfg.norm_groups, .eps = (float)m->cfg.norm_eps, .dtype = m->dtype};
    nd->weight = add_param(m, name, "weight", 1, (int[]){in.c});
    nd->bias = add_param(m, name, "bias", 1, (int[]){in.c});
    return nd->out;
}

static int silu(Model *m, const char *name, int x) {
    return add_node(m, OP_SILU, name, x, -1, m->tensors[x].dims)->out;
}

/* GroupNorm then SiLU: one fused node when train.fuse (named "<norm>+<act>", its parameters the norm's), else two */
static int norm_silu(Model *m, const char *norm_name, const char *act_name, int x) {
    const int y = groupnorm(m, norm_name, x);
    if (!m->fuse) return silu(m, act_name, y);
    Node *nd = &m->nodes[m->n_nodes - 1];
    nd->gn.silu = 1;
    const char *act = strrchr(act_name, '.');
    snprintf(nd->name, sizeof nd->name, "%s+%s", norm_name, act ? act + 1 : act_name);
    return y;
}

static int add(Model *m, const char *name, int a, int b) {
    return add_node(m, OP_ADD, name, a, b, m->tensors[a].dims)->out;
}

static int upsample(Model *m, const char *name, int x) {
    Dims d = m->tensors[x].dims;
    return add_node(m, OP_UPSAMPLE, name, x, -1, (Dims){d.n, 2 * d.d, 2 * d.h, 2 * d.w, d.c})->out;
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
    GROW(m->blocks, m->n_blocks, m->cap_blocks);
    m->blocks[m->n_blocks++] = (Block){.first = first, .last = m->n_nodes - 1};
    return out;
#undef NAME
#undef NAME2
}

static void build_graph(Model *m) {
    const ModelConfig *c = &m->cfg;
    char n[80];
    int L = c->levels;
    m->t_input = add_tensor(m, (Dims){m->batch, c->input_size[0], c->input_size[1], c->input_size[2], c->in_channels}, -1,
                            DT_F32);
    /* the loss compares with the float32 input; conv_in reads it in the model's type, its channels padded with zeros
     * to a multiple of 8 where that lets cuDNN use tensor cores (pad_input_channels auto: bf16/fp16; on: always) */
    Dims lp = m->tensors[m->t_input].dims;
    const char *pad = c->pad_input_channels;
    if (strcmp(pad, "on") == 0 || (strcmp(pad, "auto") == 0 && m->dtype != DT_F32)) lp.c = (lp.c + 7) / 8 * 8;
    const int own_copy = m->dtype != DT_F32 || lp.c != c->in_channels;
    m->t_input_lp = own_copy ? add_node(m, OP_CAST, "input_cast", m->t_input, -1, lp)->out : m->t_input;

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
    m->t_z = add_node(m, OP_LATENT, "latent", m->t_mu, m->t_logvar, m->tensors[m->t_mu].dims)->out;

    h = conv(m, "decoder.conv_in", m->t_z, c->channels[L - 1], 3, 1);
    for (int l = L - 1; l >= 0; l--) {
        for (int b = 0; b < c->res_blocks; b++) {
            snprintf(n, sizeof n, "decoder.up.%d.res.%d", l, b);
            h = resblock(m, n, h, c->channels[l]);
        }
        if (l > 0) {
            /* the nearest-neighbour resize and the conv after it are two nodes: they need two names in traces
             * (F.interpolate's, then the conv module's, whose parameters PyTorch names decoder.up.L.upsample.*) */
            snprintf(n, sizeof n, "decoder.up.%d.interpolate", l);
            h = upsample(m, n, h);
            snprintf(n, sizeof n, "decoder.up.%d.upsample", l);
            h = conv(m, n, h, m->tensors[h].dims.c, 3, 1);
        }
    }
    h = norm_silu(m, "decoder.norm_out", "decoder.act_out", h);
    m->t_recon = conv(m, "decoder.conv_out", h, c->in_channels, 3, 1);
}

/* Reverse layer order: the last-created parameter gets offset 0, so backward's first gradients come first. The
 * packed layout puts the views back to back; the flat one starts each at a multiple of MODEL_PARAM_ALIGN. */
static void finish_params(Model *m) {
    long flat = 0;
    for (int i = m->n_params - 1; i >= 0; i--) {
        ParamView *p = &m->params[i];
        p->packed_offset = m->param_count - p->offset - p->count;
        p->offset = flat;
        flat += (p->count + MODEL_PARAM_ALIGN - 1) / MODEL_PARAM_ALIGN * MODEL_PARAM_ALIGN;
    }
    m->param_floats = flat;
}

void model_pack_params(const Model *m, const float *flat, float *packed) {
    for (int i = 0; i < m->n_params; i++) {
        const ParamView *p = &m->params[i];
        memcpy(packed + p->packed_offset, flat + p->offset, (size_t)p->count * sizeof(float));
    }
}

void model_unpack_params(const Model *m, const float *packed, float *flat) {
    memset(flat, 0, (size_t)m->param_floats * sizeof(float));
    for (int i = 0; i < m->n_params; i++) {
        const ParamView *p = &m->params[i];
        memcpy(flat + p->offset, packed + p->packed_offset, (size_t)p->count * sizeof(float));
    }
}

/* Whether node nd's backward reads its input `slot` (a conv's fused residual, an add's operands, an upsample's input
 * are not read) */
static int needs_input_in_backward(const Node *nd, int slot) {
    switch (nd->kind) {
    case OP_CONV:
    case OP_GROUPNORM:
    case OP_SILU: return slot == 0;
    case OP_LATENT: return 1;
    default: return 0;
    }
}

/* Activation checkpointing: which tensors are dropped after the forward (checkpointed: made inside a block by any
 * node but its last, and read only inside it), which of them backward needs again (read by a node that needs its
 * input in backward, or by a node that is itself rerun), and so which nodes the block reruns. Nodes are visited
 * last to first so a rerun node's inputs are marked before their producers are looked at. */
static void mark_checkpointed(Model *m, int *checkpointed, int *needed_again) {
    for (int bi = 0; bi < m->n_blocks; bi++) {
        const Block *b = &m->blocks[bi];
        for (int i = b->first; i < b->last; i++) {
            const int t = m->nodes[i].out;
            int inside = 1;
            for (int j = 0; j < m->n_nodes; j++)
                for (int s = 0; s < 2; s++)
                    if (m->nodes[j].in[s] == t && (j < b->first || j > b->last)) inside = 0;
            checkpointed[t] = inside;
        }
        for (int i = b->last; i >= b->first; i--) {
            Node *nd = &m->nodes[i];
            nd->recompute = checkpointed[nd->out] && needed_again[nd->out];
            for (int s = 0; s < 2; s++) {
                const int t = nd->in[s];
                if (t >= 0 && checkpointed[t] && (needs_input_in_backward(nd, s) || nd->recompute))
                    needed_again[t] = 1;
            }
        }
        for (int i = b->first; i <= b->last; i++)
            if (m->nodes[i].recompute && m->nodes[i].kind == OP_CONV)
                m->recompute_flops += conv3d_forward_flops(&m->nodes[i].conv);
    }
}

/* Timeline: node i runs forward at time i, the loss at time F, node i's backward at time 2F - i; a block's
 * recomputation runs at the time of its last node's backward, 2F - last. */
static void plan_memory(Model *m) {
    int F = m->n_nodes, T = 2 * F;
    int *last_use = vx_malloc((size_t)m->n_tensors * sizeof(int));
    int *first_grad = vx_malloc((size_t)m->n_tensors * sizeof(int));
    int *checkpointed = vx_calloc((size_t)m->n_tensors, sizeof(int));
    int *needed_again = vx_calloc((size_t)m->n_tensors, sizeof(int));
    int *again_first = vx_malloc((size_t)m->n_tensors * sizeof(int)), *again_last = vx_calloc((size_t)m->n_tensors, sizeof(int));
    if (m->checkpoint_activations) mark_checkpointed(m, checkpointed, needed_again);
    for (int t = 0; t < m->n_tensors; t++) {
        last_use[t] = m->tensors[t].producer < 0 ? 0 : m->tensors[t].producer;
        first_grad[t] = T + 1;
        again_first[t] = T + 1;
    }
    for (int bi = 0; bi < m->n_blocks; bi++) /* a rerun node writes its output when the block is recomputed */
        for (int i = m->blocks[bi].first; i <= m->blocks[bi].last; i++)
            if (m->nodes[i].recompute) again_first[m->nodes[i].out] = T - m->blocks[bi].last;
    last_use[m->t_input] = last_use[m->t_recon] = F;
    first_grad[m->t_recon] = F;
    for (int i = 0; i < F; i++) {
        Node *nd = &m->nodes[i];
        for (int s = 0; s < 2; s++) {
            int t = nd->in[s];
            if (t < 0) continue;
            int use = needs_input_in_backward(nd, s) ? T - i : i;
            if (checkpointed[t]) { /* forward reads the first copy; backward (and the rerun) the second */
                if (i > last_use[t]) last_use[t] = i;
                if (use > again_last[t]) again_last[t] = use;
                if (again_first[t] > again_last[t]) again_last[t] = again_first[t];
            } else if (use > last_use[t]) {
                last_use[t] = use;
            }
            if (T - i < first_grad[t]) first_grad[t] = T - i;
        }
    }
    /* The node whose backward runs first for a tensor overwrites its gradient; the others accumulate. */
    for (int i = 0; i < F; i++) {
        Node *nd = &m->nodes[i];
        for (int s = 0; s < 2; s++)
            if (nd->in[s] >= 0) nd->dx_beta[s] = first_grad[nd->in[s]] == T - i ? 0.0f : 1.0f;
    }
    for (int t = 0; t < m->n_tensors; t++) {
        Tensor *tn = &m->tensors[t];
        int born = tn->producer < 0 ? 0 : tn->producer;
        const size_t bytes = (size_t)tn->count * dtype_size(tn->dtype);
        tn->act = plan_add(&m->plan, bytes, born, last_use[t]);
        tn->act_bwd = needed_again[t] ? plan_add(&m->plan, bytes, again_first[t], again_last[t]) : tn->act;
        if (t != m->t_input && t != m->t_input_lp) { /* the data needs no gradient */
            int dies = T - (tn->producer < 0 ? 0 : tn->producer);
            tn->grad = plan_add(&m->plan, bytes, first_grad[t], dies);
        }
    }
    size_t ws = 0;
    for (int i = 0; i < F; i++) {
        Node *nd = &m->nodes[i];
        if (nd->kind == OP_GROUPNORM) nd->stats = plan_add(&m->plan, 2 * (size_t)nd->gn.n * nd->gn.groups * sizeof(float), i, T - i);
        if (nd->kind == OP_LATENT) m->eps_item = plan_add(&m->plan, (size_t)m->tensors[nd->out].count * sizeof(float), i, T - i);
        if (nd->kind == OP_CONV && !m->no_workspace) {
            size_t w = m->be->conv3d->workspace_bytes(&nd->conv);
            if (w > ws) ws = w;
        }
        if (nd->kind == OP_CONV) conv_pad_plan(m, nd, i, T); /* padded channels' buffers, where it has them */
    }
    m->workspace_item = plan_add(&m->plan, ws, 0, T);
    m->scalars_item = plan_add(&m->plan, 16 * sizeof(float), 0, T);
    m->noise_offset_item = plan_add(&m->plan, sizeof(uint64_t), 0, T);
    plan_solve(&m->plan);
    free(last_use);
    free(first_grad);
    free(checkpointed);
    free(needed_again);
    free(again_first);
    free(again_last);
}

int model_dtype(const char *precision, const Backend *be, DType *out, char *why, size_t why_len) {
    const char *p = precision;
    if (strcmp(p, "auto") == 0) {
        *out = be->conv3d->head.supports(CONV3D_FORWARD, DT_BF16) ? DT_BF16 : DT_F32;
        return 1;
    }
    *out = strcmp(p, "bf16") == 0 ? DT_BF16 : strcmp(p, "fp16") == 0 ? DT_F16 : DT_F32;
    if (be->conv3d->head.supports(CONV3D_FORWARD, *out)) return 1;
    snprintf(why, why_len, "train.precision %s needs a GPU: the %s backend computes in float32 only", p, be->name);
    return 0;
}

Model *model_build(const ModelConfig *cfg, const ModelOptions *opt, int batch, const Backend *be) {
    Model *m = vx_calloc(1, sizeof *m);
    m->cfg = *cfg;
    m->fuse = opt->fuse;
    m->checkpoint_activations = opt->checkpoint_activations;
    m->pad_all_types = opt->pad_all_types;
    m->no_workspace = opt->no_workspace;
    m->seed = opt->seed;
    m->be = be;
    m->batch = batch;
    char why[160];
    if (!model_dtype(opt->precision, be, &m->dtype, why, sizeof why)) vx_usage_error("%s; use --amp off or a GPU", why);
    build_graph(m);
    finish_params(m);
    plan_memory(m);
    /* Backward: filter gradients for every conv, data gradients where the input has a gradient (not the data). The
     * model's work, the same padded or not (GFLOP/s compare): a conv on padded channels counts its real ones. */
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (nd->kind != OP_CONV) continue;
        Conv3dShape useful = nd->conv;
        useful.c_in = m->params[nd->weight].shape[4];
        useful.c_out = m->params[nd->weight].shape[0];
        m->conv_flops_step += conv3d_forward_flops(&useful) * (m->tensors[nd->in[0]].grad >= 0 ? 3 : 2);
    }
    return m;
}

size_t model_device_bytes(const Model *m) {
    return m->plan.total + 4 * (size_t)m->param_floats * sizeof(float) +
           (m->dtype == DT_F32 ? 0 : (size_t)m->param_floats * dtype_size(m->dtype));
}

void model_release_memory(Model *m) {
    if (!m || !m->allocated) return;
    m->be->release(m->arena);
    m->be->release(m->param);
    m->be->release(m->grad);
    m->be->release(m->adam_m);
    m->be->release(m->adam_v);
    if (m->param_lp) m->be->release(m->param_lp);
    m->param_lp = NULL;
    m->arena = NULL;
    m->param = m->grad = m->adam_m = m->adam_v = NULL;
    m->allocated = 0;
}

void model_free(Model *m) {
    if (!m) return;
    model_release_memory(m);
    plan_free(&m->plan);
    free(m->nodes);
    free(m->tensors);
    free(m->params);
    free(m->blocks);
    free(m);
}

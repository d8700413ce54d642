/* model_build.c: turns the model section into a node list, parameter and buffer views and an arena plan (model.h):
 * the family's builder chosen by model.family (build_<family>.c, on the pieces of build.c), then the parameters'
 * layout and the memory plan. Nothing here touches backend memory; model_exec.c runs what this builds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "families/build.h"
#include "graph/model.h"
#include "graph/conv_pad.h"
#include "graph/upconv.h"
#include "graph/diffusion_schedule.h"
#include "conv3d/conv3d.h"
#include "groupnorm/groupnorm.h"

/* Reverse layer order: the last-created parameter gets offset 0, so backward's first gradients come first. The
 * packed layout puts the views back to back; the flat one starts each at a multiple of MODEL_PARAM_ALIGN. */
static void finish_params(Model *m) {
    long flat = 0;
    for (int i = m->n_params - 1; i >= 0; i--) {
        ParamView *p = &m->params[i];
        p->packed_offset = m->param_count - p->offset - p->count;
        p->offset = p->grad_offset = flat;
        flat += (p->count + MODEL_PARAM_ALIGN - 1) / MODEL_PARAM_ALIGN * MODEL_PARAM_ALIGN;
    }
    m->param_floats = m->flat_floats = m->grad_floats = m->state_floats = flat;
}

/* Whether node nd's backward reads its input `slot` (a conv's fused residual, an add's operands, an upsample's or a
 * pooling's input, dropout's are not read) */
static int needs_input_in_backward(const Node *nd, int slot) {
    switch (nd->kind) {
    case OP_CONV:
    case OP_UPCONV:
    case OP_GROUPNORM:
    case OP_BATCHNORM:
    case OP_LINEAR:
    case OP_LAYERNORM:
    case OP_GEMM:
    case OP_SILU: return slot == 0;
    case OP_ATTENTION: return slot <= 1; /* the queries, and across the keys' and values' source */
    case OP_MODULATE: return slot == 0 || slot == 2; /* x for dscale, the scale */
    case OP_GATE: return slot >= 1;                  /* the branch for dgate, the gate */
    case OP_LATENT: return 1;
    default: return 0;
    }
}

/* Whether node nd's backward reads its own output (ReLU's mask is y > 0, so its input need not be kept; attention's
 * delta is dO . o). A BatchNorm with its ReLU fused does not: it recomputes the mask from its input (batchnorm.h). */
static int needs_output_in_backward(const Node *nd) { return nd->kind == OP_RELU || nd->kind == OP_ATTENTION; }

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
                for (int s = 0; s < NODE_MAX_IN; s++)
                    if (m->nodes[j].in[s] == t && (j < b->first || j > b->last)) inside = 0;
            checkpointed[t] = inside;
        }
        for (int i = b->last; i >= b->first; i--) {
            Node *nd = &m->nodes[i];
            if (checkpointed[nd->out] && needs_output_in_backward(nd)) needed_again[nd->out] = 1; /* attention's o */
            nd->recompute = checkpointed[nd->out] && needed_again[nd->out];
            for (int s = 0; s < NODE_MAX_IN; s++) {
                const int t = nd->in[s];
                if (t >= 0 && checkpointed[t] && (needs_input_in_backward(nd, s) || nd->recompute))
                    needed_again[t] = 1;
            }
        }
        for (int i = b->first; i <= b->last; i++)
            if (m->nodes[i].recompute && node_convolves(&m->nodes[i]))
                m->recompute_flops += conv3d_forward_flops(&m->nodes[i].conv);
    }
}

/* The tensor whose memory t is: itself, or the buffer it views (model.h) */
static int root_of(const Model *m, int t) { return m->tensors[t].view_of >= 0 ? m->tensors[t].view_of : t; }

/* What the executor assumes of views: only BatchNorm (its x and dx strided, shape.ldx) and OP_CHANNEL_WRITE (a copy
 * into channels of its output) touch one narrower than the buffer it views, that BatchNorm was built with the
 * stride, and activation checkpointing drops neither a view nor a viewed buffer (each lives in its buffer). */
static void check_views(const Model *m, const int *checkpointed) {
    for (int t = 0; t < m->n_tensors; t++) {
        const int r = m->tensors[t].view_of;
        if (r >= 0 && (checkpointed[t] || checkpointed[r]))
            vx_fatal("tensor %d: a view's memory cannot be dropped by activation checkpointing", t);
    }
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        for (int s = -1; s < NODE_MAX_IN; s++) {
            const int t = s < 0 ? nd->out : nd->in[s];
            if (t < 0) continue;
            const Tensor *tn = &m->tensors[t];
            if (tn->view_of < 0 || tn->dims.c == m->tensors[tn->view_of].dims.c) continue;
            const int ok = nd->kind == OP_CHANNEL_WRITE ? s < 0
                         : nd->kind == OP_BATCHNORM && s == 0 && batchnorm_ldx(&nd->bn) == model_row_stride(m, t);
            if (!ok) vx_fatal("%s: reads or writes a channel view it does not know the stride of", nd->name);
        }
    }
}

/* train.fuse: a BatchNorm whose first channels an earlier BatchNorm of the same forward already reduced, from the same
 * memory unwritten since, copies their batch sums in training and reduces only the channels after them. Why: a dense
 * layer's norm1 reads the block buffer's channels written so far, and all but the last layer's new ones were summed
 * by the norm1 before it (and the transition's norm reads them all), so each channel's statistics were computed once
 * per later layer of the block: a quadratic count of passes over memory, now one per channel and forward. The CPU's
 * sums run per channel over fixed row blocks whatever the channel count (batchnorm_cpu.c), so the bits are the
 * unshared ones; CUDA's partition depends on the count, so there they are deterministic, not the same bits. */
static int writes_channels(const Model *m, const Node *nd, int root, int c0, int c1) {
    const Tensor *o = &m->tensors[nd->out];
    if (root_of(m, nd->out) != root) return 0;
    return o->view_of < 0 || (o->c_at < c1 && c0 < o->c_at + o->dims.c); /* the buffer itself: all of it */
}

void build_share_batch_statistics(Model *m) {
    for (int i = 0; i < m->n_nodes; i++) {
        Node *nd = &m->nodes[i];
        if (nd->kind != OP_BATCHNORM) continue;
        const int root = root_of(m, nd->in[0]), at = m->tensors[nd->in[0]].c_at;
        for (int j = i - 1; j >= 0 && !nd->bn_shared; j--) {
            const Node *pv = &m->nodes[j];
            if (pv->kind != OP_BATCHNORM || root_of(m, pv->in[0]) != root || m->tensors[pv->in[0]].c_at != at ||
                pv->bn.c > nd->bn.c || pv->bn.n != nd->bn.n || pv->bn.spatial != nd->bn.spatial ||
                pv->bn.dtype != nd->bn.dtype || batchnorm_ldx(&pv->bn) != batchnorm_ldx(&nd->bn))
                continue;
            int unchanged = 1;
            for (int k = j + 1; k < i; k++) unchanged &= !writes_channels(m, &m->nodes[k], root, at, at + pv->bn.c);
            if (!unchanged) break; /* anything earlier read what has been overwritten too */
            nd->bn_shared = pv->bn.c;
            nd->bn_from = j;
        }
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
    check_views(m, checkpointed);
    for (int t = 0; t < m->n_tensors; t++) {
        last_use[t] = m->tensors[t].producer < 0 ? 0 : m->tensors[t].producer;
        first_grad[t] = T + 1;
        again_first[t] = T + 1;
    }
    int *rerun_at = vx_calloc((size_t)F + 1, sizeof(int)); /* when a rerun node runs again: its block's recomputation */
    for (int bi = 0; bi < m->n_blocks; bi++) /* a rerun node writes its output when the block is recomputed */
        for (int i = m->blocks[bi].first; i <= m->blocks[bi].last; i++)
            if (m->nodes[i].recompute) again_first[m->nodes[i].out] = rerun_at[i] = T - m->blocks[bi].last;
    /* the loss at time F reads the ae3d's reconstruction and input, or the head's outputs, and writes their gradient */
    const int t_loss = model_loss_tensor(m);
    last_use[t_loss] = F;
    if (m->t_recon >= 0) last_use[m->t_input] = F; /* a reconstruction's target */
    if (m->t_xt >= 0) last_use[m->t_xt] = last_use[m->t_views] = F; /* the projection loss's x_t and views */
    if (m->t_cascade >= 0) last_use[m->t_cascade] = F; /* a sampler's earlier-stage sample: kept through every step */
    first_grad[t_loss] = F;
    for (int i = 0; i < F; i++) {
        Node *nd = &m->nodes[i];
        for (int s = 0; s < NODE_MAX_IN; s++) {
            const int t = nd->in[s] < 0 ? -1 : root_of(m, nd->in[s]); /* a view's uses are its buffer's */
            if (t < 0) continue;
            /* read again by backward, or by the block's recomputation (a rerun node whose input is from outside its
             * block: a dense layer's view of its block's buffer) */
            int use = needs_input_in_backward(nd, s) ? T - i : nd->recompute ? rerun_at[i] : i;
            if (checkpointed[t]) { /* forward reads the first copy; backward (and the rerun) the second */
                if (i > last_use[t]) last_use[t] = i;
                if (use > again_last[t]) again_last[t] = use;
                if (again_first[t] > again_last[t]) again_last[t] = again_first[t];
            } else if (use > last_use[t]) {
                last_use[t] = use;
            }
            if (T - i < first_grad[t]) first_grad[t] = T - i;
        }
        const int o = root_of(m, nd->out);
        if (o != nd->out && i > last_use[o]) last_use[o] = i; /* a write into a buffer is a use of it */
        if (needs_output_in_backward(nd)) { /* (a checkpointed output: its rerun copy lives to this backward) */
            int *until = checkpointed[o] ? &again_last[o] : &last_use[o];
            if (T - i > *until) *until = T - i;
        }
    }
    /* The node whose backward runs first for a tensor overwrites its gradient; the others accumulate. A view's
     * gradient is its buffer's: the first to write it must write all of it, before the backward of any node that
     * wrote into the buffer reads it (a buffer read by nothing after a write would have no gradient there). */
    for (int i = 0; i < F; i++) {
        Node *nd = &m->nodes[i];
        const int o = root_of(m, nd->out);
        if (o != nd->out && !m->inference && first_grad[o] > T - i)
            vx_fatal("%s: writes into a buffer that nothing reads after it", nd->name);
        for (int s = 0; s < NODE_MAX_IN; s++) {
            if (nd->in[s] < 0) continue;
            const int r = root_of(m, nd->in[s]);
            nd->dx_beta[s] = first_grad[r] == T - i ? 0.0f : 1.0f;
            if (nd->dx_beta[s] == 0.0f && m->tensors[nd->in[s]].dims.c != m->tensors[r].dims.c)
                vx_fatal("%s: writes the first gradient of a buffer it reads part of", nd->name);
        }
    }
    for (int t = 0; t < m->n_tensors; t++) {
        Tensor *tn = &m->tensors[t];
        if (tn->view_of >= 0) continue; /* its buffer's items, below */
        int born = tn->producer < 0 ? 0 : tn->producer;
        /* a sampler (diffusion_sample.c) writes x_t and the views before the forward, in place of q_sample (node 0)
         * and the views' DRR (node 1), and a run with given views (data.view_columns, model_set_views) the views:
         * nothing may share their memory from time 0 (the noise of q_sample, live at time 0 only, could otherwise
         * share the views') */
        if (t == m->t_xt || t == m->t_views || t == m->t_cascade) born = 0; /* (the cascade's: the sampler's too) */
        const size_t bytes = (size_t)tn->count * dtype_size(tn->dtype);
        tn->act = plan_add(&m->plan, bytes, born, last_use[t]);
        tn->act_bwd = needed_again[t] ? plan_add(&m->plan, bytes, again_first[t], again_last[t]) : tn->act;
        if (t != m->t_input && t != m->t_input_lp && !tn->no_grad && !m->inference) { /* the data needs none */
            int dies = T - (tn->producer < 0 ? 0 : tn->producer);
            tn->grad = plan_add(&m->plan, bytes, first_grad[t], dies);
        }
    }
    for (int t = 0; t < m->n_tensors; t++) {
        Tensor *tn = &m->tensors[t];
        if (tn->view_of < 0) continue;
        const Tensor *r = &m->tensors[tn->view_of];
        tn->act = r->act;
        tn->act_bwd = r->act_bwd;
        tn->grad = r->grad;
    }
    size_t ws = 0;
    for (int i = 0; i < F; i++) {
        Node *nd = &m->nodes[i];
        if (nd->kind == OP_GROUPNORM) nd->stats = plan_add(&m->plan, 2 * (size_t)nd->gn.n * nd->gn.groups * sizeof(float), i, T - i);
        if (nd->kind == OP_BATCHNORM) nd->stats = plan_add(&m->plan, 4 * (size_t)nd->bn.c * sizeof(float), i, T - i);
        if (nd->kind == OP_MAXPOOL)
            nd->arg = plan_add(&m->plan, (size_t)m->tensors[nd->out].count * sizeof(int32_t), i, T - i);
        if (nd->kind == OP_LAYERNORM) nd->stats = plan_add(&m->plan, 2 * (size_t)nd->ln.rows * sizeof(float), i, T - i);
        if (nd->kind == OP_ATTENTION) /* lse, then delta from a 16-byte boundary (cuDNN's tensors are aligned) */
            nd->stats = plan_add(&m->plan, 2 * attention_rows_padded(&nd->att) * sizeof(float), i, T - i);
        /* what the backend keeps from the forward for the backward (the CPU's probabilities), where it keeps any;
         * also under activation checkpointing (a block's recomputation writes it again), so checkpointing changes no
         * bit of the gradients; the backend caps it per node (attention_cpu.c: 32 MiB) */
        if (nd->kind == OP_ATTENTION && m->be->attention->saved_bytes) {
            const size_t saved = m->be->attention->saved_bytes(&nd->att);
            if (saved) nd->aux = plan_add(&m->plan, saved, i, T - i);
        }
        if (nd->kind == OP_GEMM && nd->gemm.epilogue != GEMM_EPI_NONE) { /* the pre-activation, and its gradient */
            const size_t bytes = (size_t)nd->gemm.m * nd->gemm.n * dtype_size(nd->gemm.dtype);
            nd->aux = plan_add(&m->plan, bytes, i, T - i);
            nd->arg = plan_add(&m->plan, bytes, T - i, T - i);
        }
        if (nd->kind == OP_QSAMPLE) { /* the noise (used at once), the regression target (until the loss) */
            const size_t bytes = (size_t)m->tensors[nd->out].count * sizeof(float);
            m->eps_item = plan_add(&m->plan, bytes, i, i);
            m->diff_target_item = plan_add(&m->plan, bytes, i, F);
            /* the projection loss's scratch: x0_hat and its gradient, its views and theirs */
            m->x0hat_item = plan_add(&m->plan, 2 * bytes, F, F);
            m->x0views_item = plan_add(&m->plan, 2 * (size_t)m->tensors[m->t_views].count * sizeof(float), F, F);
            m->coef_item = plan_add(&m->plan, 4 * (size_t)m->batch * sizeof(float), 0, T);
        }
        if (nd->kind == OP_CASCADE) { /* the earlier network's x0 estimate (and a float32 copy), resampled up */
            const Model *p = m->cascade_prev;
            nd->aux = plan_add(&m->plan, 2 * (size_t)p->tensors[p->t_input].count * sizeof(float), i, i);
            nd->arg = plan_add(&m->plan, (size_t)m->tensors[nd->out].count * sizeof(float), i, i);
        }
        if (nd->kind == OP_LATENT) m->eps_item = plan_add(&m->plan, (size_t)m->tensors[nd->out].count * sizeof(float), i, T - i);
        if (node_convolves(nd) && !m->no_workspace) {
            size_t w = m->be->conv3d->workspace_bytes(&nd->conv);
            if (w > ws) ws = w;
        }
        if (nd->kind == OP_ATTENTION && !m->no_workspace) { /* cuDNN's fused attention (attention_cudnn.cu) */
            size_t w = m->be->attention->workspace_bytes(&nd->att);
            if (w > ws) ws = w;
        }
        if (nd->kind == OP_CONV) conv_pad_plan(m, nd, i, T); /* padded channels' buffers, where it has them */
        if (nd->kind == OP_UPCONV) upconv_plan(m, nd, i, T);  /* its phase convolution's buffers */
    }
    m->workspace_item = plan_add(&m->plan, ws, 0, T);
    if (m->task != TASK_NONE) { /* the targets live through the step; survival's gathered scores at the loss */
        const long n = m->task == TASK_SURVIVAL ? (long)m->world * m->batch : m->batch;
        m->target_item = plan_add(&m->plan, (size_t)n * m->labels * sizeof(float), 0, T);
        if (m->task == TASK_SURVIVAL) {
            m->gathered_item = plan_add(&m->plan, (size_t)n * dtype_size(m->dtype), F, F);
            m->gathered_grad_item = plan_add(&m->plan, (size_t)n * dtype_size(m->dtype), F, F);
        }
    }
    m->scalars_item = plan_add(&m->plan, 16 * sizeof(float), 0, T);
    m->noise_offset_item = plan_add(&m->plan, sizeof(uint64_t), 0, T);
    plan_solve(&m->plan);
    free(last_use);
    free(first_grad);
    free(rerun_at);
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
    if (*out == DT_BF16 && be->conv3d->bf16_math) { /* the CPU: bf16 as its convolutions' math, float32 storage */
        char lack[320];
        if (be->conv3d->bf16_math(lack, sizeof lack)) {
            *out = DT_F32;
            return 1;
        }
        snprintf(why, why_len, "train.precision bf16 on the %s needs AVX512-BF16 or AMX-BF16: %s", be->name, lack);
        return 0;
    }
    snprintf(why, why_len, "train.precision %s needs a GPU: the %s backend computes in float32 only", p, be->name);
    return 0;
}

int model_bf16_math(const char *precision, const Backend *be) {
    return strcmp(precision, "bf16") == 0 && !be->conv3d->head.supports(CONV3D_FORWARD, DT_BF16) &&
           be->conv3d->bf16_math && be->conv3d->bf16_math(NULL, 0);
}

/* The earlier network of a cascade stage (model.cascade_n > 0: train.stages[k].model differs from the stage
 * before's, config_stage.c). The later stage's graph reads it through one node, cascade_condition (OP_CASCADE, run by
 * model_exec.c); the earlier network is a model of its own, built here at its stage's volume
 * and the same micro-batch: forward only (no gradients, no AdamW: it is frozen), no average of its own (the
 * weights it holds are the ones its stage handed on), its noise and timesteps keyed by its own seed (so that the
 * draw that noises its input is not the later stage's). Its parameters and buffers are one buffer of the later
 * model, "cascade.stage<k>.flat" (its flat layout, then its own buffers: an earlier cascade level, recursively),
 * so a checkpoint, resume, best.ckpt and export hold every stage's network without a format of their own.
 * Here, beside model_build: it builds a whole model. */
#define CASCADE_SEED_SALT 0xCA5CADEull /* the earlier network's own draw: seed ^ salt */

static void build_cascade_prev(Model *m, const ModelOptions *opt) {
    const ModelConfig *c = &m->cfg;
    const CascadeLevel *level = &c->cascade[c->cascade_n - 1];
    ModelConfig pc = *c;
    pc.cascade_n = c->cascade_n - 1;
    memcpy(pc.input_size, level->input_size, sizeof pc.input_size);
    pc.vit.hidden_size = level->hidden_size;
    pc.vit.blocks = level->blocks;
    pc.vit.heads = level->heads;
    pc.vit.mlp_ratio = level->mlp_ratio;
    memcpy(pc.vit.patch_size, level->patch_size, sizeof pc.vit.patch_size);
    ModelOptions po = *opt;
    po.inference = 1;
    po.ema = 0;
    po.checkpoint_activations = 0;
    po.seed = (int64_t)((uint64_t)opt->seed ^ CASCADE_SEED_SALT);
    Model *p = model_build(&pc, &po, m->batch, m->be);
    m->cascade_prev = p;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "cascade.stage%d", c->cascade_n - 1);
    m->cascade_buffer = build_buffer(m, prefix, "flat", p->param_floats + p->buffer_floats);
}

Model *model_build(const ModelConfig *cfg, const ModelOptions *opt, int batch, const Backend *be) {
    Model *m = vx_calloc(1, sizeof *m);
    m->cfg = *cfg;
    m->fuse = opt->fuse;
    m->checkpoint_activations = opt->checkpoint_activations;
    m->pad_all_types = opt->pad_all_types;
    m->no_workspace = opt->no_workspace;
    m->inference = opt->inference;
    m->seed = opt->seed;
    m->be = be;
    m->batch = batch;
    m->world = opt->world > 0 ? opt->world : 1;
    m->family = strcmp(cfg->family, "resnet3d") == 0 ? FAMILY_RESNET3D
                : strcmp(cfg->family, "densenet") == 0 ? FAMILY_DENSENET
                : strcmp(cfg->family, "vit3d") == 0  ? FAMILY_VIT3D
                : strcmp(cfg->family, "vit3d_diffusion") == 0 ? FAMILY_VIT3D_DIFFUSION
                                                     : FAMILY_AE3D;
    m->t_recon = m->t_mu = m->t_logvar = m->t_z = m->t_out = -1;
    m->target_item = m->gathered_item = m->gathered_grad_item = -1;
    m->t_xt = m->t_views = m->coef_item = m->diff_target_item = m->x0hat_item = m->x0views_item = -1;
    m->t_cascade = m->cascade_buffer = -1;
    char why[512];
    if (!model_dtype(opt->precision, be, &m->dtype, why, sizeof why)) vx_usage_error("%s; use --amp off or a GPU", why);
    m->bf16_math = model_bf16_math(opt->precision, be);
    m->bf16_gemm = m->bf16_math && be->gemm->bf16_math && be->gemm->bf16_math(NULL, 0);
    if (m->family == FAMILY_RESNET3D) build_resnet3d(m);
    else if (m->family == FAMILY_DENSENET) build_densenet(m);
    else if (m->family == FAMILY_VIT3D) build_vit3d(m);
    else if (m->family == FAMILY_VIT3D_DIFFUSION) {
        build_vit3d_diffusion(m);
        m->alphabar = vx_malloc((size_t)cfg->diff.timesteps * sizeof(double));
        const int kind = diffusion_schedule_parse(cfg->diff.schedule); /* (the config's choices are both) */
        VX_CHECK(kind >= 0, "diffusion.schedule %s is not a schedule", cfg->diff.schedule);
        diffusion_alphabar((DiffusionSchedule)kind, cfg->diff.timesteps, m->alphabar);
        if (cfg->cascade_n > 0) build_cascade_prev(m, opt); /* before the plan: the condition's scratch is its size */
    }
    else build_ae3d(m);
    finish_params(m);
    if (m->inference) m->grad_floats = m->state_floats = 0; /* (predict: 506 MiB of them for nothing, issue 36) */
    if (opt->ema) { /* after the layout: the average mirrors the flat parameters, padding included */
        const char *dot = strchr(MODEL_EMA_BUFFER, '.');
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(dot - MODEL_EMA_BUFFER), MODEL_EMA_BUFFER);
        build_buffer(m, prefix, dot + 1, m->param_floats);
    }
    if (m->fuse) build_share_batch_statistics(m);
    plan_memory(m);
    /* Backward: filter gradients for every conv, data gradients where the input has a gradient (not the data). The
     * model's work, the same padded or not, fused or not (GFLOP/s compare): a conv on padded channels counts its
     * real ones, an upsampling convolution the 3x3x3 one it computes. */
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (!node_convolves(nd)) continue;
        Conv3dShape useful = nd->conv;
        useful.c_in = m->params[nd->weight].shape[4];
        useful.c_out = m->params[nd->weight].shape[0];
        if (nd->kind == OP_UPCONV) /* the model's 3x3x3 convolution of the upsampled input, not the 3.4x fewer
                                      FLOPs of its phase convolution: GFLOP/s compare with the unfused pair's */
            useful = conv3d_shape(nd->up.n, 2 * nd->up.d, 2 * nd->up.h, 2 * nd->up.w, nd->up.c_in, nd->up.c_out, 3, 1,
                                  1);
        m->conv_flops_step += conv3d_forward_flops(&useful) * (m->tensors[nd->in[0]].grad >= 0 ? 3 : 2);
    }
    /* The transformers' work, counted as the model's (what a PyTorch step computes too): a Linear's product, its
     * weight gradient and, where the input has a gradient, its data gradient; attention's 2 products forward
     * (Q K^T, P V) and 4 backward (dP, dV, dS K, dS^T Q). The tiled backward's recomputation of Q K^T (5 products
     * in all) is how our kernel saves the N x N matrix, not the model's work, so it is left out. */
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (nd->kind == OP_GEMM) {
            const GemmShape *g = &nd->gemm;
            const int passes = m->tensors[nd->in[0]].grad >= 0 ? 3 : 2;
            m->gemm_flops_step += 2.0 * g->batch * g->m * g->n * (double)g->k * passes;
        } else if (nd->kind == OP_ATTENTION) {
            const AttentionShape *a = &nd->att;
            m->attn_flops_step += 12.0 * a->batch * a->heads * a->tq * (double)a->tk * a->d;
        }
    }
    return m;
}

size_t model_device_bytes(const Model *m) {
    const Model *p = m->cascade_prev; /* its arena and low-precision weights (its parameters are m's buffer) */
    const size_t prev = p ? model_device_bytes(p) - ((size_t)p->flat_floats + (size_t)p->buffer_floats) * sizeof(float) : 0;
    return prev + m->plan.total + ((size_t)m->flat_floats + (size_t)m->grad_floats + 2 * (size_t)m->state_floats) * sizeof(float) +
           (m->dtype == DT_F32 ? 0 : (size_t)m->flat_floats * dtype_size(m->dtype)) +
           (size_t)m->buffer_floats * sizeof(float);
}

void model_release_memory(Model *m) {
    if (!m || !m->allocated) return;
    model_release_memory(m->cascade_prev);
    m->be->release(m->arena);
    if (!m->cascade_params) m->be->release(m->param); /* (a cascade's earlier network: its later one's buffer) */
    if (m->grad) m->be->release(m->grad);
    if (m->adam_m) m->be->release(m->adam_m);
    if (m->adam_v) m->be->release(m->adam_v);
    if (m->param_lp) m->be->release(m->param_lp);
    if (m->bufs && !m->cascade_params) m->be->release(m->bufs);
    if (m->head_weight) m->be->release(m->head_weight);
    m->param_lp = NULL;
    m->bufs = m->head_weight = NULL;
    m->arena = NULL;
    m->param = m->grad = m->adam_m = m->adam_v = NULL;
    memset(&m->mem, 0, sizeof m->mem);
    m->allocated = 0;
}

void model_free(Model *m) {
    if (!m) return;
    model_release_memory(m);
    model_free(m->cascade_prev);
    plan_free(&m->plan);
    free(m->nodes);
    free(m->tensors);
    free(m->params);
    free(m->buffers);
    free(m->blocks);
    free(m->alphabar);
    free(m);
}

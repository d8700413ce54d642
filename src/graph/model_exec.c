/* model_exec.c: allocation, forward and backward of the model built by model_build.c (initialization: model_init.c).
 * Every op goes through the backend table, so this file runs unchanged on the CPU and on CUDA, in float32 or in a
 * 16-bit activation type (each tensor carries its dtype; parameters and their gradients are float32, and the
 * convolutions read the low-precision copy of the weights). Forward and backward only enqueue device work: the
 * values a step needs from the host (the noise offset, the loss scale) are read from backend memory, so a CUDA
 * Graph can capture them. */
#include <math.h>
#include <string.h>

#include "core/util.h"
#include "graph/model.h"
#include "graph/conv_pad.h"
#include "graph/upconv.h"
#include "graph/exec_ptr.h"
#include "graph/model_exec_diff.h"
#include "graph/model_exec_vit.h"
#include "common/rng.h"
#include "trace/trace.h"
#include "conv3d/conv3d.h"
#include "groupnorm/groupnorm.h"
#include "silu/silu.h"
#include "upsample/upsample.h"
#include "elementwise/elementwise.h"
#include "loss/loss.h"
#include "latent/latent.h"
#include "normal/normal.h"
#include "optim/optim.h"
#include "relu/relu.h"
#include "avgpool/avgpool.h"
#include "resample/resample.h"

#define RNG_STREAM_LATENT 0x1A7Eull /* reparameterization noise: index = sample * per-sample count + element */
#define SCALAR_RECON 0
#define SCALAR_KL 1
#define SCALAR_SUMSQ 2

/* model.loss names the reconstruction loss; the loss op takes its enum */
static ReconLoss recon_loss_kind(const ModelConfig *cfg) { return strcmp(cfg->loss, "mse") == 0 ? LOSS_MSE : LOSS_L1; }

void *model_tensor(const Model *m, int t) { return exec_act(m, t); }
void *model_tensor_grad(const Model *m, int t) { return exec_grad(m, t); }
float *model_noise(const Model *m) { return (float *)exec_item(m, m->eps_item); }
static float *scalars(const Model *m) { return (float *)exec_item(m, m->scalars_item); }

/* be->alloc(bytes) and zeroed, its bytes as the allocator counts them added to *counted */
static void *alloc_counted(const Backend *be, size_t bytes, size_t *counted) {
    const size_t before = be->bytes_in_use();
    void *p = be->alloc(bytes ? bytes : 1);
    be->zero(p, bytes);
    *counted += be->bytes_in_use() - before;
    return p;
}

void model_allocate(Model *m) {
    const Backend *be = m->be;
    memset(&m->mem, 0, sizeof m->mem);
    m->arena = alloc_counted(be, m->plan.total, &m->mem.activations);
    /* a cascade's earlier network: its parameters and buffers are its later model's buffer (model_build.c) */
    m->param = m->cascade_params ? m->cascade_params
                                 : alloc_counted(be, (size_t)m->flat_floats * sizeof(float), &m->mem.params);
    if (m->grad_floats) m->grad = alloc_counted(be, (size_t)m->grad_floats * sizeof(float), &m->mem.grads);
    if (m->state_floats) {
        m->adam_m = alloc_counted(be, (size_t)m->state_floats * sizeof(float), &m->mem.optimizer);
        m->adam_v = alloc_counted(be, (size_t)m->state_floats * sizeof(float), &m->mem.optimizer);
    }
    if (m->dtype != DT_F32)
        m->param_lp = alloc_counted(be, (size_t)m->flat_floats * dtype_size(m->dtype), &m->mem.params);
    m->losses = scalars(m);
    if (m->buffer_floats && m->cascade_params) {
        m->bufs = m->cascade_params + m->param_floats;
    } else if (m->buffer_floats) { /* BatchNorm's running statistics: mean 0, variance 1 until trained or loaded */
        m->bufs = alloc_counted(be, (size_t)m->buffer_floats * sizeof(float), &m->mem.params);
        model_reset_buffers(m);
    }
    if (m->cascade_prev) {
        m->cascade_prev->cascade_params = m->bufs + m->buffers[m->cascade_buffer].offset;
        model_allocate(m->cascade_prev);
    }
    const ConfigList *hw = m->task == TASK_CLASSIFICATION ? &m->cfg.head.class_weights
                           : m->task == TASK_MULTILABEL   ? &m->cfg.head.pos_weight
                                                          : NULL;
    if (hw && hw->n) {
        float w[CONFIG_MAX_LIST];
        for (int i = 0; i < hw->n; i++) w[i] = (float)hw->v[i];
        m->head_weight = be->alloc((size_t)hw->n * sizeof(float));
        be->copy_to_device(m->head_weight, w, (size_t)hw->n * sizeof(float));
    }
    m->allocated = 1;
}

void model_reset_buffers(Model *m) {
    if (!m->buffer_floats) return;
    float *host = vx_malloc((size_t)m->buffer_floats * sizeof(float));
    for (int i = 0; i < m->n_buffers; i++) {
        const BufferView *b = &m->buffers[i];
        const float v = strstr(b->name, "running_var") ? 1.0f : 0.0f;
        for (long j = 0; j < b->count; j++) host[b->offset + j] = v;
    }
    model_upload_buffers(m, host);
    free(host);
}

int model_ema_view(const Model *m) {
    for (int i = 0; i < m->n_buffers; i++)
        if (strcmp(m->buffers[i].name, MODEL_EMA_BUFFER) == 0) return i;
    return -1;
}

float *model_ema(const Model *m) {
    const int v = model_ema_view(m);
    return v < 0 || !m->bufs ? NULL : m->bufs + m->buffers[v].offset;
}

void model_ema_reset(Model *m) {
    float *ema = model_ema(m);
    if (ema) m->be->elementwise->accumulate(DT_F32, m->param_floats, m->param, ema, 0.0f);
}

void model_download_buffers(const Model *m, float *host) {
    if (m->buffer_floats) m->be->copy_to_host(host, m->bufs, (size_t)m->buffer_floats * sizeof(float));
}

void model_upload_buffers(const Model *m, const float *host) {
    if (m->buffer_floats) m->be->copy_to_device(m->bufs, host, (size_t)m->buffer_floats * sizeof(float));
}

void model_set_targets(Model *m, const float *targets) {
    const long n = m->task == TASK_SURVIVAL ? (long)m->world * m->batch : m->batch;
    m->be->write_async(exec_item(m, m->target_item), targets, (size_t)n * m->labels * sizeof(float));
}

void model_sync_lp(Model *m) {
    if (m->param_lp) m->be->elementwise->cast(m->param_floats, DT_F32, m->param, m->dtype, m->param_lp);
}

void model_download_packed(const Model *m, const float *flat_device, float *packed) {
    const size_t bytes = (size_t)m->param_floats * sizeof(float);
    float *flat = vx_malloc(bytes);
    m->be->copy_to_host(flat, flat_device, bytes);
    model_pack_params(m, flat, packed);
    free(flat);
}

void model_upload_packed(const Model *m, const float *packed, float *flat_device) {
    const size_t bytes = (size_t)m->param_floats * sizeof(float);
    float *flat = vx_malloc(bytes);
    model_unpack_params(m, packed, flat);
    m->be->copy_to_device(flat_device, flat, bytes);
    free(flat);
}

void model_tensor_to_host(const Model *m, int t, float *out) {
    const Tensor *tn = &m->tensors[t];
    VX_CHECK(model_row_stride(m, t) == tn->dims.c, "tensor %d: a channel view is not contiguous", t);
    if (tn->dtype == DT_F32) {
        m->be->copy_to_host(out, model_tensor(m, t), (size_t)tn->count * sizeof(float));
        return;
    }
    void *raw = vx_malloc((size_t)tn->count * dtype_size(tn->dtype));
    m->be->copy_to_host(raw, model_tensor(m, t), (size_t)tn->count * dtype_size(tn->dtype));
    dtype_convert((size_t)tn->count, tn->dtype, raw, DT_F32, out);
    free(raw);
}

static LatentShape latent_shape(const Model *m) {
    const Tensor *mu = &m->tensors[m->t_mu];
    return (LatentShape){.n = mu->dims.n, .count_per_sample = mu->count / mu->dims.n,
                         .logvar_min = (float)m->cfg.logvar_min, .logvar_max = (float)m->cfg.logvar_max,
                         .dtype = mu->dtype};
}

void model_set_first_sample(Model *m, uint64_t first_sample) {
    /* sample b's noise is element (first_sample + b) * per-sample of one stream: a pure function of the global
     * sample index, the same whatever batch (or rank) the sample falls in; dropout keys its mask likewise */
    if (m->family == FAMILY_VIT3D_DIFFUSION) {
        diff_set_first_sample(m, first_sample); /* its timesteps too */
    } else if (m->family == FAMILY_AE3D) {
        const uint64_t offset = first_sample * (uint64_t)latent_shape(m).count_per_sample;
        m->be->write_async(exec_item(m, m->noise_offset_item), &offset, sizeof offset);
    } else {
        m->be->write_async(exec_item(m, m->noise_offset_item), &first_sample, sizeof first_sample);
    }
}

/* BatchNorm's forward: in training the batch's statistics (two passes, each summed over the ranks with SyncBatchNorm)
 * and the running statistics' update, in evaluation the running statistics; a checkpointed block's recomputation
 * (again) reuses the statistics its forward saved. The batch sums of the first bn_shared channels are copies of an
 * earlier BatchNorm's over the same memory (model.h; already summed over the ranks): only the rest are reduced. */
static void batchnorm_forward(Model *m, const Node *nd, const void *x, void *y, int train, int again) {
    const Backend *be = m->be;
    const int c = nd->bn.c, sync = m->cfg.resnet.sync_bn && m->world > 1 && m->allreduce_hook;
    float *mean = (float *)exec_item(m, nd->stats), *invstd = mean + c, *sum = mean + 2 * c, *sq = mean + 3 * c;
    float *rmean = m->bufs + m->buffers[nd->buffer].offset, *rvar = m->bufs + m->buffers[nd->buffer + 1].offset;
    const double count = (double)nd->bn.n * nd->bn.spatial * (sync ? m->world : 1);
    const float eps = (float)m->cfg.resnet.bn_eps, momentum = (float)m->cfg.resnet.bn_momentum;
    if (train && !again) {
        const int k = nd->bn_shared;
        if (k > 0) {
            const Node *from = &m->nodes[nd->bn_from];
            const float *from_sum = (const float *)exec_item(m, from->stats) + 2 * from->bn.c;
            be->elementwise->accumulate(DT_F32, k, from_sum, sum, 0.0f);
            be->elementwise->accumulate(DT_F32, k, from_sum + from->bn.c, sq, 0.0f);
        }
        if (k < c) { /* channels [k, c): the same rows, a narrower prefix from channel k */
            BatchNormShape rest = nd->bn;
            rest.c = c - k;
            rest.ldx = batchnorm_ldx(&nd->bn);
            const void *xr = (const char *)x + (size_t)k * dtype_size(nd->bn.dtype);
            be->batchnorm->stats(&rest, xr, NULL, count, sum + k);
            if (sync) m->allreduce_hook(m->dist_hook_ctx, sum + k, c - k, nd->name);
            be->batchnorm->stats(&rest, xr, sum + k, count, sq + k);
            if (sync) m->allreduce_hook(m->dist_hook_ctx, sq + k, c - k, nd->name);
        }
        be->batchnorm->finalize(c, count, eps, momentum, 1, sum, sq, mean, invstd, rmean, rvar);
    } else if (!again) { /* evaluation: the running statistics (a rerun keeps the batch's, still in stats) */
        be->batchnorm->finalize(c, count, eps, momentum, 0, NULL, NULL, mean, invstd, rmean, rvar);
    }
    be->batchnorm->forward(&nd->bn, x, mean, invstd, exec_param(m, m->param, nd->weight),
                           exec_param(m, m->param, nd->bias), y);
}

/* OP_CASCADE's forward, what a cascade's later stage is conditioned on in training and validation: the earlier
 * stage's network (m->cascade_prev, frozen, model_build.c) sees this batch's volumes x resampled to its own grid,
 * noised at its own draw (its seed and timesteps, set with this model's by diff_set_first_sample), and its estimate
 * of x0 from them, x0_hat = f(x_t, prediction) in the data's units, comes back resampled to this model's grid into
 * y, the channels after x_t. The same estimate a sampler's earlier stage makes at each step; a sampler hands the
 * later stage its finished sample instead (diffusion_sample.c), so this node does nothing while sampling.
 * Resampling is trilinear with align_corners=False both ways (resample.h), as torch.nn.functional.interpolate.
 * Here, not in model_exec_diff.c: it runs a whole model's forward, this file's. */
static void grid_of(const Model *m, int t, int g[3]) {
    const Dims d = m->tensors[t].dims;
    g[0] = d.d;
    g[1] = d.h;
    g[2] = d.w;
}

static void cascade_forward(Model *m, const Node *nd, const void *x, void *y) {
    if (m->sampling) return; /* the sampler wrote the earlier stage's sample into y */
    Model *p = m->cascade_prev;
    const Backend *be = m->be;
    const int n = m->batch, c = m->cfg.in_channels;
    int hi[3], lo[3];
    grid_of(m, m->t_input, hi);
    grid_of(p, p->t_input, lo);
    model_sync_lp(p); /* its weights are a buffer, which a load or a stage's start rewrote */
    be->resample->forward(DT_F32, n, hi, lo, c, x, model_tensor(p, p->t_input));
    model_forward(p, 0);
    const DiffusionShape s = diff_shape_of(p);
    const float *coef = model_diffusion_coefficients(p); /* [4][n]: t, alpha, sigma, weight */
    const long lo_count = p->tensors[p->t_input].count;
    char *est = exec_item(m, nd->aux); /* x0_hat in p's type, then as float32 */
    float *est32 = (float *)(est + (size_t)lo_count * sizeof(float));
    be->diffusion->predict_x0(&s, coef + n, coef + 2 * n, model_tensor(p, p->t_xt), model_tensor(p, p->t_recon), est);
    be->elementwise->cast(lo_count, s.dtype, est, DT_F32, est32);
    float *up = (float *)exec_item(m, nd->arg);
    be->resample->forward(DT_F32, n, lo, hi, c, est32, up);
    const Tensor *t = &m->tensors[nd->out];
    be->elementwise->cast(t->count, DT_F32, up, t->dtype, y);
}

/* One node's forward. `again` = 1: the recomputation of a checkpointed block, reading and writing the copies
 * backward uses (act_bwd; the same buffers as the forward's for every tensor that is not checkpointed). train: see
 * model_forward (ae3d: sample the latent noise). */
static void forward_node(Model *m, const Node *nd, int again, int sample_noise) {
    const Backend *be = m->be;
    void *ws = exec_item(m, m->workspace_item);
    void *(*tensor)(const Model *, int) = again ? exec_act_bwd : model_tensor;
    const void *x = tensor(m, nd->in[0]);
    void *y = tensor(m, nd->out);
    const Tensor *tx = &m->tensors[nd->in[0]];
    const DType dt = tx->dtype;
    switch (nd->kind) {
    case OP_CONV: {
        const void *res = nd->in[1] >= 0 ? tensor(m, nd->in[1]) : NULL;
        if (nd->pad_w >= 0) conv_pad_forward(m, nd, x, y, res, ws); /* padded channels (conv_pad.h) */
        else be->conv3d->forward(&nd->conv, x, exec_weight(m, nd->weight), exec_param(m, m->param, nd->bias), res, y, ws);
        break;
    }
    case OP_UPCONV: upconv_forward(m, nd, x, y, ws); break;
    case OP_GROUPNORM: {
        float *mean = (float *)exec_item(m, nd->stats), *rstd = mean + nd->gn.n * nd->gn.groups;
        be->groupnorm->forward(&nd->gn, x, exec_param(m, m->param, nd->weight), exec_param(m, m->param, nd->bias), y,
                              mean, rstd);
        break;
    }
    case OP_SILU: be->silu->forward(dt, tx->count, x, y); break;
    case OP_UPSAMPLE: be->upsample->forward(dt, tx->dims.n, tx->dims.d, tx->dims.h, tx->dims.w, tx->dims.c, x, y); break;
    case OP_ADD: be->elementwise->add(dt, tx->count, x, tensor(m, nd->in[1]), y); break;
    case OP_CAST: {
        const Tensor *ty = &m->tensors[nd->out];
        if (ty->dims.c == tx->dims.c) be->elementwise->cast(tx->count, dt, x, ty->dtype, y);
        else be->elementwise->pad_channels(tx->count / tx->dims.c, dt, tx->dims.c, x, ty->dtype, ty->dims.c, y, 0.0f);
        break;
    }
    case OP_LATENT: { /* never inside a checkpointed block */
        LatentShape s = latent_shape(m);
        float *eps = NULL;
        if (sample_noise) {
            eps = model_noise(m);
            be->normal->fill(tx->count, (uint64_t)m->seed, RNG_STREAM_LATENT,
                            (const uint64_t *)exec_item(m, m->noise_offset_item), eps);
        }
        be->latent->forward(&s, x, tensor(m, nd->in[1]), eps, y, m->losses + SCALAR_KL);
        break;
    }
    case OP_BATCHNORM: batchnorm_forward(m, nd, x, y, sample_noise, again); break;
    case OP_RELU: be->relu->forward(dt, tx->count, x, y); break;
    case OP_MAXPOOL: be->maxpool->forward(&nd->pool, x, y, (int32_t *)exec_item(m, nd->arg)); break;
    case OP_AVGPOOL: {
        const Dims d = tx->dims;
        be->avgpool->forward(dt, d.n, (long)d.d * d.h * d.w, d.c, x, y);
        break;
    }
    case OP_LINEAR:
        be->linear->forward(&nd->lin, x, exec_weight(m, nd->weight), exec_param(m, m->param, nd->bias), y);
        break;
    case OP_CONCAT: { /* y = [in[0] | in[1] | ...] along the channels */
        const int cy = m->tensors[nd->out].dims.c;
        const long rows = m->tensors[nd->out].count / cy;
        for (int p = 0, at = 0; p < NODE_MAX_IN && nd->in[p] >= 0; p++) {
            const int cp = m->tensors[nd->in[p]].dims.c;
            be->elementwise->copy_channels(rows, dt, cp, 0, tensor(m, nd->in[p]), cy, at, y, cp, 0.0f);
            at += cp;
        }
        break;
    }
    case OP_POOL_WINDOW: be->pool_window->forward(&nd->pw, x, y); break;
    case OP_CHANNEL_WRITE: /* x into the first channels of its output's rows: a dense block's buffer (model.h) */
        be->elementwise->copy_channels(tx->count / tx->dims.c, dt, tx->dims.c, 0, x, (int)model_row_stride(m, nd->out),
                                       0, y, tx->dims.c, 0.0f);
        break;
    case OP_DROPOUT:
        /* (a rerun in backward is training: the same keyed mask) */
        if (sample_noise || again) be->dropout->forward(&nd->drop, (const uint64_t *)exec_item(m, m->noise_offset_item), x, y);
        else be->elementwise->accumulate(dt, tx->count, x, y, 0.0f); /* evaluation: the identity */
        break;
    default: { /* the transformer's nodes, and the denoiser's */
        const void *x1 = nd->in[1] >= 0 ? tensor(m, nd->in[1]) : NULL, *x2 = nd->in[2] >= 0 ? tensor(m, nd->in[2]) : NULL;
        if (nd->kind == OP_CASCADE) cascade_forward(m, nd, x, y);
        else if (nd->kind >= OP_QSAMPLE) diff_forward_node(m, nd, x, x1, x2, y, sample_noise);
        else vit_forward_node(m, nd, x, x1, y);
        break;
    }
    }
}

void model_forward(Model *m, int sample_noise) {
    trace_range_push("forward", "user_annotation");
    for (int i = 0; i < m->n_nodes; i++) {
        trace_range_push(m->nodes[i].name, "cpu_op"); /* one range per layer; NVTX too in CUDA builds */
        if (m->node_hook) m->node_hook(m->node_hook_ctx, i, 0);
        forward_node(m, &m->nodes[i], 0, sample_noise);
        if (m->node_hook) m->node_hook(m->node_hook_ctx, i, 1);
        trace_range_pop();
    }
    trace_range_pop();
}

/* Activation checkpointing: before backward enters the block that ends at node i, its rerun nodes run again. */
static void recompute_block_ending_at(Model *m, int i) {
    for (int bi = 0; bi < m->n_blocks; bi++) {
        const Block *b = &m->blocks[bi];
        if (b->last != i) continue;
        trace_range_push("recompute", "user_annotation");
        for (int j = b->first; j < b->last; j++)
            if (m->nodes[j].recompute) {
                trace_range_push(m->nodes[j].name, "cpu_op");
                forward_node(m, &m->nodes[j], 1, 0);
                trace_range_pop();
            }
        trace_range_pop();
        return;
    }
}

/* Survival's Cox loss runs over the global batch: every rank's risk scores gathered in float32, the loss and its
 * gradient computed on each rank alike, and this rank's slice of that gradient kept. Its gradient is already the
 * global loss's, so it is not averaged over the ranks as the other losses' are (grad_scale x world undoes the
 * trainer's 1/world). */
static void cox_loss(Model *m, void *dz, float grad_scale, const float *loss_scale) {
    const Backend *be = m->be;
    const Tensor *t = &m->tensors[m->t_out];
    const long n = m->batch;
    float *all = (float *)exec_item(m, m->gathered_item), *dall = (float *)exec_item(m, m->gathered_grad_item);
    float *own = all + (long)m->rank * n;
    be->elementwise->cast(n, t->dtype, model_tensor(m, m->t_out), DT_F32, own);
    if (m->world > 1) {
        VX_CHECK(m->gather_hook != NULL, "the survival loss over %d ranks needs the ranks' gather", m->world);
        float *mine = dall; /* the gradient buffer is free until the loss: the send buffer of the gather */
        be->elementwise->accumulate(DT_F32, n, own, mine, 0.0f);
        m->gather_hook(m->dist_hook_ctx, mine, all, n, "the risk scores of the Cox loss");
    }
    const HeadLossShape hs = {.kind = HEAD_LOSS_COX, .n = (int)(n * m->world), .k = 1, .dtype = DT_F32};
    be->head_loss->run(&hs, all, (const float *)exec_item(m, m->target_item), NULL, m->losses + SCALAR_RECON,
                       dz ? dall : NULL, grad_scale * (float)m->world, loss_scale);
    if (dz) be->elementwise->cast(n, DT_F32, dall + (long)m->rank * n, t->dtype, dz);
}

/* The loss of the last forward, and its gradient into dpred (NULL: the loss only): ae3d's reconstruction (its KL
 * term is the latent node's), or the head's task loss against the targets (model_set_targets). */
static void loss(Model *m, void *dpred, float grad_scale, const float *loss_scale) {
    const Backend *be = m->be;
    if (m->family == FAMILY_VIT3D_DIFFUSION) { /* the prediction against v or eps, and the projection loss */
        diff_loss(m, dpred, grad_scale, loss_scale);
        return;
    }
    if (m->t_recon >= 0) { /* ae3d, vit3d: a reconstruction of the input */
        const Tensor *r = &m->tensors[m->t_recon];
        be->loss->recon(recon_loss_kind(&m->cfg), r->dtype, r->count, model_tensor(m, m->t_recon),
                        (const float *)model_tensor(m, m->t_input), m->losses + SCALAR_RECON, dpred, grad_scale,
                        loss_scale);
        return;
    }
    const Tensor *t = &m->tensors[m->t_out];
    const float *target = (const float *)exec_item(m, m->target_item);
    const int k = t->dims.c;
    switch (m->task) {
    case TASK_REGRESSION:
        be->loss->recon(LOSS_MSE, t->dtype, t->count, model_tensor(m, m->t_out), target, m->losses + SCALAR_RECON,
                        dpred, grad_scale, loss_scale);
        break;
    case TASK_SURVIVAL: cox_loss(m, dpred, grad_scale, loss_scale); break;
    default: {
        const HeadLossShape hs = {.kind = m->task == TASK_MULTILABEL ? HEAD_LOSS_BCE : HEAD_LOSS_CE, .n = m->batch,
                                  .k = k, .dtype = t->dtype};
        be->head_loss->run(&hs, model_tensor(m, m->t_out), target, m->head_weight, m->losses + SCALAR_RECON, dpred,
                           grad_scale, loss_scale);
    }
    }
}

void model_loss(Model *m) { loss(m, NULL, 1.0f, NULL); }

/* BatchNorm's backward: the per-channel sums of dy and dy*xhat, which are also the gradients of beta and gamma
 * (added to them before any all-reduce: data parallelism all-reduces the parameter gradients itself), then with
 * SyncBatchNorm summed over the ranks (one all-reduce of both), then dx. */
static void batchnorm_backward(Model *m, const Node *nd, const void *x, const void *dy, void *dx, float param_beta) {
    const Backend *be = m->be;
    const int c = nd->bn.c, sync = m->cfg.resnet.sync_bn && m->world > 1 && m->allreduce_hook;
    const float *mean = (const float *)exec_item(m, nd->stats), *invstd = mean + c;
    float *sum_dy = (float *)exec_item(m, nd->stats) + 2 * c, *sum_dy_xhat = sum_dy + c;
    const float *gamma = exec_param(m, m->param, nd->weight), *beta = exec_param(m, m->param, nd->bias);
    be->batchnorm->backward_reduce(&nd->bn, dy, x, mean, invstd, gamma, beta, sum_dy, sum_dy_xhat);
    be->elementwise->accumulate(DT_F32, c, sum_dy_xhat, exec_param_grad(m, nd->weight), param_beta);
    be->elementwise->accumulate(DT_F32, c, sum_dy, exec_param_grad(m, nd->bias), param_beta);
    if (!dx) return;
    if (sync) m->allreduce_hook(m->dist_hook_ctx, sum_dy, 2 * c, nd->name);
    const double count = (double)nd->bn.n * nd->bn.spatial * (sync ? m->world : 1);
    be->batchnorm->backward(&nd->bn, dy, x, mean, invstd, gamma, beta, sum_dy, sum_dy_xhat, count, dx,
                            nd->dx_beta[0]);
}

/* Node nd's backward: the gradients of its inputs (dx_beta: overwrite or add) and of its parameters (param_beta). */
static void backward_node(Model *m, const Node *nd, float grad_scale, float param_beta, const float *loss_scale) {
    const Backend *be = m->be;
    void *ws = exec_item(m, m->workspace_item);
    const void *x = exec_act_bwd(m, nd->in[0]);
    void *dx = model_tensor_grad(m, nd->in[0]); /* NULL for the input volume */
    const void *dy = model_tensor_grad(m, nd->out);
    const Tensor *tx = &m->tensors[nd->in[0]];
    const DType dt = tx->dtype;
    switch (nd->kind) {
    case OP_CONV:
        if (nd->pad_w >= 0) { /* padded channels (conv_pad.h) */
            conv_pad_backward(m, nd, x, dy, dx, param_beta, ws);
        } else {
            be->conv3d->backward_filter(&nd->conv, x, dy, exec_param_grad(m, nd->weight),
                                       exec_param_grad(m, nd->bias), param_beta, ws);
            if (dx) be->conv3d->backward_data(&nd->conv, dy, exec_weight(m, nd->weight), dx, nd->dx_beta[0], ws);
        }
        /* the fused residual's gradient is the output's */
        if (nd->in[1] >= 0) be->elementwise->accumulate(dt, m->tensors[nd->out].count, dy, model_tensor_grad(m, nd->in[1]), nd->dx_beta[1]);
        break;
    case OP_UPCONV: upconv_backward(m, nd, x, dy, dx, param_beta, ws); break;
    case OP_GROUPNORM: {
        const float *mean = (const float *)exec_item(m, nd->stats), *rstd = mean + nd->gn.n * nd->gn.groups;
        be->groupnorm->backward(&nd->gn, dy, x, exec_param(m, m->param, nd->weight), exec_param(m, m->param, nd->bias),
                               mean, rstd, dx, exec_param_grad(m, nd->weight), exec_param_grad(m, nd->bias),
                               nd->dx_beta[0], param_beta);
        break;
    }
    case OP_SILU: be->silu->backward(dt, tx->count, x, dy, dx, nd->dx_beta[0]); break;
    case OP_UPSAMPLE:
        be->upsample->backward(dt, tx->dims.n, tx->dims.d, tx->dims.h, tx->dims.w, tx->dims.c, dy, dx, nd->dx_beta[0]);
        break;
    case OP_ADD:
        be->elementwise->accumulate(dt, tx->count, dy, dx, nd->dx_beta[0]);
        be->elementwise->accumulate(dt, tx->count, dy, model_tensor_grad(m, nd->in[1]), nd->dx_beta[1]);
        break;
    case OP_CAST: break; /* the data's copy: no gradient */
    case OP_LATENT: {
        /* mu and logvar feed only this node, so their gradients are overwritten here (dx_beta is 0). */
        LatentShape s = latent_shape(m);
        be->latent->backward(&s, x, exec_act_bwd(m, nd->in[1]), model_noise(m), dy, (float)m->cfg.kl_weight * grad_scale,
                            loss_scale, dx, model_tensor_grad(m, nd->in[1]));
        break;
    }
    case OP_BATCHNORM: batchnorm_backward(m, nd, x, dy, dx, param_beta); break;
    case OP_RELU: be->relu->backward(dt, tx->count, exec_act_bwd(m, nd->out), dy, dx, nd->dx_beta[0]); break;
    case OP_MAXPOOL: be->maxpool->backward(&nd->pool, dy, (const int32_t *)exec_item(m, nd->arg), dx, nd->dx_beta[0]); break;
    case OP_AVGPOOL: {
        const Dims d = tx->dims;
        be->avgpool->backward(dt, d.n, (long)d.d * d.h * d.w, d.c, dy, dx, nd->dx_beta[0]);
        break;
    }
    case OP_LINEAR:
        be->linear->backward_filter(&nd->lin, x, dy, exec_param_grad(m, nd->weight), exec_param_grad(m, nd->bias),
                                    param_beta);
        if (dx) be->linear->backward_data(&nd->lin, dy, exec_weight(m, nd->weight), dx, nd->dx_beta[0]);
        break;
    case OP_CONCAT: { /* the gradient split back: each part's channels of dy to that part */
        const int cy = m->tensors[nd->out].dims.c;
        const long rows = m->tensors[nd->out].count / cy;
        for (int p = 0, at = 0; p < NODE_MAX_IN && nd->in[p] >= 0; p++) {
            const int cp = m->tensors[nd->in[p]].dims.c;
            void *dxp = model_tensor_grad(m, nd->in[p]);
            if (dxp) be->elementwise->copy_channels(rows, dt, cy, at, dy, cp, 0, dxp, cp, nd->dx_beta[p]);
            at += cp;
        }
        break;
    }
    case OP_POOL_WINDOW: be->pool_window->backward(&nd->pw, dy, dx, nd->dx_beta[0]); break;
    case OP_CHANNEL_WRITE: /* those channels of the buffer's gradient back to x */
        if (dx) be->elementwise->copy_channels(tx->count / tx->dims.c, dt, (int)model_row_stride(m, nd->out), 0, dy,
                                               tx->dims.c, 0,
                                               dx, tx->dims.c, nd->dx_beta[0]);
        break;
    case OP_DROPOUT:
        be->dropout->backward(&nd->drop, (const uint64_t *)exec_item(m, m->noise_offset_item), dy, dx, nd->dx_beta[0]);
        break;
    default: { /* the transformer's nodes, and the denoiser's */
        const void *x1 = nd->in[1] >= 0 ? exec_act_bwd(m, nd->in[1]) : NULL;
        const void *x2 = nd->in[2] >= 0 ? exec_act_bwd(m, nd->in[2]) : NULL;
        void *dx1 = nd->in[1] >= 0 ? model_tensor_grad(m, nd->in[1]) : NULL;
        void *dx2 = nd->in[2] >= 0 ? model_tensor_grad(m, nd->in[2]) : NULL;
        if (nd->kind >= OP_QSAMPLE) diff_backward_node(m, nd, x, x1, x2, dx, dx1, dx2, dy);
        else vit_backward_node(m, nd, x, x1, dx, dx1, dy, param_beta);
        break;
    }
    }
}

void model_backward(Model *m, float grad_scale, float param_beta, const float *loss_scale) {
    trace_range_push("loss", "cpu_op");
    loss(m, model_tensor_grad(m, m->t_recon >= 0 ? m->t_recon : m->t_out), grad_scale, loss_scale);
    trace_range_pop();
    trace_range_push("backward", "user_annotation");
    for (int i = m->n_nodes - 1; i >= 0; i--) {
        const Node *nd = &m->nodes[i];
        if (m->checkpoint_activations) recompute_block_ending_at(m, i);
        trace_range_push(nd->name, "cpu_op");
        if (m->backward_pre_hook) m->backward_pre_hook(m->backward_hook_ctx, i);
        if (m->node_hook) m->node_hook(m->node_hook_ctx, i, 2);
        backward_node(m, nd, grad_scale, param_beta, loss_scale);
        if (m->node_hook) m->node_hook(m->node_hook_ctx, i, 3);
        trace_range_pop();
        if (m->backward_hook) m->backward_hook(m->backward_hook_ctx, i);
    }
    trace_range_pop();
}

double model_second_loss_weight(const Model *m) {
    return m->family == FAMILY_AE3D ? m->cfg.kl_weight
           : m->family == FAMILY_VIT3D_DIFFUSION ? m->cfg.diff.physics_weight : 0.0;
}

Losses model_read_losses(const Model *m) {
    float s[2];
    m->be->copy_to_host(s, m->losses, sizeof s);
    if (m->family == FAMILY_VIT3D) return (Losses){.recon = s[SCALAR_RECON], .total = s[SCALAR_RECON]};
    if (m->family == FAMILY_VIT3D_DIFFUSION) { /* model_exec_diff.c: [0] diffusion, [1] projection */
        const float w = (float)m->cfg.diff.physics_weight, physics = w == 0.0f ? 0.0f : s[1];
        return (Losses){.recon = s[0], .physics = physics, .total = s[0] + w * physics};
    }
    if (m->family != FAMILY_AE3D) return (Losses){.total = s[SCALAR_RECON]}; /* the head's loss, in the same slot */
    return (Losses){.recon = s[SCALAR_RECON], .kl = s[SCALAR_KL],
                    .total = s[SCALAR_RECON] + (float)m->cfg.kl_weight * s[SCALAR_KL]};
}

double model_grad_sumsq(const Model *m) {
    float s;
    m->be->optim->sumsq(m->param_floats, m->grad, scalars(m) + SCALAR_SUMSQ);
    m->be->copy_to_host(&s, scalars(m) + SCALAR_SUMSQ, sizeof s);
    return s;
}

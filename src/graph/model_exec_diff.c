/* model_exec_diff.c: forward and backward of vit3d_diffusion's own nodes, its loss and its timesteps
 * (model_exec_diff.h), through the op tables:
 *   OP_QSAMPLE   the noise eps (normal.h, keyed by global sample and element as the ae3d's latent noise) and
 *                x_t = a x0 + s eps with the target v = a eps - s x0 (or eps) in one pass (diffusion.h); data: no
 *                backward
 *   OP_DRR       the two views of each sample's clean volume [n][2][img][img] (drr.h): AP (along H), lateral (along
 *                W); the conditioning, so no backward; with cfg.diff.views_given the views come from the data
 *                (model_set_views) and the node renders nothing
 *   (with m->sampling both are skipped: a sampler writes x_t and the views itself, diffusion_sample.c)
 *   OP_CASCADE   a cascade stage's condition: the earlier network's x0 estimate (its forward: model_exec.c); data
 *   OP_BACKPROJECT the views lifted into the volume (xray.backproject): each voxel's AP and lateral ray values
 *                [n][D][H][W][2] (drr.h's backproject), the channels beside x_t; data: no backward
 *   OP_TIMESTEP  the sinusoidal embedding of the micro-batch's timesteps (timestep.h); no backward
 *   OP_MODULATE  y = x (1 + scale[b]) + shift[b], shift and scale chunks of the adaLN modulation in[2] (adaln.h)
 *   OP_GATE      y = res + gate[b] * branch (in[0] res, in[1] branch, in[2] the modulation)
 * A modulation chunk's gradient is written by its one node (beta 0); the modulation's Linear reads them all.
 * The loss: diffusion.h's (min-SNR-)weighted MSE of the prediction against the target, plus loss.physics_weight
 * times the projection loss: x0_hat from x_t and the prediction, its two DRRs, their MSE against the input views
 * (the gradient back through the DRRs and x0_hat into the prediction's). Losses: [0] diffusion, [1] projection (the
 * slots of ae3d's recon and kl, which a step sums over micro-batches and ranks alike). */
#include "graph/model_exec_diff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "adaln/adaln.h"
#include "common/rng.h"
#include "core/util.h"
#include "diffusion/diffusion.h"
#include "drr/drr.h"
#include "elementwise/elementwise.h"
#include "loss/loss.h"
#include "graph/diffusion_schedule.h"
#include "graph/exec_ptr.h"
#include "normal/normal.h"
#include "timestep/timestep.h"

#define RNG_STREAM_DIFF_NOISE 0xD1F0ull /* the forward process's noise: index = sample * count + element */
#define RNG_STREAM_DIFF_T 0xD1F1ull     /* the timestep of each global sample */

static const float *coef(const Model *m, int row) { return (const float *)exec_item(m, m->coef_item) + row * m->batch; }
#define COEF_T 0
#define COEF_ALPHA 1
#define COEF_SIGMA 2
#define COEF_WEIGHT 3

static DiffusionShape diffusion_shape(const Model *m) {
    const Tensor *x = &m->tensors[m->t_xt];
    return (DiffusionShape){.n = m->batch, .count = x->count / m->batch,
                            .param = strcmp(m->cfg.diff.prediction, "epsilon") == 0 ? DIFFUSION_EPS : DIFFUSION_V,
                            .dtype = x->dtype, .data_scale = (float)m->cfg.diff.data_scale};
}

DiffusionShape diff_shape_of(const Model *m) { return diffusion_shape(m); }

/* view v of one sample's volume (x: its first element) */
static DrrShape drr_shape(const Model *m, int view, DType dt) {
    const ModelConfig *c = &m->cfg;
    const int along = view == 0 ? c->input_size[1] : c->input_size[2];
    return (DrrShape){.n = 1, .d = c->input_size[0], .h = c->input_size[1], .w = c->input_size[2], .view = view,
                      .img = c->diff.img_size, .mu_scale = (float)c->diff.mu_scale, .spacing = 1.0f / (float)along,
                      .dtype = dt};
}

/* both views of every sample of a volume batch vol [n][D][H][W] of type dt into img [n][2][img][img] */
void diff_render_views(const Model *m, const void *vol, DType dt, float *img) {
    const long per = m->tensors[m->t_input].count / m->batch, pixels = (long)m->cfg.diff.img_size * m->cfg.diff.img_size;
    for (int b = 0; b < m->batch; b++)
        for (int v = 0; v < 2; v++) {
            const DrrShape s = drr_shape(m, v, dt);
            m->be->drr->forward(&s, (const char *)vol + (size_t)b * per * dtype_size(dt), img + (2 * b + v) * pixels);
        }
}

static AdaLNShape adaln_shape(const Model *m, const Node *nd) {
    const Tensor *x = &m->tensors[nd->out], *mod = &m->tensors[nd->in[2]];
    return (AdaLNShape){.n = x->dims.n, .tokens = x->count / x->dims.n / x->dims.c, .c = x->dims.c,
                        .mod_stride = mod->dims.c, .dtype = x->dtype};
}
static const void *chunk_of(const void *mod, const AdaLNShape *s, int chunk) {
    return (const char *)mod + (size_t)chunk * s->c * dtype_size(s->dtype);
}

void diff_forward_node(Model *m, const Node *nd, const void *x, const void *x1, const void *x2, void *y, int train) {
    const Backend *be = m->be;
    (void)train;
    switch (nd->kind) {
    case OP_QSAMPLE: {
        if (m->sampling) break; /* x_t is the sampler's (diffusion_sample.c), already in y */
        const DiffusionShape s = diffusion_shape(m);
        float *eps = (float *)exec_item(m, m->eps_item);
        be->normal->fill(diffusion_total(&s), (uint64_t)m->seed, RNG_STREAM_DIFF_NOISE,
                         (const uint64_t *)exec_item(m, m->noise_offset_item), eps);
        be->diffusion->q_sample(&s, coef(m, COEF_ALPHA), coef(m, COEF_SIGMA), x, eps, y,
                                (float *)exec_item(m, m->diff_target_item));
        break;
    }
    case OP_DRR: /* sampling, or given views (data.view_columns, model_set_views): the views are in y already */
        if (!m->sampling && !m->cfg.diff.views_given) diff_render_views(m, x, DT_F32, y);
        break;
    case OP_BACKPROJECT: { /* x: the views [n][2][img][img] */
        const Tensor *t = &m->tensors[nd->out];
        const DrrShape s = {.n = m->batch, .d = t->dims.d, .h = t->dims.h, .w = t->dims.w, .img = m->cfg.diff.img_size,
                            .mu_scale = (float)m->cfg.diff.mu_scale, .spacing = 1.0f, .dtype = t->dtype};
        be->drr->backproject(&s, x, y);
        break;
    }
    case OP_TIMESTEP: {
        const TimestepShape s = {.n = m->batch, .dim = m->tensors[nd->out].dims.c, .max_period = 10000.0f,
                                 .dtype = m->tensors[nd->out].dtype};
        be->timestep->embed(&s, coef(m, COEF_T), y);
        break;
    }
    case OP_MODULATE: {
        const AdaLNShape s = adaln_shape(m, nd);
        be->adaln->modulate(&s, x, chunk_of(x2, &s, nd->chunk), chunk_of(x2, &s, nd->chunk + 1), y);
        break;
    }
    case OP_GATE: {
        const AdaLNShape s = adaln_shape(m, nd);
        be->adaln->gate(&s, x, x1, chunk_of(x2, &s, nd->chunk), y);
        break;
    }
    default: vx_fatal("diff_forward_node: node %s is not a diffusion node", nd->name);
    }
}

void diff_backward_node(Model *m, const Node *nd, const void *x, const void *x1, const void *x2, void *dx, void *dx1,
                        void *dx2, const void *dy) {
    const Backend *be = m->be;
    switch (nd->kind) {
    case OP_QSAMPLE:
    case OP_DRR:
    case OP_BACKPROJECT:
    case OP_CASCADE: /* (the earlier network is frozen) */
    case OP_TIMESTEP: break; /* data: nothing upstream has a gradient */
    case OP_MODULATE: {
        const AdaLNShape s = adaln_shape(m, nd);
        VX_CHECK(dx && dx2, "diff_backward_node: %s has no input gradient", nd->name);
        be->adaln->modulate_backward(&s, dy, x, chunk_of(x2, &s, nd->chunk + 1), dx,
                                     (void *)chunk_of(dx2, &s, nd->chunk), (void *)chunk_of(dx2, &s, nd->chunk + 1),
                                     nd->dx_beta[0], 0.0f);
        break;
    }
    case OP_GATE: {
        const AdaLNShape s = adaln_shape(m, nd);
        const Tensor *t = &m->tensors[nd->out];
        if (dx) be->elementwise->accumulate(t->dtype, t->count, dy, dx, nd->dx_beta[0]); /* the residual's */
        be->adaln->gate_backward(&s, dy, x1, chunk_of(x2, &s, nd->chunk), dx1, (void *)chunk_of(dx2, &s, nd->chunk),
                                 nd->dx_beta[1], 0.0f);
        break;
    }
    default: vx_fatal("diff_backward_node: node %s is not a diffusion node", nd->name);
    }
}

void diff_loss(Model *m, void *dpred, float grad_scale, const float *loss_scale) {
    const Backend *be = m->be;
    const DiffusionShape s = diffusion_shape(m);
    const void *pred = exec_act(m, m->t_recon);
    be->diffusion->loss(&s, pred, (const float *)exec_item(m, m->diff_target_item), coef(m, COEF_WEIGHT),
                        m->losses + 0, dpred, grad_scale, loss_scale);
    const float weight = (float)m->cfg.diff.physics_weight;
    if (weight == 0.0f) { /* a 0 in the projection's slot (a step sums both): the diffusion loss times 0, which
                             keeps a NaN loss NaN in both */
        be->elementwise->accumulate(DT_F32, 1, m->losses + 0, m->losses + 1, 0.0f);
        be->elementwise->scale(1, m->losses + 1, 0.0f);
        return;
    }
    /* the projection loss: DRRs of x0_hat = f(x_t, pred) against the views of x0 */
    char *x0hat = exec_item(m, m->x0hat_item), *dx0hat = x0hat + (size_t)s.n * s.count * sizeof(float);
    float *views = (float *)exec_item(m, m->x0views_item);
    const long pixels = m->tensors[m->t_views].count;
    float *dviews = views + pixels;
    be->diffusion->predict_x0(&s, coef(m, COEF_ALPHA), coef(m, COEF_SIGMA), exec_act(m, m->t_xt), pred, x0hat);
    diff_render_views(m, x0hat, s.dtype, views);
    be->loss->recon(LOSS_MSE, DT_F32, pixels, views, (const float *)exec_act(m, m->t_views), m->losses + 1,
                    dpred ? dviews : NULL, grad_scale * weight, loss_scale);
    if (!dpred) return;
    const long per = s.count, img2 = (long)m->cfg.diff.img_size * m->cfg.diff.img_size;
    for (int b = 0; b < s.n; b++)
        for (int v = 0; v < 2; v++) { /* each view's gradient into the sample's dx0_hat (the second adds) */
            const DrrShape ds = drr_shape(m, v, s.dtype);
            const size_t off = (size_t)b * per * dtype_size(s.dtype);
            be->drr->backward(&ds, x0hat + off, dviews + (2 * b + v) * img2, dx0hat + off, v ? 1.0f : 0.0f);
        }
    be->diffusion->predict_x0_backward(&s, coef(m, COEF_ALPHA), coef(m, COEF_SIGMA), dx0hat, dpred, 1.0f);
}

static void write_coefficients(Model *m, const int *t) {
    const DiffusionConfig *df = &m->cfg.diff;
    const int n = m->batch;
    const DiffusionParam param = strcmp(df->prediction, "epsilon") == 0 ? DIFFUSION_EPS : DIFFUSION_V;
    float *host = vx_malloc(4 * (size_t)n * sizeof(float));
    for (int b = 0; b < n; b++) {
        const double ab = m->alphabar[t[b]];
        host[COEF_T * n + b] = (float)t[b];
        diffusion_coefficients(ab, &host[COEF_ALPHA * n + b], &host[COEF_SIGMA * n + b]);
        host[COEF_WEIGHT * n + b] =
            df->min_snr_gamma > 0 ? (float)diffusion_min_snr_weight(ab, df->min_snr_gamma, param) : 1.0f;
    }
    m->be->write_async(exec_item(m, m->coef_item), host, 4 * (size_t)n * sizeof(float));
    free(host);
}

void diff_set_first_sample(Model *m, uint64_t first_sample) {
    const int T = m->cfg.diff.timesteps;
    int *t = vx_malloc((size_t)m->batch * sizeof(int));
    for (int b = 0; b < m->batch; b++) {
        const double u = vx_uniform01(vx_hash3((uint64_t)m->seed, RNG_STREAM_DIFF_T, first_sample + (uint64_t)b));
        t[b] = (int)(u * T) < T ? (int)(u * T) : T - 1;
    }
    write_coefficients(m, t);
    free(t);
    /* the noise of sample b is element (first_sample + b) * count of one stream, as the latent's */
    const uint64_t offset = first_sample * (uint64_t)(m->tensors[m->t_xt].count / m->batch);
    m->be->write_async(exec_item(m, m->noise_offset_item), &offset, sizeof offset);
    if (m->cascade_prev) diff_set_first_sample(m->cascade_prev, first_sample); /* its own draw (its seed) */
}

void diff_set_timesteps(Model *m, const int *t) { write_coefficients(m, t); }

void model_set_views(Model *m, const float *views) {
    VX_CHECK(m->t_views >= 0 && m->cfg.diff.views_given, "model_set_views: the model takes no given views");
    m->be->write_async(exec_act(m, m->t_views), views, (size_t)m->tensors[m->t_views].count * sizeof(float));
}

const float *model_diffusion_target(const Model *m) { return (const float *)exec_item(m, m->diff_target_item); }
const float *model_diffusion_coefficients(const Model *m) { return coef(m, 0); }

/* count values of type dt at backend pointer src into float32 host memory (model_tensor_to_host's copy, which
 * model_exec.c, the caller of this file, holds) */
static void to_host(const Model *m, const void *src, DType dt, long count, float *out) {
    if (dt == DT_F32) {
        m->be->copy_to_host(out, src, (size_t)count * sizeof(float));
        return;
    }
    void *raw = vx_malloc((size_t)count * dtype_size(dt));
    m->be->copy_to_host(raw, src, (size_t)count * dtype_size(dt));
    dtype_convert((size_t)count, dt, raw, DT_F32, out);
    free(raw);
}

void model_diffusion_sample_losses(const Model *m, int used, double *diff, double *proj) {
    const DiffusionShape s = diffusion_shape(m);
    const long n = s.n, count = s.count;
    float *pred = vx_malloc((size_t)(n * count) * sizeof(float));
    float *target = vx_malloc((size_t)(n * count) * sizeof(float)), *w = vx_malloc((size_t)n * sizeof(float));
    to_host(m, exec_act(m, m->t_recon), m->tensors[m->t_recon].dtype, n * count, pred);
    m->be->copy_to_host(target, exec_item(m, m->diff_target_item), (size_t)(n * count) * sizeof(float));
    m->be->copy_to_host(w, coef(m, COEF_WEIGHT), (size_t)n * sizeof(float));
    for (int b = 0; b < used; b++) { /* diffusion.h's loss, one sample's share */
        double se = 0;
        for (long i = b * count; i < (b + 1) * count; i++)
            se += ((double)pred[i] - target[i]) * ((double)pred[i] - target[i]);
        diff[b] = (double)w[b] * se / (double)count;
    }
    const long pixels = m->tensors[m->t_views].count, per = pixels / n;
    float *views = m->cfg.diff.physics_weight != 0 ? vx_malloc((size_t)pixels * 2 * sizeof(float)) : NULL;
    if (views) { /* diff_loss rendered the estimate's views (x0views), the input's are t_views */
        m->be->copy_to_host(views, exec_item(m, m->x0views_item), (size_t)pixels * sizeof(float));
        to_host(m, exec_act(m, m->t_views), m->tensors[m->t_views].dtype, pixels, views + pixels);
    }
    for (int b = 0; b < used; b++) {
        double se = 0;
        for (long i = b * per; views && i < (b + 1) * per; i++)
            se += ((double)views[i] - views[pixels + i]) * ((double)views[i] - views[pixels + i]);
        proj[b] = se / (double)per;
    }
    free(views);
    free(w);
    free(target);
    free(pred);
}

/* conv_pad.c: the channel rule of 16-bit convolutions (see conv_pad.h). */
#include "graph/conv_pad.h"

#include "conv3d/conv3d.h"
#include "core/util.h"
#include "elementwise/elementwise.h"

int conv_pad_channels(DType dt, int c, int all) {
    return (dt != DT_F32 || all) && c % 8 ? (c + 7) / 8 * 8 : c;
}

void conv_pad_shape(const Model *m, Conv3dShape *s, int input_is_data) {
    if (!input_is_data) s->c_in = conv_pad_channels(s->dtype, s->c_in, m->pad_all_types);
    s->c_out = conv_pad_channels(s->dtype, s->c_out, m->pad_all_types);
}

static void *item(const Model *m, int i) { return m->arena + m->plan.items[i].offset; }
static float *view(const Model *m, float *flat, int v) { return v < 0 ? NULL : flat + m->params[v].offset; }
static float *grad_view(const Model *m, int v) { return v < 0 ? NULL : m->grad + m->params[v].grad_offset; }

void conv_pad_plan(Model *m, Node *nd, int i, int T) {
    nd->pad_w = nd->pad_dw = nd->pad_db = nd->pad_b = nd->pad_x = nd->pad_y = nd->pad_dy = nd->pad_dx = -1;
    const ParamView *w = &m->params[nd->weight];
    const Tensor *x = &m->tensors[nd->in[0]], *y = &m->tensors[nd->out];
    const Conv3dShape *s = &nd->conv;
    if (s->c_in == w->shape[4] && s->c_out == w->shape[0]) return;
    const size_t ds = dtype_size(s->dtype);
    const int has_dx = x->grad >= 0;
    /* A rerun (checkpointed block) writes the forward's buffers again at its block's recomputation, which falls
     * between this node's forward (i) and backward (T - i); backward-data reads the padded weights. */
    const int fwd_last = nd->recompute ? T - i : i;
    nd->pad_w = plan_add(&m->plan, (size_t)conv3d_weight_count(s) * ds, i, has_dx ? T - i : fwd_last);
    nd->pad_dw = plan_add(&m->plan, (size_t)conv3d_weight_count(s) * sizeof(float), T - i, T - i);
    nd->pad_db = plan_add(&m->plan, (size_t)s->c_out * sizeof(float), T - i, T - i);
    if (nd->bias >= 0 && s->c_out != w->shape[0]) nd->pad_b = plan_add(&m->plan, (size_t)s->c_out * sizeof(float), i, fwd_last);
    if (x->dims.c != s->c_in) { /* backward-filter reads the padded input */
        nd->pad_x = plan_add(&m->plan, (size_t)(x->count / x->dims.c) * s->c_in * ds, i, T - i);
        if (has_dx) nd->pad_dx = plan_add(&m->plan, (size_t)(x->count / x->dims.c) * s->c_in * ds, T - i, T - i);
    }
    if (y->dims.c != s->c_out) {
        nd->pad_y = plan_add(&m->plan, (size_t)(y->count / y->dims.c) * s->c_out * ds, i, fwd_last);
        nd->pad_dy = plan_add(&m->plan, (size_t)(y->count / y->dims.c) * s->c_out * ds, T - i, T - i);
    }
}

/* the padded weights (and bias) from the float32 master: real rows padded with zero columns, then zero rows */
static void pad_weights(Model *m, const Node *nd) {
    const Backend *be = m->be;
    const Conv3dShape *s = &nd->conv;
    const ParamView *w = &m->params[nd->weight];
    const int co = w->shape[0], ci = w->shape[4], k3 = s->k[0] * s->k[1] * s->k[2];
    char *wp = item(m, nd->pad_w);
    be->elementwise->pad_channels((long)co * k3, DT_F32, ci, view(m, m->param, nd->weight), s->dtype, s->c_in, wp,
                                  0.0f);
    if (s->c_out > co) /* rows of no source channel: zeros */
        be->elementwise->pad_channels(1, DT_F32, 0, view(m, m->param, nd->weight), s->dtype, (s->c_out - co) * k3 * s->c_in,
                                      wp + (size_t)co * k3 * s->c_in * dtype_size(s->dtype), 0.0f);
    if (nd->pad_b >= 0)
        be->elementwise->pad_channels(1, DT_F32, co, view(m, m->param, nd->bias), DT_F32, s->c_out, item(m, nd->pad_b),
                                      0.0f);
}

void conv_pad_forward(Model *m, const Node *nd, const void *x, void *y, const void *residual, void *ws) {
    const Backend *be = m->be;
    const Conv3dShape *s = &nd->conv;
    const Tensor *tx = &m->tensors[nd->in[0]], *ty = &m->tensors[nd->out];
    pad_weights(m, nd);
    if (nd->pad_x >= 0) {
        be->elementwise->pad_channels(tx->count / tx->dims.c, s->dtype, tx->dims.c, x, s->dtype, s->c_in,
                                      item(m, nd->pad_x), 0.0f);
        x = item(m, nd->pad_x);
    }
    const float *bias = nd->pad_b >= 0 ? item(m, nd->pad_b) : view(m, m->param, nd->bias);
    if (nd->pad_y < 0) {
        be->conv3d->forward(s, x, item(m, nd->pad_w), bias, residual, y, ws);
        return;
    }
    be->conv3d->forward(s, x, item(m, nd->pad_w), bias, NULL, item(m, nd->pad_y), ws);
    be->elementwise->pad_channels(ty->count / ty->dims.c, s->dtype, s->c_out, item(m, nd->pad_y), s->dtype, ty->dims.c,
                                  y, 0.0f);
    if (residual) be->elementwise->accumulate(s->dtype, ty->count, residual, y, 1.0f);
}

void conv_pad_backward(Model *m, const Node *nd, const void *x, const void *dy, void *dx, float param_beta, void *ws) {
    const Backend *be = m->be;
    const Conv3dShape *s = &nd->conv;
    const ParamView *w = &m->params[nd->weight];
    const Tensor *tx = &m->tensors[nd->in[0]], *ty = &m->tensors[nd->out];
    const int co = w->shape[0], ci = w->shape[4], k3 = s->k[0] * s->k[1] * s->k[2];
    if (nd->pad_x >= 0) x = item(m, nd->pad_x); /* the padded copy the forward (or the block's rerun) made */
    if (nd->pad_dy >= 0) {
        be->elementwise->pad_channels(ty->count / ty->dims.c, s->dtype, ty->dims.c, dy, s->dtype, s->c_out,
                                      item(m, nd->pad_dy), 0.0f);
        dy = item(m, nd->pad_dy);
    }
    /* padded gradients overwritten (one beta covers dw and db, so db has a buffer of its own), then their real
     * rows and columns added to the parameters' (param_beta) */
    float *dw = item(m, nd->pad_dw), *db = item(m, nd->pad_db);
    be->conv3d->backward_filter(s, x, dy, dw, db, 0.0f, ws);
    be->elementwise->pad_channels((long)co * k3, DT_F32, s->c_in, dw, DT_F32, ci, grad_view(m, nd->weight),
                                  param_beta);
    if (nd->bias >= 0) be->elementwise->accumulate(DT_F32, co, db, grad_view(m, nd->bias), param_beta);
    if (!dx) return;
    if (nd->pad_dx < 0) {
        be->conv3d->backward_data(s, dy, item(m, nd->pad_w), dx, nd->dx_beta[0], ws);
        return;
    }
    be->conv3d->backward_data(s, dy, item(m, nd->pad_w), item(m, nd->pad_dx), 0.0f, ws);
    be->elementwise->pad_channels(tx->count / tx->dims.c, s->dtype, s->c_in, item(m, nd->pad_dx), s->dtype, tx->dims.c,
                                  dx, nd->dx_beta[0]);
}

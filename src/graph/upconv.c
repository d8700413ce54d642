/* upconv.c: the upsampling convolution as one phase convolution (see upconv.h). */
#include "graph/upconv.h"

#include "core/util.h"

static void *item(const Model *m, int i) { return m->arena + m->plan.items[i].offset; }
static float *view(const Model *m, float *flat, int v) { return v < 0 ? NULL : flat + m->params[v].offset; }
static float *grad_view(const Model *m, int v) { return v < 0 ? NULL : m->grad + m->params[v].grad_offset; }

void upconv_plan(Model *m, Node *nd, int i, int T) {
    /* (never inside a checkpointed block: no rerun writes its buffers between forward and backward) */
    VX_CHECK(!nd->recompute, "%s: the upsampling convolution is not made to be recomputed", nd->name);
    const UpconvPhaseShape *s = &nd->up;
    const size_t ds = dtype_size(s->dtype);
    const int has_dx = m->tensors[nd->in[0]].grad >= 0;
    const long pwc = upconv_phase_phase_weight_count(s);
    nd->up_pw = plan_add(&m->plan, (size_t)pwc * ds, i, has_dx && !m->inference ? T - i : i); /* backward-data's */
    nd->up_pb = nd->bias >= 0 ? plan_add(&m->plan, 8 * (size_t)s->c_out * sizeof(float), i, i) : -1;
    nd->up_z = plan_add(&m->plan, (size_t)upconv_phase_z_count(s) * ds, i, i);
    nd->up_dz = nd->up_dpw = nd->up_dpb = -1;
    if (m->inference) return;
    nd->up_dz = plan_add(&m->plan, (size_t)upconv_phase_z_count(s) * ds, T - i, T - i);
    nd->up_dpw = plan_add(&m->plan, (size_t)pwc * sizeof(float), T - i, T - i);
    nd->up_dpb = plan_add(&m->plan, 8 * (size_t)s->c_out * sizeof(float), T - i, T - i);
}

void upconv_forward(Model *m, const Node *nd, const void *x, void *y, void *ws) {
    const Backend *be = m->be;
    float *pb = nd->up_pb >= 0 ? item(m, nd->up_pb) : NULL;
    be->upconv_phase->weights(&nd->up, view(m, m->param, nd->weight), view(m, m->param, nd->bias), item(m, nd->up_pw),
                              pb);
    be->conv3d->forward(&nd->conv, x, item(m, nd->up_pw), pb, NULL, item(m, nd->up_z), ws);
    be->upconv_phase->shuffle(&nd->up, item(m, nd->up_z), y);
}

void upconv_backward(Model *m, const Node *nd, const void *x, const void *dy, void *dx, float param_beta, void *ws) {
    const Backend *be = m->be;
    void *dz = item(m, nd->up_dz);
    float *dpw = item(m, nd->up_dpw), *dpb = nd->bias >= 0 ? item(m, nd->up_dpb) : NULL;
    be->upconv_phase->unshuffle(&nd->up, dy, dz);
    be->conv3d->backward_filter(&nd->conv, x, dz, dpw, dpb, 0.0f, ws);
    be->upconv_phase->fold(&nd->up, dpw, dpb, grad_view(m, nd->weight), grad_view(m, nd->bias), param_beta);
    if (dx) be->conv3d->backward_data(&nd->conv, dz, item(m, nd->up_pw), dx, nd->dx_beta[0], ws);
}

/* build.c: the pieces every family's builder makes a model of (see build.h): tensors, parameters, buffers, nodes,
 * the convolution and the input. Below the builders, which call it, and model_build.c, which calls them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "families/build.h"
#include "graph/conv_pad.h"

int build_tensor(Model *m, Dims d, int producer, DType dtype) {
    GROW(m->tensors, m->n_tensors, m->cap_tensors);
    m->tensors[m->n_tensors] = (Tensor){.dims = d, .count = (long)d.n * d.d * d.h * d.w * d.c, .dtype = dtype,
                                        .act = -1, .grad = -1, .producer = producer, .view_of = -1};
    return m->n_tensors++;
}

int build_param(Model *m, const char *prefix, const char *suffix, int ndim, const int *shape) {
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

Node *build_node(Model *m, OpKind kind, const char *name, int in0, int in1, Dims out) {
    GROW(m->nodes, m->n_nodes, m->cap_nodes);
    Node *nd = &m->nodes[m->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    snprintf(nd->name, sizeof nd->name, "%s", name);
    for (int s = 0; s < NODE_MAX_IN; s++) nd->in[s] = -1;
    nd->in[0] = in0;
    nd->in[1] = in1;
    nd->weight = nd->bias = nd->stats = nd->buffer = nd->arg = nd->aux = -1;
    nd->pad_w = nd->pad_dw = nd->pad_db = -1;
    nd->out = build_tensor(m, out, m->n_nodes, m->dtype);
    m->n_nodes++;
    return nd;
}

Node *build_fused_norm(Model *m, const char *norm_name, const char *act_name) {
    Node *nd = &m->nodes[m->n_nodes - 1];
    const char *act = strrchr(act_name, '.');
    snprintf(nd->name, sizeof nd->name, "%s+%s", norm_name, act ? act + 1 : act_name);
    return nd;
}

int build_conv(Model *m, const char *name, int x, int w_cin, int c_out, const int k[3], const int stride[3],
               const int pad[3], int bias) {
    Dims in = m->tensors[x].dims;
    Conv3dShape s = conv3d_shape_3d(in.n, in.d, in.h, in.w, in.c, c_out, k, stride, pad);
    s.dtype = m->dtype;
    s.bf16_math = m->bf16_math;
    conv_pad_shape(m, &s, x == m->t_input_lp); /* 16-bit: channels padded to multiples of 8 (conv_pad.h) */
    Node *nd = build_node(m, OP_CONV, name, x, -1, (Dims){in.n, s.od, s.oh, s.ow, c_out});
    nd->conv = s;
    nd->weight = build_param(m, name, "weight", 5, (int[]){c_out, k[0], k[1], k[2], w_cin});
    if (bias) nd->bias = build_param(m, name, "bias", 1, (int[]){c_out});
    return nd->out;
}

int build_buffer(Model *m, const char *prefix, const char *suffix, long count) {
    GROW(m->buffers, m->n_buffers, m->cap_buffers);
    BufferView *b = &m->buffers[m->n_buffers];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s.%s", prefix, suffix);
    b->offset = m->buffer_floats;
    b->count = count;
    m->buffer_floats += count;
    return m->n_buffers++;
}

int build_concat(Model *m, const char *name, const int *parts, int n) {
    VX_CHECK(n >= 1 && n <= NODE_MAX_IN, "%s: %d parts to concatenate, 1 to %d", name, n, NODE_MAX_IN);
    Dims out = m->tensors[parts[0]].dims;
    for (int i = 1; i < n; i++) out.c += m->tensors[parts[i]].dims.c;
    Node *nd = build_node(m, OP_CONCAT, name, -1, -1, out);
    for (int i = 0; i < n; i++) nd->in[i] = parts[i];
    return nd->out;
}

int build_channel_buffer(Model *m, const char *name, int x, int c) {
    Dims d = m->tensors[x].dims;
    VX_CHECK(c >= d.c, "%s: a buffer of %d channels cannot hold %d", name, c, d.c);
    d.c = c;
    return build_node(m, OP_CHANNEL_WRITE, name, x, -1, d)->out;
}

int build_channel_write(Model *m, const char *name, int x, int buf, int at) {
    const Dims b = m->tensors[buf].dims;
    Dims d = m->tensors[x].dims;
    VX_CHECK(d.n == b.n && d.d == b.d && d.h == b.h && d.w == b.w && at >= 0 && at + d.c <= b.c,
             "%s: %d channels at %d do not fit the buffer's %d", name, d.c, at, b.c);
    Node *nd = build_node(m, OP_CHANNEL_WRITE, name, x, -1, d);
    m->tensors[nd->out].view_of = buf;
    m->tensors[nd->out].c_at = at;
    return nd->out;
}

int build_channel_view(Model *m, int buf, int c) {
    Dims d = m->tensors[buf].dims;
    if (c == d.c) return buf;
    d.c = c;
    const int t = build_tensor(m, d, m->tensors[buf].producer, m->dtype);
    m->tensors[t].view_of = buf;
    return t;
}

void build_segment(Model *m, int first) {
    GROW(m->blocks, m->n_blocks, m->cap_blocks);
    m->blocks[m->n_blocks++] = (Block){.first = first, .last = m->n_nodes - 1};
}

void build_input(Model *m) {
    const ModelConfig *c = &m->cfg;
    m->t_input = build_tensor(m, (Dims){m->batch, c->input_size[0], c->input_size[1], c->input_size[2],
                                        c->in_channels}, -1, DT_F32);
    /* the loss may compare with the float32 input; the first conv reads it in the model's type, its channels padded
     * with zeros to a multiple of 8 where that lets cuDNN use tensor cores (pad_input_channels auto: bf16/fp16; on:
     * always) */
    Dims lp = m->tensors[m->t_input].dims;
    const char *pad = c->pad_input_channels;
    if (strcmp(pad, "on") == 0 || (strcmp(pad, "auto") == 0 && m->dtype != DT_F32)) lp.c = (lp.c + 7) / 8 * 8;
    const int own_copy = m->dtype != DT_F32 || lp.c != c->in_channels;
    m->t_input_lp = own_copy ? build_node(m, OP_CAST, "input_cast", m->t_input, -1, lp)->out : m->t_input;
}

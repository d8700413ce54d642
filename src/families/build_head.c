/* build_head.c: the pieces the head families (resnet3d, densenet: MONAI's classifiers) share (see build.h): a
 * convolution that is 1 deep on 2-D films, BatchNorm with running statistics, ReLU, max pooling, and the head (global
 * average pool, optional dropout, a Linear to model.num_classes) with the task it serves. */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "families/build.h"

int build_conv_nd(Model *m, const char *name, int x, int c_out, int k, int s, int pad, int bias) {
    const int two_d = m->cfg.resnet.spatial_dims == 2;
    const int kk[3] = {two_d ? 1 : k, k, k}, ss[3] = {two_d ? 1 : s, s, s}, pp[3] = {two_d ? 0 : pad, pad, pad};
    return build_conv(m, name, x, m->tensors[x].dims.c, c_out, kk, ss, pp, bias);
}

int build_batchnorm(Model *m, const char *name, int x) {
    const Dims in = m->tensors[x].dims;
    Node *nd = build_node(m, OP_BATCHNORM, name, x, -1, in);
    nd->bn = (BatchNormShape){.n = in.n, .spatial = (long)in.d * in.h * in.w, .c = in.c, .dtype = m->dtype,
                              .ldx = model_row_stride(m, x)}; /* (a dense layer's: the prefix of its block's buffer) */
    nd->weight = build_param(m, name, "weight", 1, (int[]){in.c});
    nd->bias = build_param(m, name, "bias", 1, (int[]){in.c});
    nd->buffer = build_buffer(m, name, "running_mean", in.c);
    build_buffer(m, name, "running_var", in.c);
    return nd->out;
}

int build_relu(Model *m, const char *name, int x) {
    return build_node(m, OP_RELU, name, x, -1, m->tensors[x].dims)->out;
}

/* BatchNorm then ReLU: with train.fuse one node (batchnorm.h's shape.relu), named "<norm>+<the ReLU's last name>"
 * as ae3d's GroupNorm+SiLU, its parameters and buffers the norm's; else the two nodes. Bits as the pair's in float32:
 * the fused node clamps as relu.h does and its backward masks dy by its output, as ReLU's backward does. */
int build_batchnorm_relu(Model *m, const char *norm_name, const char *relu_name, int x) {
    const int y = build_batchnorm(m, norm_name, x);
    if (!m->fuse) return build_relu(m, relu_name, y);
    build_fused_norm(m, norm_name, relu_name)->bn.relu = 1;
    return y;
}

int build_maxpool(Model *m, const char *name, int x, int k, int stride, int pad) {
    const Dims in = m->tensors[x].dims;
    MaxPoolShape ps = maxpool_shape(in.n, in.d, in.h, in.w, in.c, k, stride, pad);
    ps.dtype = m->dtype;
    Node *nd = build_node(m, OP_MAXPOOL, name, x, -1, (Dims){in.n, ps.od, ps.oh, ps.ow, in.c});
    nd->pool = ps;
    return nd->out;
}

void build_head_task(Model *m) {
    const char *task = m->cfg.head.task;
    m->task = strcmp(task, "multilabel") == 0   ? TASK_MULTILABEL
              : strcmp(task, "regression") == 0 ? TASK_REGRESSION
              : strcmp(task, "survival") == 0   ? TASK_SURVIVAL
                                                : TASK_CLASSIFICATION;
    m->labels = m->task == TASK_CLASSIFICATION ? 1 : m->task == TASK_SURVIVAL ? 2 : m->cfg.head.num_classes;
}

void build_head(Model *m, int x, const char *pool_name, const char *dropout_name, const char *fc_name) {
    const ModelConfig *c = &m->cfg;
    const Dims f = m->tensors[x].dims;
    int h = build_node(m, OP_AVGPOOL, pool_name, x, -1, (Dims){f.n, 1, 1, 1, f.c})->out;
    if (c->head.dropout > 0) {
        Node *nd = build_node(m, OP_DROPOUT, dropout_name, h, -1, m->tensors[h].dims);
        nd->drop = (DropoutShape){.n = f.n, .per_sample = f.c, .p = (float)c->head.dropout,
                                  .seed = (uint64_t)m->seed, .stream = 0xD209ull, .dtype = m->dtype};
        h = nd->out;
    }
    const int k = c->head.num_classes;
    Node *fc = build_node(m, OP_LINEAR, fc_name, h, -1, (Dims){f.n, 1, 1, 1, k});
    fc->lin = (LinearShape){.n = f.n, .in = f.c, .out = k, .dtype = m->dtype};
    fc->weight = build_param(m, fc_name, "weight", 2, (int[]){k, f.c});
    fc->bias = build_param(m, fc_name, "bias", 1, (int[]){k});
    m->t_out = fc->out;
}

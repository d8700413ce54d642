/* build_densenet.c: MONAI's DenseNet (monai.networks.nets.DenseNet121/169/201) as nodes, its parameter and buffer
 * names MONAI's state_dict keys, and the head families' prediction head:
 *   features.conv0 (7, stride 2, padding 3, no bias) -> norm0 -> relu0 -> pool0 (max 3/2/1)
 *   -> denseblock1..4 (6, 12, 24, 16 layers for 121; 6, 12, 32, 32 for 169; 6, 12, 48, 32 for 201), each but the
 *      last followed by transition1..3, the last by norm5
 *   -> class_layers: relu -> global average pool -> [dropout] -> out (a Linear to model.num_classes)
 *   dense layer denseblockB.denselayerL.layers: norm1 -> relu1 -> conv1 (1x1, bn_size * growth_rate) -> norm2 ->
 *      relu2 -> conv2 (3, padding 1, growth_rate); its output is [its input | the new features] (a concatenation
 *      along the channels, torch.cat([x, new_features], 1))
 *   transitionT: norm -> relu -> conv (1x1, half the channels) -> pool (average over 2x2(x2) windows, stride 2)
 * spatial_dims 2 runs MONAI's 2-D network on films of depth 1, as build_resnet3d.c does. Each layer's concatenation
 * is a new tensor (MONAI's memory: quadratic in the block's layers); activation checkpointing marks each dense layer
 * a block, so that only the concatenations stay between forward and backward. */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "families/build.h"

/* norm -> relu -> conv (kernel k, padding k/2, no bias), MONAI's names "<prefix><norm>", "<prefix><relu>", ... */
static int norm_relu_conv(Model *m, const char *prefix, const char *norm, const char *relu, const char *conv, int x,
                          int c_out, int k) {
    char name[96];
    snprintf(name, sizeof name, "%s%s", prefix, norm);
    int h = build_batchnorm(m, name, x);
    snprintf(name, sizeof name, "%s%s", prefix, relu);
    h = build_relu(m, name, h);
    snprintf(name, sizeof name, "%s%s", prefix, conv);
    return build_conv_nd(m, name, h, c_out, k, 1, k / 2, 0);
}

/* One dense layer: [x | its new growth_rate features] */
static int dense_layer(Model *m, int block, int layer, int x) {
    const DenseNetConfig *d = &m->cfg.densenet;
    char prefix[80], name[96];
    snprintf(prefix, sizeof prefix, "features.denseblock%d.denselayer%d.layers.", block, layer);
    const int first = m->n_nodes;
    int h = norm_relu_conv(m, prefix, "norm1", "relu1", "conv1", x, d->bn_size * d->growth_rate, 1);
    h = norm_relu_conv(m, prefix, "norm2", "relu2", "conv2", h, d->growth_rate, 3);
    snprintf(name, sizeof name, "features.denseblock%d.denselayer%d.cat", block, layer);
    Dims out = m->tensors[x].dims;
    out.c += d->growth_rate;
    const int y = build_node(m, OP_CONCAT, name, x, h, out)->out;
    GROW(m->blocks, m->n_blocks, m->cap_blocks); /* with checkpointing, its inner activations are recomputed */
    m->blocks[m->n_blocks++] = (Block){first, m->n_nodes - 1};
    return y;
}

/* transitionT: norm -> relu -> conv 1x1 to c_out -> average pool over 2x2(x2) windows */
static int transition(Model *m, int t, int x, int c_out) {
    char prefix[48], name[64];
    snprintf(prefix, sizeof prefix, "features.transition%d.", t);
    int h = norm_relu_conv(m, prefix, "norm", "relu", "conv", x, c_out, 1);
    const Dims in = m->tensors[h].dims;
    const int two_d = m->cfg.resnet.spatial_dims == 2;
    const PoolWindowShape ps = pool_window_shape(in.n, in.d, in.h, in.w, in.c, (int[]){two_d ? 1 : 2, 2, 2});
    snprintf(name, sizeof name, "%spool", prefix);
    Node *nd = build_node(m, OP_POOL_WINDOW, name, h, -1, (Dims){in.n, ps.od, ps.oh, ps.ow, in.c});
    nd->pw = ps;
    nd->pw.dtype = m->dtype;
    return nd->out;
}

void build_densenet(Model *m) {
    const ModelConfig *c = &m->cfg;
    const DenseNetConfig *d = &c->densenet;
    const int depth = c->resnet.depth;
    const int blocks[4] = {6, 12, depth == 121 ? 24 : depth == 169 ? 32 : 48, depth == 121 ? 16 : 32};
    build_head_task(m);
    build_input(m);
    const int two_d = c->resnet.spatial_dims == 2;
    const int kk[3] = {two_d ? 1 : 7, 7, 7}, ss[3] = {two_d ? 1 : 2, 2, 2}, pp[3] = {two_d ? 0 : 3, 3, 3};
    int h = build_conv(m, "features.conv0", m->t_input_lp, c->in_channels, d->init_features, kk, ss, pp, 0);
    h = build_batchnorm(m, "features.norm0", h);
    h = build_relu(m, "features.relu0", h);
    h = build_maxpool(m, "features.pool0", h, 3, 2, 1);
    int channels = d->init_features;
    for (int b = 0; b < 4; b++) {
        for (int l = 0; l < blocks[b]; l++) h = dense_layer(m, b + 1, l + 1, h);
        channels += blocks[b] * d->growth_rate;
        if (b < 3) {
            h = transition(m, b + 1, h, channels / 2);
            channels /= 2;
        }
    }
    h = build_batchnorm(m, "features.norm5", h);
    h = build_relu(m, "class_layers.relu", h);
    build_head(m, h, "class_layers.pool", "class_layers.dropout", "class_layers.out");
}

/* build_densenet.c: MONAI's DenseNet (monai.networks.nets.DenseNet121/169/201) as nodes, its parameter and buffer
 * names MONAI's state_dict keys, and the head families' prediction head:
 *   features.conv0 (7, stride 2, padding 3, no bias) -> norm0 -> relu0 -> pool0 (max 3/2/1)
 *   -> denseblock1..4 (6, 12, 24, 16 layers for 121; 6, 12, 32, 32 for 169; 6, 12, 48, 32 for 201; or
 *      model.block_config's blocks, MONAI's block_config), each but the last followed by a transition, the last by
 *      norm5
 *   -> class_layers: relu -> global average pool -> [dropout] -> out (a Linear to model.num_classes)
 *   dense layer denseblockB.denselayerL.layers: norm1 -> relu1 -> conv1 (1x1, bn_size * growth_rate) -> norm2 ->
 *      relu2 -> conv2 (3, padding 1, growth_rate) [-> dropout, model.dropout_prob], reading the concatenation along
 *      the channels of the block's input and the new features of the layers before it (MONAI's
 *      torch.cat([x, new_features], 1), layer after layer)
 *   transitionT: norm -> relu -> conv (1x1, half the channels) -> pool (average over 2x2(x2) windows, stride 2)
 * spatial_dims 2 runs MONAI's 2-D network on films of depth 1, as build_resnet3d.c does.
 * The concatenations are never made: each block has one buffer of all its channels (its output, model.h's views).
 * The block's input is copied into its first channels ("denseblockB.input"), each layer writes its new features
 * after the channels before it ("denselayerL.write") and its norm1 reads those channels in place (a prefix of the
 * buffer, rows the buffer's width apart: batchnorm.h's ldx), adding its input gradient into the same prefix of the
 * buffer's gradient. Why: MONAI's concatenations copy every earlier feature again for each layer, quadratic in the
 * layers; they were 10% of the CPU step of cxr-densenet121 (the layer table), and each was kept for its norm's
 * backward. The values are the concatenation's, so the bits are. Activation checkpointing marks each dense layer
 * (norm1 to its write) a block: only the buffer stays between forward and backward, its inside is recomputed (the
 * memory-efficient DenseNet of Pleiss et al., what torchvision's memory_efficient=True does); without it each
 * layer's norm1 output, as wide as its input, is kept for conv1's backward, quadratic in the layers. */
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "core/util.h"
#include "families/build.h"

/* norm -> relu -> conv (kernel k, padding k/2, no bias), MONAI's names "<prefix><norm>", "<prefix><relu>", ... */
static int norm_relu_conv(Model *m, const char *prefix, const char *norm, const char *relu, const char *conv, int x,
                          int c_out, int k) {
    char name[96], relu_name[96];
    snprintf(name, sizeof name, "%s%s", prefix, norm);
    snprintf(relu_name, sizeof relu_name, "%s%s", prefix, relu);
    int h = build_batchnorm_relu(m, name, relu_name, x);
    snprintf(name, sizeof name, "%s%s", prefix, conv);
    return build_conv_nd(m, name, h, c_out, k, 1, k / 2, 0);
}

/* One dense layer: its growth_rate new features from channels [0, at) of its block's buffer (the block's input and
 * the features of the layers before it), written into channels [at, at + growth_rate). The layer is one
 * activation-checkpointing segment, its write last: with checkpointing only the buffer stays between forward and
 * backward (linear in the layers). */
static void dense_layer(Model *m, int block, int layer, int buf, int at) {
    const DenseNetConfig *d = &m->cfg.densenet;
    char prefix[80], name[96];
    snprintf(prefix, sizeof prefix, "features.denseblock%d.denselayer%d.layers.", block, layer);
    const int first = m->n_nodes;
    int h = build_channel_view(m, buf, at);
    h = norm_relu_conv(m, prefix, "norm1", "relu1", "conv1", h, d->bn_size * d->growth_rate, 1);
    h = norm_relu_conv(m, prefix, "norm2", "relu2", "conv2", h, d->growth_rate, 3);
    if (d->dropout_prob > 0) { /* MONAI's layers.dropout, keyed per layer: the same mask when a resumed run redraws it */
        const Dims f = m->tensors[h].dims;
        snprintf(name, sizeof name, "%sdropout", prefix);
        Node *nd = build_node(m, OP_DROPOUT, name, h, -1, f);
        nd->drop = (DropoutShape){.n = f.n, .per_sample = (long)f.d * f.h * f.w * f.c, .p = (float)d->dropout_prob,
                                  .seed = (uint64_t)m->seed, .stream = 0xDE5D0000ull + (uint64_t)(block * 256 + layer),
                                  .dtype = m->dtype};
        h = nd->out;
    }
    snprintf(name, sizeof name, "features.denseblock%d.denselayer%d.write", block, layer);
    build_channel_write(m, name, h, buf, at);
    build_segment(m, first); /* with checkpointing, its inner activations are recomputed */
}

/* denseblockB: its buffer, the input in its first channels, then its layers; the buffer is the block's output (the
 * concatenation of its input and every layer's features) */
static int dense_block(Model *m, int block, int layers, int x) {
    const int c0 = m->tensors[x].dims.c, g = m->cfg.densenet.growth_rate;
    char name[48];
    snprintf(name, sizeof name, "features.denseblock%d.input", block);
    const int buf = build_channel_buffer(m, name, x, c0 + layers * g);
    for (int l = 0; l < layers; l++) dense_layer(m, block, l + 1, buf, c0 + l * g);
    return buf;
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
    int layers[CONFIG_MAX_LIST];
    const int blocks = config_densenet_blocks(c, layers);
    build_head_task(m);
    build_input(m);
    const int two_d = c->resnet.spatial_dims == 2;
    const int kk[3] = {two_d ? 1 : 7, 7, 7}, ss[3] = {two_d ? 1 : 2, 2, 2}, pp[3] = {two_d ? 0 : 3, 3, 3};
    int h = build_conv(m, "features.conv0", m->t_input_lp, c->in_channels, d->init_features, kk, ss, pp, 0);
    h = build_batchnorm_relu(m, "features.norm0", "features.relu0", h);
    h = build_maxpool(m, "features.pool0", h, 3, 2, 1);
    int channels = d->init_features;
    for (int b = 0; b < blocks; b++) {
        h = dense_block(m, b + 1, layers[b], h);
        channels += layers[b] * d->growth_rate;
        if (b < blocks - 1) {
            h = transition(m, b + 1, h, channels / 2);
            channels /= 2;
        }
    }
    h = build_batchnorm_relu(m, "features.norm5", "class_layers.relu", h);
    build_head(m, h, "class_layers.pool", "class_layers.dropout", "class_layers.out");
}

/* build_densenet.c: MONAI's DenseNet (monai.networks.nets.DenseNet121/169/201) as nodes, its parameter and buffer
 * names MONAI's state_dict keys, and the head families' prediction head:
 *   features.conv0 (7, stride 2, padding 3, no bias) -> norm0 -> relu0 -> pool0 (max 3/2/1)
 *   -> denseblock1..4 (6, 12, 24, 16 layers for 121; 6, 12, 32, 32 for 169; 6, 12, 48, 32 for 201; or
 *      model.block_config's blocks, MONAI's block_config), each but the last followed by a transition, the last by
 *      norm5
 *   -> class_layers: relu -> global average pool -> [dropout] -> out (a Linear to model.num_classes)
 *   dense layer denseblockB.denselayerL.layers: norm1 -> relu1 -> conv1 (1x1, bn_size * growth_rate) -> norm2 ->
 *      relu2 -> conv2 (3, padding 1, growth_rate) [-> dropout, model.dropout_prob], reading the concatenation along the channels of the block's input
 *      and the new features of the layers before it (MONAI's torch.cat([x, new_features], 1), layer after layer)
 *   transitionT: norm -> relu -> conv (1x1, half the channels) -> pool (average over 2x2(x2) windows, stride 2)
 * spatial_dims 2 runs MONAI's 2-D network on films of depth 1, as build_resnet3d.c does. Each layer concatenates
 * every feature before it in one node (no chain of concatenations), and activation checkpointing marks each dense
 * layer, its concatenation first, a block: only the layers' new features (and each block's output) stay between
 * forward and backward, so activation memory grows linearly in the layers (the memory-efficient DenseNet of Pleiss
 * et al., what torchvision's memory_efficient=True does); without checkpointing each layer's concatenation is kept
 * for its norm's backward, quadratic as in MONAI. */
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

/* One dense layer: its growth_rate new features from the concatenation of the block's input and the features of the
 * layers before it. The concatenation is the layer's first node, so with activation checkpointing it is rebuilt with
 * the norm and ReLU in backward (the memory-efficient DenseNet: only each layer's new features stay between forward
 * and backward, linear in the layers) */
static int dense_layer(Model *m, int block, int layer, const int *features, int n) {
    const DenseNetConfig *d = &m->cfg.densenet;
    char prefix[80], name[96];
    snprintf(prefix, sizeof prefix, "features.denseblock%d.denselayer%d.layers.", block, layer);
    const int first = m->n_nodes;
    snprintf(name, sizeof name, "features.denseblock%d.denselayer%d.cat", block, layer);
    int h = n == 1 ? features[0] : build_concat(m, name, features, n);
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
    build_segment(m, first); /* with checkpointing, its inner activations are recomputed */
    return h;
}

/* denseblockB: its layers, then the concatenation of its input and every layer's features (the block's output) */
static int dense_block(Model *m, int block, int layers, int x) {
    int features[NODE_MAX_IN];
    VX_CHECK(layers + 1 <= NODE_MAX_IN, "denseblock%d: %d layers, at most %d", block, layers, NODE_MAX_IN - 1);
    features[0] = x;
    for (int l = 0; l < layers; l++) features[l + 1] = dense_layer(m, block, l + 1, features, l + 1);
    char name[48];
    snprintf(name, sizeof name, "features.denseblock%d.cat", block);
    return build_concat(m, name, features, layers + 1);
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

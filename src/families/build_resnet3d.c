/* build_resnet3d.c: MONAI's 3-D ResNet (monai.networks.nets.ResNet: resnet10/18/34 with basic blocks, 50/101 with
 * bottlenecks) as nodes, its parameter and buffer names MONAI's state_dict keys, and a prediction head:
 *   conv1 (conv1_t_size^3, stride conv1_t_stride, no bias) -> bn1 -> relu -> maxpool 3/2/1 (unless no_max_pool)
 *   -> layer1..layer4 (planes 64, 128, 256, 512 x widen_factor; stride 1, 2, 2, 2; blocks per depth)
 *   -> global average pool -> [dropout] -> fc (num_classes outputs)
 *   basic block:      conv3 -> bn -> relu -> conv3 -> bn, + shortcut, -> relu
 *   bottleneck block: conv1 -> bn -> relu -> conv3 (stride) -> bn -> relu -> conv1 (planes x 4) -> bn, + shortcut,
 *                     -> relu
 *   shortcut B where the shape changes: downsample.0 a 1x1x1 conv (stride; bias with bias_downsample) and
 *   downsample.1 a BatchNorm; else the block's input itself
 * Each block is an activation-checkpointing segment (train.checkpoint_activations: only its input and output stay
 * between forward and backward, as torch.utils.checkpoint per block).
 * spatial_dims 2 runs MONAI's 2-D network on volumes of depth 1: every kernel is 1 deep and unpadded along D (the
 * 2-D weights [out][in][kh][kw] are ours [out][1][kh][kw][in]); pooling along a depth of 1 keeps it 1. */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "families/build.h"

/* A convolution, cubic kernel k (1 deep in 2-D), padding k/2 ("same" for odd k), stride s */
static int rconv(Model *m, const char *name, int x, int c_out, int k, int s, int bias) {
    return build_conv_nd(m, name, x, c_out, k, s, k / 2, bias);
}

/* conv -> bn (-> relu): the unit every block and the stem are made of */
static int conv_bn(Model *m, const char *prefix, int i, int x, int c_out, int k, int s, int act) {
    char conv_name[80], bn_name[80], act_name[80];
    snprintf(conv_name, sizeof conv_name, "%sconv%d", prefix, i);
    snprintf(bn_name, sizeof bn_name, "%sbn%d", prefix, i);
    snprintf(act_name, sizeof act_name, "%srelu%d", prefix, i);
    const int h = rconv(m, conv_name, x, c_out, k, s, 0);
    return act ? build_batchnorm_relu(m, bn_name, act_name, h) : build_batchnorm(m, bn_name, h);
}

/* One block of layer `layer`, index b: basic (expansion 1) or bottleneck (4); MONAI's ResNetBlock / Bottleneck */
static int block(Model *m, int layer, int b, int x, int planes, int stride, int bottleneck) {
    char prefix[64], name[80];
    snprintf(prefix, sizeof prefix, "layer%d.%d.", layer, b);
    const int c_in = m->tensors[x].dims.c, c_out = bottleneck ? 4 * planes : planes;
    const int first = m->n_nodes;
    int h;
    if (bottleneck) {
        h = conv_bn(m, prefix, 1, x, planes, 1, 1, 1);
        h = conv_bn(m, prefix, 2, h, planes, 3, stride, 1);
        h = conv_bn(m, prefix, 3, h, c_out, 1, 1, 0);
    } else {
        h = conv_bn(m, prefix, 1, x, planes, 3, stride, 1);
        h = conv_bn(m, prefix, 2, h, planes, 3, 1, 0);
    }
    int skip = x;
    if (stride != 1 || c_in != c_out) { /* shortcut B */
        snprintf(name, sizeof name, "%sdownsample.0", prefix);
        skip = rconv(m, name, x, c_out, 1, stride, m->cfg.resnet.bias_downsample);
        snprintf(name, sizeof name, "%sdownsample.1", prefix);
        skip = build_batchnorm(m, name, skip);
    }
    snprintf(name, sizeof name, "%sadd", prefix);
    h = build_node(m, OP_ADD, name, h, skip, m->tensors[h].dims)->out;
    snprintf(name, sizeof name, "%srelu", prefix);
    h = build_relu(m, name, h);
    build_segment(m, first); /* with checkpointing, its inside is recomputed in backward */
    return h;
}

void build_resnet3d(Model *m) {
    const ModelConfig *c = &m->cfg;
    const ResNetConfig *r = &c->resnet;
    static const int layers_of[5][4] = {{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 4, 6, 3}, {3, 4, 6, 3}, {3, 4, 23, 3}};
    const int which = r->depth == 10 ? 0 : r->depth == 18 ? 1 : r->depth == 34 ? 2 : r->depth == 50 ? 3 : 4;
    const int bottleneck = r->depth >= 50;
    int planes[4];
    for (int l = 0; l < 4; l++) planes[l] = (int)((64 << l) * r->widen_factor); /* int(x * widen_factor) */
    VX_CHECK(planes[0] >= 1, "model.widen_factor %g leaves no channels", r->widen_factor);

    build_head_task(m);

    build_input(m);
    const int two_d = r->spatial_dims == 2;
    const int k1 = r->conv1_t_size, s1 = r->conv1_t_stride;
    const int kk[3] = {two_d ? 1 : k1, k1, k1}, ss[3] = {two_d ? 1 : s1, s1, s1};
    const int pp[3] = {two_d ? 0 : k1 / 2, k1 / 2, k1 / 2};
    int h = build_conv(m, "conv1", m->t_input_lp, c->in_channels, planes[0], kk, ss, pp, 0);
    h = build_batchnorm_relu(m, "bn1", "relu", h);
    if (!r->no_max_pool) h = build_maxpool(m, "maxpool", h, 3, 2, 1);
    for (int l = 0; l < 4; l++)
        for (int b = 0; b < layers_of[which][l]; b++)
            h = block(m, l + 1, b, h, planes[l], b == 0 && l > 0 ? 2 : 1, bottleneck);

    build_head(m, h, "avgpool", "dropout", "fc");
}

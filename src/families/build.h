/* build.h: what a family's builder (build_<family>.c) makes a model with: tensors, parameters, buffers and nodes,
 * and the convolution every family uses (build.c); model_build.c runs the builder chosen by model.family, then lays
 * out the parameters and plans the memory; internal to src/families. */
#pragma once
#include "graph/model.h"

#define GROW(arr, n, cap)                                                                                        \
    do {                                                                                                         \
        if ((n) == (cap)) {                                                                                      \
            (cap) = (cap) ? 2 * (cap) : 64;                                                                      \
            (arr) = realloc((arr), (size_t)(cap) * sizeof *(arr));                                              \
            if (!(arr)) vx_fatal("out of memory building the model");                                           \
        }                                                                                                        \
    } while (0)

/* A tensor of dims and type, made by node `producer` (-1: the input); returns its id. */
int build_tensor(Model *m, Dims d, int producer, DType dtype);
/* A parameter named "<prefix>.<suffix>" of ndim dims (our layout: conv weights [out][kd][kh][kw][in]). */
int build_param(Model *m, const char *prefix, const char *suffix, int ndim, const int *shape);
/* A buffer named "<prefix>.<suffix>" of count floats (BatchNorm's running statistics). */
int build_buffer(Model *m, const char *prefix, const char *suffix, long count);
/* One node concatenating parts[0..n) (1 <= n <= NODE_MAX_IN) along the channels (torch.cat(parts, 1)); its output */
int build_concat(Model *m, const char *name, const int *parts, int n);
/* A buffer of c channels along x's rows (model.h's views: a dense block's features): node `name` writes x into its
 * first channels (OP_CHANNEL_WRITE); later channels are written by build_channel_write. Returns the buffer. */
int build_channel_buffer(Model *m, const char *name, int x, int c);
/* Node `name` writes x into channels [at, at + x's) of buffer `buf`; returns that view of the buffer */
int build_channel_write(Model *m, const char *name, int x, int buf, int at);
/* Channels [0, c) of buffer `buf` as a tensor (no node: what the writes so far put there); buf itself when c is all */
int build_channel_view(Model *m, int buf, int c);
/* Which BatchNorms copy an earlier one's batch sums of channels they share in unchanged memory (Node.bn_shared): run
 * by model_build (model_build.c) with train.fuse, between the builder and the memory plan */
void build_share_batch_statistics(Model *m);
/* Nodes first .. the last built so far as one activation-checkpointing segment (model.h's Block: with
 * train.checkpoint_activations its inside is recomputed in backward) */
void build_segment(Model *m, int first);
/* A node of `kind` reading in0 (and in1, or -1) whose output has dims `out` in the model's type. */
Node *build_node(Model *m, OpKind kind, const char *name, int in0, int in1, Dims out);
/* The last node built, a norm that took over the activation after it (train.fuse): renamed "<norm_name>+<the
 * activation's last name>" (e.g. "layer1.0.bn1+relu1"); returns it */
Node *build_fused_norm(Model *m, const char *norm_name, const char *act_name);
/* A convolution of x with per-axis kernel, stride and padding (d, h, w); weights "<name>.weight" of w_cin input
 * channels (x's own count, or fewer when x is zero-padded: the first conv under model.pad_input_channels), and a
 * bias "<name>.bias" when `bias`. Returns the output tensor. */
int build_conv(Model *m, const char *name, int x, int w_cin, int c_out, const int k[3], const int stride[3],
               const int pad[3], int bias);
/* The input tensor and the copy the first conv reads: float32 [batch][D][H][W][in_channels], and in 16 bits (or
 * with model.pad_input_channels) a cast node making the low-precision, channel-padded copy. */
void build_input(Model *m);

/* The head families' pieces (build_head.c). A convolution of cubic kernel k, stride s and padding pad, 1 deep and
 * unpadded along D when model.spatial_dims is 2 (a film of depth 1); without bias unless `bias`. */
int build_conv_nd(Model *m, const char *name, int x, int c_out, int k, int s, int pad, int bias);
/* BatchNorm "<name>" (weight, bias; buffers running_mean, running_var), ReLU, max pooling k/stride/pad */
int build_batchnorm(Model *m, const char *name, int x);
int build_relu(Model *m, const char *name, int x);
/* BatchNorm "<norm_name>" then ReLU: one fused node "<norm_name>+<relu>" with train.fuse, else the two */
int build_batchnorm_relu(Model *m, const char *norm_name, const char *relu_name, int x);
int build_maxpool(Model *m, const char *name, int x, int k, int stride, int pad);
/* m->task and m->labels from model.task */
void build_head_task(Model *m);
/* x -> global average pool -> [dropout (model.dropout)] -> Linear "<fc_name>" to model.num_classes: m->t_out */
void build_head(Model *m, int x, const char *pool_name, const char *dropout_name, const char *fc_name);

/* The families (model.family). */
void build_ae3d(Model *m);
void build_resnet3d(Model *m);
void build_densenet(Model *m);
void build_vit3d(Model *m);
void build_vit3d_diffusion(Model *m);


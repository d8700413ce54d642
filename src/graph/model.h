/* model.h: a network as a list of nodes over planned tensors, built by its family's builder (model.family) and run
 * by one executor (model_exec.c):
 *   ae3d      the 3D autoencoder (AutoencoderKL-style), below; build_ae3d.c
 *   resnet3d  MONAI's 3D ResNet with a prediction head (classification, multilabel, regression, survival);
 *             build_resnet3d.c. Its BatchNorm layers keep running statistics: the model's buffers (BufferView), a
 *             flat float32 array beside the parameters, checkpointed with them and never trained
 *   vit3d     a 3-D ViT over patches that reconstructs its input (build_vit3d.c, its nodes run by model_exec_vit.c)
 *   vit3d_diffusion  the same blocks as a diffusion denoiser (DiT with cross-attention): the noisy volume's patches,
 *             conditioned on the timestep by adaLN-Zero and on two X-ray views by cross-attention, predicting v (or
 *             eps); build_vit3d_diffusion.c, its own nodes run by model_exec_diff.c
 * The ae3d family:
 *
 *   x [N][D][H][W][Cin]
 *   encoder: conv_in 3^3 -> per level l: res_blocks x ResBlock(-> channels[l]), stride-2 conv 3^3 between levels
 *            -> GroupNorm -> SiLU -> 1x1 heads mu, logvar [N][D/f][H/f][W/f][latent]   (f = 2^(levels-1))
 *   latent:  z = mu + exp(0.5*clamp(logvar)) * eps
 *   decoder: conv_in 3^3 -> per level l (reversed): ResBlocks -> nearest x2 + conv 3^3 between levels
 *            -> GroupNorm -> SiLU -> conv_out 3^3 -> recon [N][D][H][W][Cin]
 *   ResBlock(cin -> cout): GN -> SiLU -> conv 3^3 -> GN -> SiLU -> conv 3^3, plus x (1x1 conv when cin != cout)
 *   loss = L1 (or MSE) mean over voxels + kl_weight * KL (mean over samples of the per-sample sum)
 *
 * Precision: every activation tensor and its gradient is stored as the model's dtype (train.precision: float32, or
 * bfloat16 / float16 for mixed precision on a GPU); the input volume (the loss target) and the noise stay float32, a
 * cast node makes the low-precision copy conv_in reads. With model.pad_input_channels (auto: in bf16/fp16) that copy
 * has its channels padded with zeros to a multiple of 8, what cuDNN's tensor-core kernels want, and conv_in runs on
 * padded weights written from the float32 master each forward; its parameters stay unpadded. The parameters, their
 * gradients and AdamW's moments are float32 (the master copy); with a 16-bit dtype the convolutions read a
 * low-precision copy of the flat parameters (param_lp), which AdamW rewrites in the same pass as the master and
 * model_sync_lp refreshes after any other write.
 * Fusion (train.fuse): GroupNorm + SiLU as one node, and the residual add of each ResBlock folded into the epilogue
 * of the convolution that runs last in the block (in[1] of an OP_CONV node: y = conv(x) + bias + in[1]).
 *
 * Parameters, gradients and AdamW moments are four flat buffers with the same layout: each parameter is a view
 * (offset, count). Views are laid out in reverse layer order, so backward fills the gradient buffer from offset 0
 * upward (what bucketed all-reduce will overlap with). Each view starts on a MODEL_PARAM_ALIGN-float (256-byte)
 * boundary: cuDNN picks its kernels without seeing pointers, and some need aligned weights (a 4-byte-aligned
 * weight can fail with CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER); the 128-bit paths of our kernels need it too.
 * The padding floats stay 0 in all four buffers (AdamW keeps 0 at 0). Checkpoints and probe files hold the packed
 * layout instead (views back to back, packed_offset), which does not depend on the alignment.
 * Sharded data parallelism (train/zero.h) sets three lengths before model_allocate: the parameters' buffers padded
 * to whole shards (flat_floats), the gradients as staging slots (grad_floats, with each view's grad_offset) and
 * AdamW's moments as this rank's shard (state_floats); each is param_floats otherwise.
 * Activations live in one arena planned at build time. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/config_model.h"
#include "graph/plan.h"
#include "batchnorm/batchnorm.h"
#include "conv3d/conv3d.h"
#include "dropout/dropout.h"
#include "groupnorm/groupnorm.h"
#include "head_loss/head_loss.h"
#include "linear/linear.h"
#include "maxpool/maxpool.h"
#include "pool_window/pool_window.h"
#include "upconv_phase/upconv_phase.h"
#include "attention/attention.h"
#include "gemm/gemm.h"
#include "layernorm/layernorm.h"
#include "patch/patch.h"

typedef enum {
    OP_CONV, OP_GROUPNORM, OP_SILU, OP_UPSAMPLE, OP_ADD, OP_LATENT, OP_CAST, /* ae3d's */
    OP_UPCONV,                              /* ae3d's upsample + conv as one phase convolution (graph/upconv.h) */
    OP_BATCHNORM, OP_RELU, OP_MAXPOOL, OP_AVGPOOL, OP_LINEAR, OP_DROPOUT,     /* resnet3d's */
    OP_CONCAT, OP_POOL_WINDOW, OP_CHANNEL_WRITE,                             /* densenet's */
    OP_LAYERNORM, OP_GEMM, OP_ATTENTION, OP_POS, OP_UNPATCH,                 /* vit3d's (model_exec_vit.c) */
    OP_QSAMPLE, OP_DRR, OP_BACKPROJECT, OP_TIMESTEP, OP_MODULATE, OP_GATE,   /* vit3d_diffusion's (model_exec_diff.c) */
    OP_CASCADE /* a cascade stage's condition: the earlier network's x0 prediction, upsampled (model_exec.c) */
} OpKind;

typedef enum { FAMILY_AE3D, FAMILY_RESNET3D, FAMILY_VIT3D, FAMILY_VIT3D_DIFFUSION, FAMILY_DENSENET } ModelFamily;

/* What a head predicts, and so its loss (resnet3d: model.task). */
typedef enum { TASK_NONE, TASK_CLASSIFICATION, TASK_MULTILABEL, TASK_REGRESSION, TASK_SURVIVAL } ModelTask;

typedef struct {
    int n, d, h, w, c; /* NDHWC */
} Dims;

typedef struct {
    Dims dims;
    long count;
    DType dtype;  /* storage of the activation and its gradient */
    int act;      /* plan item of the activation */
    int act_bwd;  /* plan item backward reads it from: act, or with activation checkpointing the buffer its block's
                     recomputation writes (the forward's copy is freed after its last forward use) */
    int grad;     /* plan item of its gradient; -1 when none is needed (the input and its low-precision copy) */
    int producer; /* node index; -1 for the input */
    int no_grad;  /* data, not a function of the parameters (the noisy volume, the views, the timestep embedding):
                     no gradient is planned, and backward gives its producer's consumers dx NULL */
    /* A view: -1, or the tensor whose memory this one is, channels [c_at, c_at + dims.c) of each of its rows (rows
     * view_of's dims.c apart), its gradient the same channels of that tensor's gradient. A dense block's layers write
     * their features into one such buffer and read the channels before theirs in place (build_densenet.c). Only
     * BatchNorm (shape.ldx) and OP_CHANNEL_WRITE read or write a narrower view; plan_memory checks it. */
    int view_of, c_at;
} Tensor;

typedef struct {
    char name[96];   /* PyTorch-style name, e.g. encoder.down.0.res.0.conv1.weight */
    int shape[5];    /* in our layout: conv weights [out][k][k][k][in], vectors [c] */
    int ndim;
    long offset;        /* in the flat device buffers: a multiple of MODEL_PARAM_ALIGN */
    long grad_offset;   /* where backward writes its gradient in grad: offset, unless sharded data parallelism
                           stages the gradients in bucket slots (ZeRO-2: train/zero.h) */
    long packed_offset; /* in the packed layout (checkpoints, probe files): sum of the counts before it */
    long count;
} ParamView;

#define MODEL_PARAM_ALIGN 64 /* floats: 256 bytes, cudaMalloc's own alignment */

/* The weights' exponential moving average (train.ema_decay): one buffer of param_floats floats in the flat layout of
 * the parameters (its padding 0), so one op updates it after each step; checkpointed with the buffers, exported
 * per parameter as "ema.<name>", never matched against a file's keys (weights.c). */
#define MODEL_EMA_BUFFER "ema.flat"

/* A buffer: state a layer keeps that is not trained (BatchNorm's running mean and variance), in the flat float32
 * array Model.bufs, back to back; checkpointed after the parameters and moments. */
typedef struct {
    char name[96]; /* PyTorch's state_dict key, e.g. layer1.0.bn1.running_mean */
    long offset, count;
} BufferView;

/* The most inputs a node reads: the denoiser's concatenation of x_t, the views and a cascade's condition takes three
 * (a dense block writes its features into one buffer instead: build_densenet.c) */
#define NODE_MAX_IN 8

typedef struct {
    OpKind kind;
    char name[80];
    int in[NODE_MAX_IN]; /* tensor ids; in[1] is the second addend (OP_ADD), logvar (OP_LATENT), the fused residual
                            (OP_CONV), the keys' and values' source (OP_ATTENTION across), the branch (OP_GATE);
                            in[2] the adaLN modulation (OP_MODULATE, OP_GATE); OP_CONCAT's parts in[0..k) in order;
                            else -1 */
    int out;             /* tensor id */
    int weight, bias;    /* ParamView ids (conv: weight, bias; groupnorm: gamma, beta), -1 when none */
    Conv3dShape conv;    /* OP_CONV */
    GroupNormShape gn;   /* OP_GROUPNORM */
    int stats;           /* OP_GROUPNORM: plan item of mean and rstd [n][groups] each; OP_BATCHNORM: of mean, invstd
                            and two sums [c] each (the statistics' and then the backward's) */
    BatchNormShape bn;   /* OP_BATCHNORM; buffer: its running mean's BufferView (the running variance is the next) */
    int buffer;
    int bn_shared;       /* OP_BATCHNORM under train.fuse: how many of its first channels an earlier BatchNorm of the
                            same forward (node bn_from) reduced from the same unchanged memory, whose batch sums it
                            copies in training (a dense layer's norm1; build_share_batch_statistics); 0 none */
    int bn_from;
    MaxPoolShape pool;   /* OP_MAXPOOL; arg: plan item of the winners' offsets (int32, shaped like the output) */
    PoolWindowShape pw;  /* OP_POOL_WINDOW */
    int arg;
    LinearShape lin;     /* OP_LINEAR */
    DropoutShape drop;   /* OP_DROPOUT */
    LayerNormShape ln;   /* OP_LAYERNORM (stats: mean and rstd [rows] each) */
    GemmShape gemm;      /* OP_GEMM: the forward product, a Linear over rows (x W^T + b); epilogue GELU: aux is the
                            plan item of the pre-activation, arg of its gradient (backward's scratch) */
    int aux;
    AttentionShape att;  /* OP_ATTENTION: self-attention over a packed QKV [rows][3*hidden] (in[1] -1), or across:
                            queries in[0] [rows][hidden], keys and values packed in[1] [rows'][2*hidden] (stats: lse and
                            delta [n*heads*tq]; aux, or -1: what the backend saves for the backward, attention.h) */
    PatchShape patch;    /* OP_UNPATCH: tokens [rows][p^3*c] to the volume */
    /* OP_UPCONV (graph/upconv.h; conv is its phase convolution, weight and bias the 3x3x3 convolution's): its shape,
     * and the plan items of the phase weights and bias, their gradients, and the phase output z and its gradient */
    UpconvPhaseShape up;
    int up_pw, up_pb, up_dpw, up_dpb, up_z, up_dz;
    float dx_beta[NODE_MAX_IN]; /* 0 when this node writes that input's gradient first in backward, else 1 */
    int chunk;           /* OP_MODULATE: the shift's chunk of the modulation [n][k*c] (the scale's is chunk + 1);
                            OP_GATE: the gate's. Each chunk's gradient is written by its one node (beta 0) */
    int recompute;       /* activation checkpointing: rerun by its block's recomputation before the block's backward */
    /* OP_CONV reading zero-padded input channels (encoder.conv_in under model.pad_input_channels; conv.c_in is the
     * padded count, the weight view keeps the real one): plan items of the padded weight copy (model dtype) and of the
     * float32 weight and bias gradients its backward computes before slicing them into the real ones; -1 otherwise */
    int pad_w, pad_dw, pad_db;
    /* the channel rule of 16-bit convolutions (conv_pad.h): plan items of the padded bias, input, output, output
     * gradient and input gradient where this conv's shape pads them; -1 otherwise */
    int pad_b, pad_x, pad_y, pad_dy, pad_dx;
} Node;

/* Whether node nd runs a convolution of shape nd->conv (a plain one, or the upsampling convolution's phase one): what
 * the workspace, the FLOP counts, the ranks' kernel agreement and the device checks look at */
static inline int node_convolves(const Node *nd) { return nd->kind == OP_CONV || nd->kind == OP_UPCONV; }

/* A checkpointed segment (a ResBlock): nodes first..last, last the residual add. With activation checkpointing only
 * its input and output stay in memory after the forward; the nodes marked recompute run again when backward reaches
 * `last`, writing the tensors backward needs into their act_bwd buffers. */
typedef struct {
    int first, last;
} Block;

typedef struct {
    float recon, kl; /* ae3d: the reconstruction loss and the KL term; 0 for a head's family; vit3d_diffusion: recon
                        is the diffusion loss (the prediction against v or eps) */
    float physics;   /* vit3d_diffusion: the projection loss (the predicted clean volume's DRRs against the views) */
    float total;     /* ae3d: recon + kl_weight * kl; a head: its task's loss; vit3d_diffusion: recon +
                        physics_weight * physics */
} Losses;

/* What the model takes from outside the model section: the train.* keys that change how its graph is built and
 * run (hw_plan.h's hw_model_options reads them from a TrainConfig). */
typedef struct {
    const char *precision;      /* train.precision: "auto" | "bf16" | "fp16" | "off", read by model_dtype */
    int fuse;                   /* train.fuse: GroupNorm + SiLU as one node, residual adds in conv epilogues */
    int checkpoint_activations; /* train.checkpoint_activations */
    int64_t seed;               /* train.seed: the latent noise's stream (and the checkpoint's seed) */
    int world;                  /* ranks (0 or 1: one): SyncBatchNorm's counts and survival's global batch */
    int pad_all_types;          /* conv_pad.h's rule in float32 too (tests: padding changes no result); 0 in runs */
    int no_workspace;           /* plan the convolutions' and attention's workspace as empty and ask the backend nothing about it: a
                                   lower bound of the bytes (hw_plan's batch search); 0 in runs */
    int ema;                    /* train.ema_decay > 0: the weights' moving average as the buffer MODEL_EMA_BUFFER */
    int inference;              /* predict: no gradients (of the parameters or in the arena) and no AdamW state are
                                   planned or allocated; backward and the optimizer must not run */
} ModelOptions;

/* Bytes of backend memory by purpose, as the allocator counted them (bytes_in_use around each allocation). */
typedef struct {
    size_t params;      /* param and param_lp */
    size_t grads;       /* grad (and a sharded run's gradient shard) */
    size_t optimizer;   /* adam_m, adam_v (and a sharded run's master weights) */
    size_t activations; /* the arena */
} ModelMemory;

typedef struct Model {
    ModelConfig cfg;            /* the model section, input_size that of the model's stage */
    int fuse, checkpoint_activations, pad_all_types, no_workspace, inference; /* from ModelOptions */
    int64_t seed;
    int batch;
    DType dtype; /* of the activations (model_dtype) */
    int bf16_math; /* the convolutions may compute in bf16 on float32 storage (model_bf16_math: the CPU's bf16) */
    int bf16_gemm; /* and the transformer's products do (bf16_math where be->gemm->bf16_math says it pays) */
    Node *nodes;
    int n_nodes, cap_nodes;
    Tensor *tensors;
    int n_tensors, cap_tensors;
    ParamView *params;
    int n_params, cap_params;
    long param_count;  /* parameters (the packed layout's length) */
    long param_floats; /* the flat layout's length: param_count plus the alignment padding */
    long flat_floats;  /* allocated length of param and param_lp: param_floats, or more (whole shards, zero) */
    long grad_floats;  /* allocated length of grad: flat_floats, or ZeRO-2's staging slots */
    long state_floats; /* allocated length of adam_m and adam_v: flat_floats, or this rank's shard (0: none) */
    ModelFamily family;
    int t_input, t_input_lp; /* t_input_lp: what the first conv reads (t_input itself in float32) */
    int t_recon, t_mu, t_logvar, t_z; /* ae3d's outputs (-1 otherwise); vit3d has t_recon */
    /* a head (resnet3d): its outputs [n][k] (logits, scores or the risk), the task, label floats per sample, and the
     * plan items of the micro-batch's targets (float32 [n][labels]; survival: [world*n][2], every rank's, since the
     * Cox loss runs over the global batch) and of survival's gathered risk scores and their gradient [world*n] */
    int t_out;
    ModelTask task;
    int labels;
    int target_item, gathered_item, gathered_grad_item;
    float *head_weight;  /* class_weights / pos_weight in backend memory (NULL: none); allocated with the model */
    BufferView *buffers;
    int n_buffers, cap_buffers;
    long buffer_floats;
    Block *blocks;
    int n_blocks, cap_blocks;
    double recompute_flops; /* conv forward FLOPs rerun per micro-batch by activation checkpointing (0 without) */
    int eps_item, scalars_item, workspace_item, noise_offset_item;
    /* vit3d_diffusion (model_exec_diff.c): the noisy volume x_t and the views (tensors), the micro-batch's per-sample
     * timestep, alpha, sigma and loss weight ([4][n] float32, written by model_set_first_sample), the regression
     * target (v or eps, float32 like the input), and the projection loss's scratch (x0_hat, its views); -1 otherwise */
    int t_xt, t_views;
    int coef_item, diff_target_item, x0hat_item, x0views_item;
    double *alphabar; /* vit3d_diffusion: the schedule's cumulative alpha per timestep (diffusion.timesteps) */
    int sampling;     /* vit3d_diffusion: 1 while a sampler runs the forward (diffusion_sample.h): q_sample and the
                         views' DRR are skipped, x_t and the views being written into t_xt and t_views beforehand */
    /* vit3d_diffusion as a cascade's later stage (cfg.cascade_n > 0, model_build.c): the earlier stage's network
     * (a forward-only model of its own: its arena, and its parameters and buffers inside buffer cascade_buffer of
     * this model, so that checkpoints, resume and export hold it), and t_cascade, its x0 prediction (or, sampling,
     * its sample) resampled to this model's grid, the channels after x_t that patch_embed reads; NULL / -1 else.
     * cascade_params: a model whose parameters and buffers live in another's buffer (its cascade_prev) */
    struct Model *cascade_prev;
    int t_cascade, cascade_buffer;
    float *cascade_params;
    Plan plan;
    double conv_flops_step; /* forward + backward data + backward filter */
    double gemm_flops_step; /* the Linear GEMMs' (OP_GEMM): forward + backward data + weight gradient */
    double attn_flops_step; /* attention's: its 6 products, forward and backward (model_build.c) */

    const Backend *be;
    /* Data parallelism as the model sees it (set by the trainer; 1 and 0 alone): SyncBatchNorm's counts and the Cox
     * loss's slice of the global batch. */
    int world, rank;
    /* Called inside forward and backward to sum `count` floats of backend memory over the ranks in place (SyncBatch-
     * Norm's statistics), and to gather every rank's `count` floats into recv (rank r's at r*count: the Cox loss's
     * scores), stream-ordered; NULL with one rank. */
    void (*allreduce_hook)(void *ctx, float *buf, long count, const char *what);
    void (*gather_hook)(void *ctx, const float *send, float *recv, long count, const char *what);
    void *dist_hook_ctx;
    /* Called by model_backward after node i's backward has been enqueued (i descending), when set: where data
     * parallelism launches the all-reduce of each gradient bucket as soon as backward has written it. */
    void (*backward_hook)(void *ctx, int node);
    void *backward_hook_ctx;
    /* Called by model_backward right before node i's backward, when set (same ctx): where ZeRO-2 frees the staging
     * slot the node's gradients go to (the reduction of the bucket that held it before). */
    void (*backward_pre_hook)(void *ctx, int node);
    /* Called right before (phase 0) and after (1) node i's forward, and before (2) and after (3) its backward (a
     * checkpointed block's recomputation stays outside), when set: where bench step records per-layer timing events. */
    void (*node_hook)(void *ctx, int node, int phase);
    void *node_hook_ctx;
    /* set by model_allocate */
    int allocated;
    ModelMemory mem; /* what the backend's allocator counted for each buffer (bytes_in_use before and after) */
    char *arena;
    float *param, *grad, *adam_m, *adam_v; /* flat, param_floats each */
    void *param_lp;  /* flat low-precision copy of param (param_floats of dtype); NULL in float32 */
    float *losses;   /* where the loss ops write {recon, kl} (the arena's scalars; backend memory) */
    float *bufs;     /* the buffers, buffer_floats (backend memory); NULL when there are none */
} Model;

/* The activation type train.precision (`precision`) asks for on backend be: off float32, bf16, fp16, auto bf16
 * where the backend runs it (CUDA) and float32 where it does not (the CPU); bf16 on the CPU is float32 storage with
 * bf16 math (model_bf16_math). 0 with the reason in why when an explicit choice is one the backend cannot run (fp16
 * on the CPU; bf16 on a CPU without AVX512-BF16 or AMX-BF16). */
int model_dtype(const char *precision, const Backend *be, DType *out, char *why, size_t why_len);
/* 1 when train.precision `precision` runs on be as a math mode of float32 storage: bf16 on the CPU (AVX512-BF16 or
 * AMX-BF16), where model_dtype gives float32 activations and the convolutions compute in bf16 (conv3d.h). */
int model_bf16_math(const char *precision, const Backend *be);

/* Builds the graph and the memory plan for micro-batch `batch` on backend `be` (whose convolution workspace
 * sizes enter the plan); allocates nothing. */
Model *model_build(const ModelConfig *cfg, const ModelOptions *opt, int batch, const Backend *be);
void model_free(Model *m);
/* Bytes the backend will hold: arena + the flat float32 buffers (+ the low-precision parameter copy), at their
 * allocated lengths (flat_floats, grad_floats, state_floats). */
size_t model_device_bytes(const Model *m);
/* Flat buffer (param_floats, host memory) -> packed (param_count) and back; unpack zeroes the padding
 * (model_carry.c). */
void model_pack_params(const Model *m, const float *flat, float *packed);
void model_unpack_params(const Model *m, const float *packed, float *flat);
/* A flat parameter-shaped backend buffer (param, grad, adam_m, adam_v) to host memory in the packed layout, and
 * back (the padding written as 0): what checkpoints and probe files hold. */
void model_download_packed(const Model *m, const float *flat_device, float *packed);
void model_upload_packed(const Model *m, const float *packed, float *flat_device);
/* Stages (train.stages) rebuild the model at another input size (model_carry.c). model_same_layout: whether a and
 * b's packed layouts are the same (views, names, counts): true for ae3d and resnet3d at any size, for vit3d only at
 * the same patch grid. model_carry_packed: from's packed array src into to's packed layout dst, view by view in
 * order (the same names): copied, or, for a learned position table (an OP_POS node's weight) whose grid changed,
 * resampled by model_resample_grid. Any other difference is an internal error. */
int model_same_layout(const Model *a, const Model *b);
void model_carry_packed(const Model *from, const float *src, const Model *to, float *dst);
/* src [gin0][gin1][gin2][c] to dst [gout...][c]: trilinear, align_corners=False (torch.nn.functional.interpolate's
 * mode="trilinear": cell centres matched, the edges clamped), weights and sums in double, rounded once. */
void model_resample_grid(const float *src, const int gin[3], float *dst, const int gout[3], int c);
/* Allocates the arena and the flat buffers on the model's backend (zeroed, but for the arena), counting each in
 * m->mem. */
void model_allocate(Model *m);
/* Gives them back (the graph and plan stay); model_allocate may be called again. */
void model_release_memory(Model *m);
/* Deterministic initialization from the seed (PyTorch's default bounds: U(-1/sqrt(fan_in), +)), zero moments;
 * the low-precision copy follows. */
void model_init_params(Model *m, uint64_t seed);
/* The buffers to their initial values (running mean 0, running variance 1; the weights' average: the weights). */
void model_reset_buffers(Model *m);
/* The weights' average (NULL without train.ema_decay), and its reset to the current weights (after an init-from). */
float *model_ema(const Model *m);
int model_ema_view(const Model *m); /* its BufferView, or -1 (no allocation needed) */
void model_ema_reset(Model *m);
/* Refreshes param_lp from param (after anything but AdamW wrote the parameters); nothing in float32. */
void model_sync_lp(Model *m);

/* The tensor the loss writes its gradient into: the reconstruction (ae3d, vit3d, the denoiser's prediction) or a
 * head's outputs (resnet3d, which has no t_recon). */
static inline int model_loss_tensor(const Model *m) { return m->t_recon >= 0 ? m->t_recon : m->t_out; }
/* elements between the rows of tensor t: its channels, or those of the buffer it views */
static inline long model_row_stride(const Model *m, int t) {
    const Tensor *tn = &m->tensors[t];
    return tn->view_of >= 0 ? m->tensors[tn->view_of].dims.c : tn->dims.c;
}
void *model_tensor(const Model *m, int tensor);      /* activation pointer (backend memory, of the tensor's dtype) */
void *model_tensor_grad(const Model *m, int tensor); /* gradient pointer, NULL when none */
float *model_noise(const Model *m); /* eps of the last sampled forward, shaped like z; valid until backward ends */
/* A tensor's activation copied to host memory as float32 (converted from its dtype); waits for the device. */
void model_tensor_to_host(const Model *m, int tensor, float *out);

/* vit3d_diffusion: the last forward's regression target (v or eps, float32 like the input) and its per-sample
 * coefficients [4][n] (timestep, alpha, sigma, loss weight), in backend memory: what probe dumps. */
const float *model_diffusion_target(const Model *m);
const float *model_diffusion_coefficients(const Model *m);
/* vit3d_diffusion after model_loss: the own losses of the batch's first `used` samples, of which the batch's are the
 * means: diff[b] its weighted MSE, proj[b] the MSE of its clean estimate's views against its views (0 without
 * loss.physics_weight); host arrays. What a validation over a partial batch counts (its other slots are padding). */
void model_diffusion_sample_losses(const Model *m, int used, double *diff, double *proj);

/* The weight of the second loss term in the total: ae3d's kl_weight, vit3d_diffusion's loss.physics_weight (its
 * projection loss rides in the kl slot of a step's sums), 0 for the others. */
double model_second_loss_weight(const Model *m);

/* The next forward's batch starts at global sample first_sample: each sample's reparameterization noise is keyed
 * by its global index (the same noise for a sample whatever batch it falls in). Written to backend memory on the
 * compute stream (write_async), where model_forward's noise op reads it: a captured forward draws each replay's
 * own noise. */
void model_set_first_sample(Model *m, uint64_t first_sample);
/* Forward over the batch already copied to model_tensor(m, m->t_input) (float32). train = 1: a training forward
 * (ae3d samples its latent noise; BatchNorm normalises with the batch's statistics and updates its running ones;
 * dropout drops); 0: evaluation (z = mu; running statistics; no dropout). Enqueues device work only (capturable). */
void model_forward(Model *m, int train);
/* The head's targets of the next loss: host float32 [n][labels] (survival: [world*n][2], the global batch's),
 * written to backend memory on the compute stream. */
void model_set_targets(Model *m, const float *targets);
/* vit3d_diffusion with cfg.diff.views_given (data.view_columns): the micro-batch's X-ray views, host float32
 * [n][2][img][img] (AP, lateral; drr.h's layout), written to the views tensor on the compute stream before the next
 * forward (staged: views may go when it returns). Its views node then renders nothing: they condition the model
 * and are the projection loss's target. The plan keeps the tensor alive from time 0 so nothing shares it before. */
void model_set_views(Model *m, const float *views);
/* A buffer-shaped backend array to host memory and back (checkpoints, export). */
void model_download_buffers(const Model *m, float *host);
void model_upload_buffers(const Model *m, const float *host);
/* Loss forward+gradient, then backward through every node. grad_scale multiplies the loss gradient
 * (1/(grad_accum x ranks)); loss_scale (backend memory, NULL for 1) multiplies it too, on the device (the dynamic
 * loss scale); param_beta = 0 overwrites the parameter gradients, 1 adds to them (later micro-batches). Enqueues
 * device work only (capturable). */
void model_backward(Model *m, float grad_scale, float param_beta, const float *loss_scale);
/* The loss of the last forward without its gradient (evaluation); a head's needs model_set_targets first. */
void model_loss(Model *m);
Losses model_read_losses(const Model *m);
/* sum of squares of the flat gradient buffer (reads back one float). */
double model_grad_sumsq(const Model *m);

/* config_train.h: the config's "train" section: the optimizer, its schedule and stages, the batch, logging and
 * checkpoint intervals, and where and how the steps run (device, threads, precision, fusion, graphs). */
#pragma once
#include <stdint.h>

#include "core/config_base.h"

#define CONFIG_MAX_STAGES 8
#define CONFIG_MAX_STEPS 1000000000 /* train.steps' bound, and the bound of the stages' sum */

/* A stage's own network (train.stages[i].model, vit3d_diffusion only): the transformer's shape; -1 inherits the
 * model section's key. A stage whose network differs from the stage before is a new network of the cascade
 * (config_stage_model). */
typedef struct {
    int hidden_size, blocks, heads, patch_size[3], mlp_ratio;
} StageModel;

/* One stage of a progressive run (train.stages): its own input size, length, batch and learning rate; the weights
 * carry over from the stage before (the autoencoder is fully convolutional), the optimizer restarts. */
typedef struct {
    int input_size[3];
    int steps;      /* or, when 0, epochs passes over the training set (turned into steps at the start) */
    double epochs;
    int batch_size; /* per rank */
    double lr;
    StageModel model;
} Stage;

typedef struct {
    int steps;
    int batch_size; /* per rank, per micro-batch; 0 = the largest that fits (automatic) */
    int global_batch; /* samples per optimizer step over all ranks and micro-batches; 0 = batch_size x ranks x accum */
    int grad_accum;
    double lr, min_lr;
    int warmup_steps;
    double weight_decay, beta1, beta2, adam_eps;
    double grad_clip; /* 0 = off */
    char lr_scaling[CONFIG_STR]; /* "none" | "linear" | "sqrt": lr x f(ranks) when the batch is given per rank */
    int64_t seed;
    int log_every, val_every, val_samples, ckpt_every;
    char best_metric[CONFIG_STR]; /* auto | loss | l1 | accuracy | auroc | cindex: what best.ckpt keeps the best of */
    char device[CONFIG_STR]; /* "auto" | "cpu" | "cuda" */
    int threads;             /* CPU threads, 0 = all cores */
    int deterministic;       /* GPU: deterministic algorithms only */
    int tf32;                /* GPU: TF32 tensor cores allowed in float32 convolutions */
    int fuse;                /* 1: each GroupNorm and the SiLU after it run as one fused op */
    int checkpoint_activations; /* 1: ResBlock activations recomputed in backward instead of kept */
    char precision[CONFIG_STR]; /* "auto" | "bf16" | "fp16" | "off": activation storage (runtime resolves auto) */
    char batch_preset[CONFIG_STR]; /* "none" | "cxr": seed 002's batch x accumulation table on a GPU (hw_plan.h) */
    char loss_scale[CONFIG_STR]; /* "auto" | "dynamic" | "off" */
    double loss_scale_init;
    int loss_scale_growth_interval;
    int compile;                /* 1: the step is captured in a CUDA Graph and replayed */
    /* fine-tuning (ckpt/weights.h, train/param_groups.h) */
    char init_from[CONFIG_STR];  /* a safetensors file the parameters and buffers start from ("": the seed's) */
    char init_allow[CONFIG_STR]; /* comma-separated glob patterns of keys that may differ from init_from */
    char freeze[CONFIG_STR];     /* comma-separated name prefixes of the first layers left untrained */
    double backbone_lr_mult;
    double ema_decay;          /* the weights' exponential moving average (a model buffer, checkpointed); 0: none */
    int ema_eval;              /* 1: validation (and best.ckpt's choice) runs the moving average, as predict does */     /* learning rate of every parameter but the head's, times this */
    Stage stages[CONFIG_MAX_STAGES]; /* train.stages; n_stages = 0: one stage, the keys above */
    int n_stages;
    int inference; /* not a key: set by predict, whose plan and model hold the forward only (no gradients, no AdamW) */
} TrainConfig;

/* Stage i of train.stages with what it inherits filled in: batch and lr from the train keys above, the input size
 * from model.input_size (passed in: the one value of another section a stage inherits). */
Stage config_stage(const TrainConfig *train, const int model_input_size[3], int i);

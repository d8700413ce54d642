/* config_model.h: the config's "model" section: the network's shape and its loss (what families/ builds). Read, checked
 * and written by config.c's schema table like every key; a module that builds or runs the model includes this
 * header alone. */
#pragma once
#include <stdint.h>

#include "core/config_base.h"

#define CONFIG_MAX_LEVELS 6

/* model.family resnet3d: MONAI's ResNet (monai.networks.nets.ResNet) with its keyword names */
typedef struct {
    int depth;                 /* 10 | 18 | 34 | 50 | 101: resnet10 ... resnet101's blocks and layers */
    int spatial_dims;          /* 3, or 2 (a volume of depth 1: every kernel 1 deep, weights of MONAI's 2-D net) */
    int conv1_t_size;          /* the stem's kernel along every axis (MONAI >= 0.9: ensure_tuple_rep) */
    int conv1_t_stride;        /* the stem's stride along every axis */
    int no_max_pool;           /* 1: no max pooling after the stem */
    char shortcut_type[CONFIG_STR]; /* "B": a 1x1x1 conv + BatchNorm where the shape changes */
    double widen_factor;       /* the four layers' planes 64, 128, 256, 512 times this */
    int bias_downsample;       /* 1: the shortcut conv has a bias (MONAI's default) */
    double bn_momentum, bn_eps;
    int sync_bn;               /* 1: SyncBatchNorm: every BatchNorm's statistics summed over the ranks */
} ResNetConfig;

/* model.family densenet: MONAI's DenseNet (monai.networks.nets.DenseNet121/169/201) with its keyword names; its
 * depth (121, 169, 201), spatial_dims and BatchNorm settings are ResNetConfig's keys (model.depth, ...) */
typedef struct {
    int growth_rate;   /* channels each dense layer adds (32) */
    int init_features; /* the stem's channels (64) */
    int bn_size;       /* a dense layer's bottleneck width, in growth_rate (4) */
    ConfigList block_config; /* the layers of each dense block; empty: model.depth's (config_densenet_blocks) */
    double dropout_prob;     /* dropout after each dense layer (MONAI's dropout_prob; 0: none) */
} DenseNetConfig;

/* model.family vit3d (issue 21's skeleton): a 3-D ViT over patches of the volume that reconstructs it */
typedef struct {
    int hidden_size;   /* token width (the seed's voxel_dim 384) */
    int blocks;        /* transformer blocks (depth) */
    int heads;         /* attention heads (hidden_size divisible by them) */
    int patch_size[3]; /* D, H, W voxels per patch (dividing input_size) */
    int mlp_ratio;     /* the MLP's hidden width, in hidden_size */
    double ln_eps;     /* LayerNorm's epsilon */
} ViTConfig;

/* model.family vit3d_diffusion (issue 21): the denoiser's diffusion process, its X-ray views and its extra loss. Kept
 * in the model section's struct (the builder and the loss need them) but read from their own JSON sections:
 * diffusion.*, xray.* and loss.* (config_schema.c's KM). */
typedef struct {
    int timesteps;               /* diffusion.timesteps: T (1000 in the seed) */
    char schedule[CONFIG_STR];   /* diffusion.schedule: "cosine" | "linear" */
    char prediction[CONFIG_STR]; /* diffusion.prediction: "v" | "epsilon" */
    int sample_steps;            /* diffusion.sample_steps: DDIM steps when sampling */
    char timestep_spacing[CONFIG_STR]; /* diffusion.timestep_spacing: DDIM's "trailing" | "leading" */
    double data_scale;           /* diffusion.data_scale: the process runs on data_scale * x0 (diffusion.h) */
    int img_size;                /* xray.img_size: each view's side in pixels (512 in the seed) */
    int patch_size;              /* xray.patch_size: pixels per side of a view's 2-D patch (dividing img_size) */
    double mu_scale;             /* xray.mu_scale: attenuation across the field of view at intensity 1 */
    int backproject;             /* xray.backproject: the views lifted into the volume as 2 channels beside x_t */
    double physics_weight;       /* loss.physics_weight: weight of the projection loss (0: off) */
    double min_snr_gamma;        /* loss.min_snr_gamma: min-SNR-gamma weighting of the diffusion loss (0: off) */
    int views_given;             /* not a key: the trainer sets it when data.view_columns lists the views (DRR PNGs
                                    beside each CT): the views node then renders nothing, model_set_views writes
                                    them before each forward */
} DiffusionConfig;

/* One earlier network of a cascade (vit3d_diffusion, train.stages[k].model): the stage it was trained at (its
 * volume) and its transformer's shape. Not a key: train_stages (config_stage.c) derives the list of a stage whose
 * network differs from the one before, and the builder makes each as the frozen conditioner of the next. */
#define CONFIG_MAX_CASCADE 7
typedef struct {
    int input_size[3];
    int hidden_size, blocks, heads, patch_size[3], mlp_ratio;
} CascadeLevel;

/* The prediction head of a classifier family (resnet3d): what it predicts and from which loss. */
typedef struct {
    char task[CONFIG_STR];     /* "classification" | "multilabel" | "regression" | "survival" */
    int num_classes;           /* outputs: classes (classification), labels (multilabel), targets (regression);
                                  survival has 1 (the risk score) */
    ConfigList class_weights;  /* classification: CrossEntropyLoss's weight, one per class (empty: none) */
    ConfigList pos_weight;     /* multilabel: BCEWithLogitsLoss's pos_weight (empty: none) */
    int pos_weight_auto;       /* multilabel: pos_weight from the training split's counts (the trainer fills it) */
    double dropout;            /* before the final Linear; keyed noise, so resume stays exact */
} HeadConfig;

typedef struct {
    char family[CONFIG_STR]; /* "ae3d" | "resnet3d" | "vit3d" | "vit3d_diffusion": which builder makes the network (build_<family>.c) */
    int input_size[3]; /* D, H, W */
    int in_channels;
    int channels[CONFIG_MAX_LEVELS];
    int levels; /* number of entries in channels */
    int res_blocks;
    int norm_groups;
    int latent_channels;
    double kl_weight;
    char loss[CONFIG_STR]; /* "l1" | "mse" */
    double logvar_min, logvar_max;
    double norm_eps;
    char pad_input_channels[CONFIG_STR]; /* "auto" | "on" | "off": conv_in's input channels padded to a multiple of 8 */
    ResNetConfig resnet; /* family resnet3d (depth, spatial_dims and the BatchNorm keys: densenet's too) */
    DenseNetConfig densenet; /* family densenet */
    HeadConfig head;     /* the head families: resnet3d, densenet */
    ViTConfig vit;       /* families vit3d and vit3d_diffusion */
    DiffusionConfig diff; /* family vit3d_diffusion */
    /* vit3d_diffusion's cascade (not keys: config_stage_model): the earlier stages' networks, first to last; the last
     * conditions this one (its x0 prediction or sample upsampled beside x_t), and itself on the one before */
    CascadeLevel cascade[CONFIG_MAX_CASCADE];
    int cascade_n;
} ModelConfig;

/* A hash of the keys that decide the parameter layout (ae3d: in_channels, levels, res_blocks, latent_channels,
 * norm_groups, channels, the same values as before families existed, so its checkpoints still load; resnet3d: the
 * family, in_channels and the keys that shape its layers and head), stored in checkpoints to refuse another model. */
uint64_t config_model_fingerprint(const ModelConfig *model);

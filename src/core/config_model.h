/* config_model.h: the config's "model" section: the network's shape and its loss (what model/ builds). Read, checked
 * and written by config.c's schema table like every key; a module that builds or runs the model includes this
 * header alone. */
#pragma once
#include <stdint.h>

#include "core/config_base.h"

#define CONFIG_MAX_LEVELS 6

typedef struct {
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
} ModelConfig;

/* A hash of the keys that decide the parameter layout (in_channels, levels, res_blocks, latent_channels,
 * norm_groups, channels), stored in checkpoints to refuse another model. */
uint64_t config_model_fingerprint(const ModelConfig *model);

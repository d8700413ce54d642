/* weights_source.h: what export and predict load a trained model from: a checkpoint (its config is the run's
 * config.json beside its checkpoints/ folder) or a safetensors file (its config in the metadata voxscale export
 * writes; a file converted from PyTorch has none, and --config gives it). */
#pragma once
#include "app/cli.h"
#include "model/model.h"

/* cli_parse_from's config source for --ckpt / --weights (exit 2 when there is none to be had). */
void weights_config_source(const CliArgs *a, Config *cfg);
/* The checkpoint's run's config.json: <dir of ckpt>/../config.json, into out. */
void weights_config_beside(const char *ckpt, char *out, size_t len);
/* A checkpoint of one of train.stages whose model is not the final config's (vit3d's position table follows the
 * input size, so a stage of another size has another layout): cfg's model.input_size becomes that stage's, and a line
 * says so, naming the stage; nothing changes for any other checkpoint (ckpt_read then refuses one that fits none). */
void weights_ckpt_stage(Config *cfg, const char *ckpt, const char *who);

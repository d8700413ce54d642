/* weights_source.h: what export and predict load a trained model from: a checkpoint (its config is the run's
 * config.json beside its checkpoints/ folder) or a safetensors file (its config in the metadata voxscale export
 * writes; a file converted from PyTorch has none, and --config gives it). */
#pragma once
#include <stdint.h>

#include "app/cli.h"
#include "graph/model.h"

/* cli_parse_from's config source for --ckpt / --weights (exit 2 when there is none to be had). */
void weights_config_source(const CliArgs *a, Config *cfg);
/* Before checkpoint `ckpt` (its header's or manifest's model fingerprint and parameter count) is read into model m,
 * built from the config config_desc names ("--config x.json"): when they differ and the run's config.json at
 * run_config describes the checkpoint's model, exit 2 naming the first parameter whose name or shape differs between
 * the two models (a count alone said "different model (11321 parameters) than the config (11321)"), and what to do
 * (`instead`). Nothing otherwise: the checkpoint reader's own checks follow. */
void weights_check_ckpt_model(const char *ckpt, uint64_t fingerprint, uint64_t param_count, const Model *m,
                              const char *run_config, const char *config_desc, const char *instead);
/* predict's and export's use of it: --ckpt read with a --config (nothing without one: the run's own config). */
void weights_check_ckpt_config(const CliArgs *a, const Model *m);
/* The checkpoint's run's config.json: <dir of ckpt>/../config.json, into out. */
void weights_config_beside(const char *ckpt, char *out, size_t len);
/* A checkpoint of one of train.stages whose model is not the final config's (vit3d's position table follows the
 * input size, so a stage of another size has another layout): cfg's model.input_size becomes that stage's, and a line
 * says so, naming the stage; nothing changes for any other checkpoint (ckpt_read then refuses one that fits none). */
void weights_ckpt_stage(Config *cfg, const char *ckpt, const char *who);

/* config.h: the run configuration, read from JSON and validated strictly against one schema table.
 * Every key has a type, a range and a default; an unknown key, a wrong type or an out-of-range value is one line
 * naming the file and the key (exit 2). The same table writes the resolved config back out and applies the
 * command-line overrides, so the three can never disagree. */
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "core/config_data.h"
#include "core/config_dist.h"
#include "core/config_model.h"
#include "core/config_output.h"
#include "core/config_train.h"

/* The whole configuration: one member per JSON section, each its own struct in its own header
 * (core/config_<section>.h), so that a module includes, sees and recompiles with only the section it uses; its entry
 * points take that section and the few values of other sections they need, passed explicitly. Only the top sees a
 * whole Config: app/, train_run (train/train.c), bench's drivers and this module. The schema table (config.c) is
 * still the one table of every key, naming each by its section and field. There are no bench.* keys: bench's
 * options are flags of its subcommands (BenchStepOptions, ...), so there is no bench section. */
typedef struct {
    ModelConfig model;
    TrainConfig train;
    DataConfig data;
    OutputConfig output;
    DistConfig dist;
} Config;

/* Loads and validates `path` (defaults first, then the file). Exits 2 on any bad input. */
void config_load(Config *cfg, const char *path);
/* The same from text already in memory (len bytes, not necessarily NUL-terminated); `origin` names it in errors.
 * The config reader's fuzz target enters here. */
void config_parse_text(Config *cfg, const char *text, size_t len, const char *origin);
/* Fills every key with its default. */
void config_defaults(Config *cfg);
/* Sets one key ("train.steps") from a command-line string; `origin` names the flag in the error message. */
void config_set(Config *cfg, const char *key, const char *value, const char *origin);
/* 1 if "section.key" names a config key. */
int config_has_key(const char *dotted);
/* The known key nearest to a mistyped section.key (or, key NULL, the nearest section), "section.key", into out; ""
 * when none is near (core/config_suggest.c). Returns out. */
const char *config_suggest(const char *section, const char *key, char *out, size_t len);
/* Whether model.family `family` is a network with a prediction head (model.task, labels from the manifest): resnet3d
 * and densenet; the others reconstruct. */
int config_family_has_head(const char *family);
/* A densenet's dense blocks: the layers of each into layers[] (model.block_config, or model.depth's), returning their
 * count (0 for a depth without a preset: config_validate refuses it) */
int config_densenet_blocks(const ModelConfig *m, int layers[CONFIG_MAX_LIST]);
/* The validation figure best.ckpt keeps the best of: train.best_metric, or for auto the family's (task's) own; with
 * `logged` (may be NULL) the figures the family's validation logs that it may name ("loss, accuracy, auroc"). */
const char *config_best_metric(const Config *cfg, const char **logged);
/* Stage i's whole model section (config_stage.c): model with train.stages[i]'s input size and network (its
 * .model keys over the model section's) and its cascade, the networks of the earlier stages that precede a change
 * of network (each stage's last); with no stages, model itself. */
void config_stage_model(const ModelConfig *model, const TrainConfig *train, int i, ModelConfig *out);
/* Whether two transformers are the same network (hidden_size, blocks, heads, patch_size, mlp_ratio; ln_eps aside) */
int config_same_network(const ViTConfig *a, const ViTConfig *b);
/* Whether stage i's network (train.stages[i].model) is another than stage i-1's: it starts a new cascade level. */
int config_stage_new_network(const ModelConfig *model, const TrainConfig *train, int i);
/* Cross-key checks (groups divide channels, input divisible by the downsampling factor, ...). */
void config_validate(const Config *cfg, const char *origin);
/* The resolved config as pretty JSON (caller frees). */
char *config_to_json(const Config *cfg);
/* Writes config_to_json to path (atomically). */
void config_write(const Config *cfg, const char *path);
/* The schema's keys one by one (what the ranks compare at their rendezvous): how many, the name of key i
 * ("train.seed", into out), and its value in cfg as compact JSON (caller frees). */
int config_key_count(void);
const char *config_key_name(int i, char *out, size_t len);
char *config_key_json(const Config *cfg, int i);
/* Lists every key with its default and meaning (for --help-config). */
void config_print_help(FILE *out);

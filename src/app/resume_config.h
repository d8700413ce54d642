/* resume_config.h: the config `train --resume CKPT` runs with. Without --config it is the run's own config.json
 * (beside the checkpoints/ folder the checkpoint is in, as export and predict find it), said on one line; with
 * --config, that file must agree with the run's config.json in what the run computes (the model, the data, the
 * optimizer, the seed), the command line's flags applied to both, or the run is refused naming the keys that differ
 * (a changed key is asked for with --set, on purpose). */
#pragma once
#include "app/cli.h"

/* cli_parse_from's config source for train: the run's config.json when --resume is given (exit 2 naming the path
 * when there is none), else DEFAULT_CONFIG. */
void resume_config_source(const CliArgs *a, Config *cfg);
/* With --resume and --config: exit 2 when the --config file and the run's config.json differ (flags applied to both)
 * in what the run computes; nothing when the checkpoint has no run's config.json beside it. */
void resume_config_check(const CliArgs *a);
/* The config.json of the run a checkpoint belongs to (runs/r/checkpoints/step_N.ckpt, a sharded step_N.zero or its
 * manifest.json -> runs/r/config.json), into out. */
void resume_config_path(const char *ckpt, char *out, size_t len);

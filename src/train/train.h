/* train.h: the training loop: data, forward/backward with gradient accumulation, clipping, AdamW with a
 * warmup-cosine schedule, validation, progress lines, metrics and checkpoints, and exact resume. */
#pragma once
#include "core/config.h"
#include "train/runtime.h"
#include "parallel/buckets.h"
#include "train/train_plan.h"

/* Trains cfg; config_name names the run directory when cfg->output.dir is empty. resume_path may be NULL.
 * Returns the process exit code (0, or 130 after SIGINT/SIGTERM with a checkpoint written); every other ending
 * exits with its own code (util.h). */
int train_run(Config *cfg, const char *config_name, const char *resume_path);

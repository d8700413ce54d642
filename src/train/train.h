/* train.h: the training loop: data, forward/backward with gradient accumulation, clipping, AdamW with a
 * warmup-cosine schedule, validation, progress lines, metrics and checkpoints, and exact resume. */
#pragma once
#include "core/config.h"
#include "train/runtime.h"

/* Trains cfg; config_name names the run directory when cfg->out_dir is empty. resume_path may be NULL.
 * Returns the process exit code (0, or 130 after SIGINT/SIGTERM with a checkpoint written); every other ending
 * exits with its own code (util.h). */
int train_run(Config *cfg, const char *config_name, const char *resume_path);
/* Plans the host memory of a run of cfg on rt (the model on a CPU backend, held-out volumes, the loader's ring,
 * checkpoint and histogram copies) for `ranks_here` ranks on this machine, prints it when verbose, and refuses
 * (exit 5) a plan beyond HW_MEMORY_SHARE of the available RAM, naming the config keys that shrink its largest
 * part. */
void train_check_memory(const Runtime *rt, const Config *cfg, int ranks_here, int verbose);
/* The per-rank batch and the learning-rate factor of cfg for `world` ranks: train.global_batch (when set) divided
 * by ranks x grad_accum, written into cfg->batch_size (exit 2 when it does not divide); the factor is
 * train.lr_scaling's (1 with a global batch, which does not change with the number of ranks). */
double train_plan_ranks(Config *cfg, int world);

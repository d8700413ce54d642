/* train_plan.h: what a run decides before it starts, from its config and the machine: the per-rank batch and the
 * learning-rate factor for its number of ranks, its stages (train.stages: progressive input sizes), and its host
 * memory plan, refused up front when it does not fit. */
#pragma once
#include <stdint.h>

#include "core/config.h"
#include "train/runtime.h"

/* The per-rank batch and the learning-rate factor of cfg for `world` ranks: train.global_batch (when set) divided
 * by ranks x grad_accum, written into cfg->batch_size (exit 2 when it does not divide); the factor is
 * train.lr_scaling's (1 with a global batch, which does not change with the number of ranks). */
double train_plan_ranks(Config *cfg, int world);

/* One stage as it runs: the config with the stage's input size, batch, lr and steps; its first global step. */
typedef struct {
    Config cfg;
    int64_t first_step;
    int index;
} StagePlan;

/* The stages of cfg (one, cfg itself, when train.stages is empty) into out[CONFIG_MAX_STAGES]; a stage given in
 * epochs gets ceil(epochs x epoch_samples / global batch) steps. Returns their number. */
int train_stages(const Config *cfg, int64_t epoch_samples, int world, StagePlan *out);

/* Plans the host memory of a run of cfg with model m on rt (the model on a CPU backend, held-out volumes, the
 * loader's ring, checkpoint and histogram copies, the data cache) for `ranks_here` ranks on this machine, prints it
 * when verbose, and refuses (exit 5) a plan beyond HW_MEMORY_SHARE of the available RAM, naming the config keys
 * that shrink its largest part. */
void train_check_memory(const Runtime *rt, const Config *cfg, const Model *m, double cache_bytes, int ranks_here,
                        int verbose);

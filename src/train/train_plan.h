/* train_plan.h: what a run decides before it starts, from its config and the machine: the per-rank batch and the
 * learning-rate factor for its number of ranks, its stages (train.stages: progressive input sizes), and its host
 * memory plan, refused up front when it does not fit. */
#pragma once
#include <stdint.h>

#include "core/config_model.h"
#include "core/config_train.h"
#include "train/runtime.h"

/* The per-rank batch and the learning-rate factor of the train section for `world` ranks: train.global_batch (when
 * set) divided by ranks x grad_accum, written into train->batch_size (exit 2 when it does not divide); the factor is
 * train.lr_scaling's (1 with a global batch, which does not change with the number of ranks). */
double train_plan_ranks(TrainConfig *train, int world);

/* One stage as it runs: the model and train sections with the stage's input size (model), batch, lr and steps
 * (train); its first global step. */
typedef struct {
    ModelConfig model;
    TrainConfig train;
    int64_t first_step;
    int index;
} StagePlan;

/* The stages of the run (one, the sections themselves, when train.stages is empty) into out[CONFIG_MAX_STAGES]; a
 * stage given in epochs gets ceil(epochs x epoch_samples / global batch) steps. Returns their number. */
int train_stages(const ModelConfig *model, const TrainConfig *train, int64_t epoch_samples, int world,
                 StagePlan *out);

/* Plans the host memory of a run with model m on rt (the model on a CPU backend, `held` held-out volumes (the larger
 * of train.val_samples and the images shown), the loader's ring of `prefetch` batches (data.prefetch), checkpoint
 * and histogram copies, the data cache) for `ranks_here` ranks on this machine, prints it when verbose, and refuses
 * (exit 5) a plan beyond HW_MEMORY_SHARE of the available RAM, naming the config keys that shrink its largest part. */
void train_check_memory(const Runtime *rt, const Model *m, int held, int prefetch, double cache_bytes, int ranks_here,
                        int verbose);
/* Of that plan, one rank's host bytes beside the model itself (held-out volumes, loader, checkpoint and histogram
 * copies, cache): what dist.zero auto keeps free on CPU ranks (zero_plan.h). */
double train_host_other_bytes(const Runtime *rt, const Model *m, int held, int prefetch, double cache_bytes);

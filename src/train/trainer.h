/* trainer.h: the state of one training run between its steps, shared by the loop (train.c) and its stages
 * (train_stages.c); internal to src/train. */
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "ckpt/ckpt.h"
#include "parallel/buckets.h"
#include "parallel/comm.h"
#include "parallel/launch.h"
#include "train/evaluate.h"
#include "train/runtime.h"
#include "train/step.h"
#include "train/train_log.h"
#include "train/train.h"
#include "train/train_plan.h"
#include "train/zero.h"

/* Everything one run holds between its steps. */
typedef struct {
    Config *cfg;        /* the run's: total steps, run directory, everything the stages share */
    const StagePlan *cur; /* the current stage: its input size (model), batch, lr, steps (train: the schedule) */
    StagePlan stages[CONFIG_MAX_STAGES];
    int n_stages, stage;
    Runtime rt;
    Model *m;
    const Backend *be;
    Dataset *ds;
    Loader loader;
    int loader_on;
    /* GPU: two staging buffers the batches are uploaded into (the next while the current step runs), each with the
     * event after the step's copy out of it; the CPU copies the loader's slot straight into the model's input */
    float *staging[2];
    void *staging_read[2];
    int staging_next;
    FILE *metrics;
    FILE *samples; /* output.sample_log: one line per micro-batch, the global samples it read */
    TrainLog *tb;
    CkptState st;      /* st.step counts the steps enqueued; collected counts those whose outcome is in */
    int64_t collected;
    int64_t saved_step; /* of the last step_N checkpoint, -1 before any */
    double wait_s[2], lr[2]; /* the loader wait and the learning rate of the steps in flight, by parity */
    HeldOut held;   /* rank 0's validation volumes at the stage's size */
    double best_metric; /* the stage's best validation figure so far (train.best_metric, higher is better) */
    float *targets;     /* a head's targets of a micro-batch, [world*batch][labels] (survival: the global batch) */
    DistEnv env;
    Comm *comm;        /* single for one process */
    Buckets *buckets;  /* NULL for one process */
    Stepper *stepper;
    /* sharded data parallelism (dist.zero 1 or 2 with ranks), else NULL; its layout and offload; the run's nonce
     * (sharded checkpoint ids); a named checkpoint rank 0's validation asked for, which every rank writes after it */
    Zero *zero;
    ZeroLayout zl;
    int offload;
    uint64_t nonce;
    int pending_best, pending_stage; /* best.ckpt asked for; stage_<pending_stage - 1>_best.ckpt (0: none) */
    double lr_scale;   /* train.lr_scaling's factor for this number of ranks */
} Trainer;

/* A non-finite value at step1 (the loss, the gradient norm, ...): ends the run with exit 4, saying what and that
 * the last checkpoint stays (train.c). */
__attribute__((noreturn)) void trainer_diverged(Trainer *t, int64_t step1, const char *what, double value);
/* Writes checkpoints/<name>, or checkpoints/step_<step>.ckpt when name is NULL (trainer_state.c): rank 0's call.
 * Sharded: every rank's call writes checkpoints/<name without .ckpt>.zero/ (step_<step>.zero); rank 0's call from
 * its validation alone only notes the name, which trainer_share_pending_checkpoint then has every rank write. */
void trainer_save_checkpoint(Trainer *t, const char *name);
/* Sharded: after rank 0's validation (at steps every rank knows), the checkpoints it asked for, written by all. */
void trainer_share_pending_checkpoint(Trainer *t);
/* Validates after `step` optimizer steps and keeps the best checkpoints (train_validate.c); rank 0's. */
void trainer_validate(Trainer *t, int64_t step);
/* The run's TensorBoard log (train_log_open; rank 0's), whose HParams metrics are train/loss and the figures the
 * family's validation logs (train_validate.c). */
TrainLog *trainer_open_log(const Trainer *t, const char *config_json);
/* The autoencoder's mid-slice pictures of the first held-out volumes (train_validate.c); nothing for a head. */
void trainer_log_images(Trainer *t, int64_t step);

/* dist.zero: every mode's bytes per rank said, and auto's choice made, against what one rank of this machine may plan
 * beside its data and checkpoint copies (zero_plan_choose), written into the config before the ranks compare it. */
void trainer_zero_choose(Trainer *t);
/* Every stage's memory plan, before anything is written: host memory always, the GPU's too on a GPU. */
void trainer_check_stages(Trainer *t);
/* Makes stage k the current one: the model at its size (parameters and, unless fresh_optimizer, AdamW's moments
 * carried over from the model before), its buckets, held-out volumes, staging buffers and loader. */
void trainer_enter_stage(Trainer *t, int k, int fresh_optimizer);
/* Stage k's model has stage 0's packed layout (the model fingerprint, which holds what shapes the parameters: for
 * vit3d the input size, whose patch grid sizes pos_embed; not for the fully convolutional ae3d). */
int trainer_stage_keeps_layout(const Trainer *t, int k);
/* The stage whose model wrote a checkpoint at `step`: the stage of its last step (a checkpoint on a stage's first
 * step is written before that stage is entered), so a checkpoint written in stage k resumes in stage k's layout. */
int trainer_ckpt_stage(const Trainer *t, int64_t step);
/* What a checkpoint of stage k is read against: the run's model (stage 0's) when k keeps its layout, else stage k's
 * model built (not allocated; the caller frees it with model_free). */
Model *trainer_ckpt_model(Trainer *t, int k);
/* Resuming into stage k's layout: m (trainer_ckpt_model's) becomes the run's model in place of stage 0's, before
 * either is allocated (trainer_zero_open allocates it); nothing happens when m is the run's model already (ae3d:
 * trainer_enter_stage carries stage 0's into stage k as it always did). */
void trainer_resume_model(Trainer *t, int k, Model *m);
/* The stage holding step s (a stage's first step belongs to it). */
int trainer_stage_of(const Trainer *t, int64_t s);
/* Gives model m the run's ranks: its world and rank, and the exchanges SyncBatchNorm and the Cox loss make inside a
 * step (model.h's hooks) over the run's communicator. */
void trainer_attach_model(Trainer *t, Model *m);
/* The sharding's settings that can only be refused (dist.offload_optimizer without a ZeRO stage): exit 2, checked
 * before the run directory is taken, so that a refused run changes nothing there (train_zero.c). */
void trainer_zero_check(const DistConfig *d);
/* Allocates and initialises model m, shaped first for sharded data parallelism when dist.zero asks for it (then
 * t->zero, t->buckets and t->zl are set) (train_zero.c). */
void trainer_zero_open(Trainer *t, Model *m);
/* Every rank prints what its allocator counted for parameters, gradients, optimizer state and activations, beside
 * the plan's bytes for the run's mode (train_zero.c). */
void trainer_zero_report(Trainer *t);
/* Decoding threads of this rank: data.workers, or the cores left to each rank of this machine. */
int trainer_data_workers(const Trainer *t);
/* Releases the GPU's staging buffers (none on the CPU). */
void trainer_staging_free(Trainer *t);

/* runtime.h: what train, bench and probe share: detect the hardware, choose the backend and the batch size, build
 * the model, and say all of it in a few lines before the first step. */
#pragma once
#include "core/config_model.h"
#include "core/config_train.h"
#include "hw/hw.h"
#include "graph/model.h"
#include "parallel/buckets.h"

typedef struct {
    HwInfo hw;
    const Backend *be;
    char device_reason[2600]; /* long enough for a cuDNN planning reason (hw.c) */
    HwPlanDevice dev;         /* what the hardware plan knows of the device */
    HwPlan plan;              /* what this config gets there (hw_plan.h) */
    Model *model;
} Runtime;

/* Builds the model section's model on the device the train section asks for. The hardware plan is made here and
 * written back into the train section (precision, an automatic batch_size 0, the accumulation an automatic batch
 * needs for train.global_batch, activation checkpointing when the batch needs it). verbose: print the device, plan
 * and memory lines. The model is built but not allocated: callers that run it call model_allocate(rt->model). */
void runtime_open(Runtime *rt, const ModelConfig *model, TrainConfig *train, int verbose);
/* The same on GPU `gpu` (a data-parallel rank's local rank) when the run goes to a GPU, for a run of `world` ranks;
 * `threads_share` ranks share this machine's cores, so an automatic thread count (train.threads 0) is
 * cores / threads_share. */
void runtime_open_rank(Runtime *rt, const ModelConfig *model, TrainConfig *train, int verbose, int gpu,
                       int threads_share, int world);
void runtime_close(Runtime *rt);
/* Resolves train.precision "auto" (and train.loss_scale "auto") for backend be and writes the result back into the
 * train section, so the resolved config says what ran; an explicit precision the backend cannot run is exit 2,
 * naming why the run is on that device. */
void runtime_resolve_precision(TrainConfig *train, const Backend *be, const char *device_reason);
/* Generates training volumes first .. first+batch-1 of the phantom stream `seed` (train.seed) with noise `noise`
 * (data.noise) at the model's input size, copies them to the model's input and returns the host copy (caller
 * frees): the fixed batch of `bench step` and `probe`. */
float *runtime_load_phantom_batch(Runtime *rt, int64_t seed, double noise, int64_t first);
/* A head's targets for those samples (phantom_labels: the phantoms' labels for model.task), on the model; nothing for
 * ae3d. */
void runtime_load_phantom_targets(Runtime *rt, int64_t seed, int64_t first);

/* The gradient buckets of m's flat gradient buffer as the data-parallel trainer plans them (each bucket's ready_step:
 * the backward node after which its gradients are complete); bench scaling reads the same plan. (runtime.c) */
Buckets *buckets_plan_model(const Model *m, Comm *comm, double bucket_mb, double first_bucket_mb);

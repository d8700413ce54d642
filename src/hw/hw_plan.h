/* hw_plan.h: the hardware plan: from the activation plan (model_build's exact bytes) and the memory a device has,
 * what a run of the config would use there: precision, per-device batch, gradient accumulation to keep a requested
 * global batch, and activation checkpointing only when the batch would not fit otherwise. What the seeds'
 * auto-detection estimated from rules of thumb, decided here from the planned bytes. `detect` prints it and
 * `train --batch-size 0` uses it.
 *
 * Rules:
 *   precision   train.precision auto: bf16 on a GPU of compute capability 8.0 or newer, fp16 below, float32 on the
 *               CPU; an explicit choice stays (the backend refuses what it cannot run)
 *   batch       train.batch_size > 0: that one. 0: the largest power of two up to the device's cap whose planned
 *               bytes fit in HW_MEMORY_SHARE of the available memory, and, when train.global_batch is set, that
 *               divides the global batch's share of one rank
 *   accum       train.global_batch G with an automatic batch: G / (ranks x batch); otherwise train.grad_accum
 *   checkpoint  activation checkpointing as the config says, switched on only when not even the smallest batch fits
 *               without it
 *   preset      train.batch_preset cxr (seed 002's hardware table, on a GPU with an automatic batch): batch x
 *               accumulation by the GPU's total memory, >= 20 GB 16 x 4, 14-20 GB 12 x 5, 10-14 GB 8 x 8, 6-10 GB
 *               4 x 16, below 6 GB 2 x 32, kept when the exact plan fits that batch; when it does not, the largest
 *               batch that fits (up to the table's) and the accumulation that keeps the table's samples per step
 *               (rounded up); the plan's line says the table's choice and where the two differ */
#pragma once
#include <stddef.h>

#include "backend/backend.h"
#include "core/config_model.h"
#include "core/config_train.h"
#include "graph/model.h"

typedef struct {
    int gpu;             /* 1: a GPU (precision by compute capability), 0: the CPU */
    int cc_major, cc_minor;
    size_t available;    /* bytes the model may plan against: free GPU memory, or available RAM */
    size_t total;        /* a GPU's total memory (what seed 002's table reads); 0: unknown (available is used) */
    int cap;             /* the largest automatic batch (the CPU: its cores; a GPU: 64) */
} HwPlanDevice;

typedef struct {
    DType precision;
    int batch, accum, ranks;
    int checkpoint_activations; /* 1 when on (asked for, or switched on to fit) */
    int checkpoint_switched_on; /* 1 when the plan turned it on */
    size_t need_bytes;          /* planned device bytes at batch */
    size_t budget_bytes;        /* HW_MEMORY_SHARE of available */
    int global_batch;           /* batch x ranks x accum */
    char preset[240];           /* train.batch_preset: the table's choice and how the plan kept or changed it ("") */
} HwPlan;

/* The train keys a model is built with (model.h's ModelOptions): precision, fuse, checkpoint_activations, seed. */
ModelOptions hw_model_options(const TrainConfig *train);

/* The plan of a run of the model section `model` with the train section `train` on `ranks` devices like dev; the
 * model's bytes come from model_build on backend be (its convolution workspace sizes, and its supports() for the
 * precision: a test double may pass any table). Returns 1, or 0 with the reason in why (nothing fits, a global batch
 * that cannot be split). */
int hw_plan(const ModelConfig *model, const TrainConfig *train, const Backend *be, const HwPlanDevice *dev, int ranks,
            HwPlan *out, char *why, size_t why_len);
/* Writes the plan into the train section: batch_size, grad_accum, precision, checkpoint_activations. */
void hw_plan_apply(const HwPlan *p, TrainConfig *train);
/* One line: "plan: bf16 mixed precision (...); batch ..."; train as given to hw_plan (it says what was asked: auto
 * precision, an automatic batch, a global batch) */
void hw_plan_describe(const HwPlan *p, const HwPlanDevice *dev, const TrainConfig *train, char *out, size_t len);

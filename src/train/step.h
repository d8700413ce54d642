/* step.h: one optimizer step of a model on its backend, as the trainer and `bench step` run it.
 *
 *   stepper_begin                          timer mark
 *   stepper_micro  x grad_accum            forward, loss, backward of the micro-batch already in the model's input;
 *                                          its losses added to the step's sums on the device; on the last one the
 *                                          gradient buckets are all-reduced during backward (data parallelism)
 *   stepper_end                            the optimizer waits for the buckets, the losses and any rank's stop
 *                                          request are summed over the ranks, then sumsq -> optim_prepare -> AdamW
 *                                          (optim.h): the clip factor, the skip of a non-finite step, the dynamic
 *                                          loss scale and the update are all decided on the device; the outcome is
 *                                          copied back asynchronously
 *   stepper_collect                        waits for the oldest step not collected yet and returns its outcome
 *
 * Nothing between begin and end waits for the device, so with train.compile (--compile) on a backend with graphs
 * (CUDA) each micro-batch and the optimizer are CUDA Graph replays: captured on their second use (the first runs
 * eagerly, so cuDNN's lazy initialisation and algorithm fallbacks happen outside a capture), keyed by what the
 * capture fixes (the parameter-gradient beta of the micro-batch). The values that change from step to step reach
 * the device through write_async before a replay (learning rate, noise offset, stop flag) or live there (loss
 * scale, AdamW's t). The trainer may then enqueue step k+1 before collecting step k: the outcome arrives one step
 * late and the host stays a step ahead of the GPU. Without graphs (eager, or the CPU) the same ops run directly.
 * With ranks (NCCL) the collectives are in the graphs too: the last micro-batch's graph holds its bucket
 * all-reduces, forked onto the communication stream while backward goes on and joined at its end, and the
 * optimizer's holds the losses' all-reduce; the communicator's watchdog keeps each such replay against the deadline
 * (comm.h). The wait for the buckets is then inside the replay and not timed apart (comm_wait_ms is NaN).
 * Sharded (zero.h, stepper_set_zero): at stage 2 every micro-batch's buckets are reduced to their owners during its
 * backward (into the gradient shard, which the micro-batches add to), and the optimizer is zero_optimizer's. */
#pragma once
#include <stdint.h>

#include "core/config_train.h"
#include "parallel/buckets.h"
#include "parallel/comm.h"
#include "graph/model.h"
#include "optim/optim.h"
#include "train/zero.h"

typedef struct {
    int64_t step;            /* 1-based optimizer step these are of */
    double loss, recon, kl;  /* means over the micro-batches and the ranks */
    double grad_norm;        /* of the reduced, unscaled gradient (not finite when the step was skipped) */
    double clip;             /* the clip factor applied */
    double loss_scale;       /* after this step (1 without loss scaling) */
    int skipped;             /* the gradient was not finite: nothing was updated */
    int64_t skipped_total;   /* steps skipped so far */
    int stop;                /* some rank asked to stop (SIGINT/SIGTERM) before this step's end */
    double ms;               /* the step on the device's clock */
    double comm_wait_ms;     /* how long the optimizer waited for the gradient buckets still in flight; NaN under
                              * graphs with ranks (the wait is inside the last micro-batch's replay) */
    double slot_wait_ms;     /* ZeRO-2 on the CPU backend: how long backward waited for its staging slots (the
                              * reduce-scatter that last used one), which comm_wait_ms does not count; NaN elsewhere
                              * (on a GPU the compute stream waits, not the host) */
    /* with stepper_time_phases (one micro-batch, eager): forward (with the noise), loss + backward, and the
     * optimizer (norm, prepare, AdamW, after the buckets' wait) on the device's clock; else 0 */
    double forward_ms, backward_ms, optimizer_ms;
} StepOutcome;

typedef struct Stepper Stepper;

/* A stepper for model m (allocated) with the train section's optimizer, accumulation and graph settings; comm
 * (single for one process) and buckets (NULL for one process) as the trainer made them. The optimizer state starts
 * fresh (loss scale train.loss_scale_init). */
Stepper *stepper_create(Model *m, const TrainConfig *cfg, Comm *comm, Buckets *buckets);
void stepper_free(Stepper *s);
/* After a stage change: the new model and buckets (graphs captured for the old ones are dropped). */
void stepper_set_model(Stepper *s, Model *m, Buckets *buckets);
/* Sharded data parallelism (NULL: none): its optimizer, and at stage 2 its reductions in every micro-batch. With
 * offload the optimizer waits for the host, so the step runs eagerly (and says so once). */
void stepper_set_zero(Stepper *s, Zero *z);
/* The persistent optimizer state (optim.h's OptimCarry), read from the device (waits for it; no step may be
 * pending), and set (a loss_scale of 0 keeps the current one). */
OptimCarry stepper_carry(const Stepper *s);
/* The least loss scale the run's dynamic scaling may back off to (optim_loss_scale_floor of the model's type, its loss
 * elements and the gradient scale 1/(accumulation x ranks)): the trainer ends a run that falls below it (exit 4). */
double stepper_loss_scale_floor(const Stepper *s);
void stepper_set_carry(Stepper *s, const OptimCarry *c);

void stepper_begin(Stepper *s, int64_t step1);
/* Micro-batch `micro` (0-based) whose first volume is global sample first_sample. */
void stepper_micro(Stepper *s, int micro, int64_t first_sample);
/* The optimizer at learning rate lr; stop_request: this rank wants to stop after this step. */
void stepper_end(Stepper *s, double lr, int stop_request);
/* Test-only: the step being enqueued gets a NaN in its gradient, written by stepper_end once the gradient is complete
 * (after the buckets' all-reduces: written earlier, one still in flight could overwrite it on some ranks only), as a
 * float16 overflow would leave it. */
void stepper_test_nonfinite_grad(Stepper *s);
/* The benchmarks' step: begin, one micro-batch whose first volume is sample (step1 - 1) x the model's batch (fresh
 * noise each step), end at lr, collect (nothing else may be pending). */
void stepper_one(Stepper *s, int64_t step1, double lr, StepOutcome *out);
/* Steps ended but not collected (0, 1 or 2). */
int stepper_pending(const Stepper *s);
/* Waits for the oldest pending step and returns its outcome. */
void stepper_collect(Stepper *s, StepOutcome *out);
/* 1 when the micro-batches and the optimizer run as graph replays (train.compile on a backend with graphs). */
int stepper_graphs(const Stepper *s);
/* on = 1: time forward, backward and optimizer apart (bench): the steps then run eagerly, one micro-batch each. */
void stepper_time_phases(Stepper *s, int on);

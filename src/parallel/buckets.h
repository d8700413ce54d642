/* buckets.h: gradient buckets all-reduced while backward runs (what PyTorch DDP's reducer does, in the order our
 * flat gradient buffer already has). Gradients lie in reverse layer order in one flat buffer, so backward fills
 * it front to back. The buffer is cut into buckets at parameter boundaries, the first at most first_bucket_mb (so
 * that communication starts early), the others about bucket_mb; a bucket's all-reduce is launched as soon as
 * backward has finished the last node whose gradients it holds, while earlier layers still compute, and the
 * optimizer waits only for what is still in flight. Every rank has the same plan and launches the buckets in the
 * same order (comm.h's contract). Gradients are summed: the trainer scales the loss gradient by
 * 1/(accumulation x world size) beforehand, so the sum is the average over the global batch. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "parallel/comm.h"

/* One parameter's gradient in the flat buffer and the backward step that writes it (backward runs steps from the
 * highest down to 0). */
typedef struct {
    long offset, count; /* floats */
    int step;
} GradSpan;

typedef struct {
    long begin, end; /* floats of the flat buffer */
    int ready_step;  /* written completely once backward has finished this step */
    CommWork *work;  /* in flight, or NULL */
    CommTimes times; /* of the last all-reduce, once waited for */
} Bucket;

typedef struct {
    Bucket *b;
    int n;
    Comm *comm;
    float *grad;    /* the flat gradient buffer the spans index */
    int launched;   /* buckets launched in this step, in order */
    int64_t step;   /* the optimizer step, for the watchdog's messages */
    int active;     /* between buckets_begin and buckets_wait */
} Buckets;

/* Plans buckets over spans (in any order; they must not overlap) for the flat buffer grad. */
Buckets *buckets_plan(const GradSpan *spans, int n_spans, float *grad, Comm *comm, double bucket_mb,
                      double first_bucket_mb);
void buckets_free(Buckets *bk);
/* Arms the buckets for optimizer step `step` (1-based): the next backward's hooks launch them. */
void buckets_begin(Buckets *bk, int64_t step);
/* The backward hook (model.h's backward_hook): launches, in order, every bucket whose gradients are complete once
 * backward step `done_step` has run, and lets the communicator progress the ones in flight. */
void buckets_backward_hook(void *bk, int done_step);
/* Launches what is left (none, after a whole backward) and waits for every bucket of the step. */
void buckets_wait(Buckets *bk);

/* buckets.h: gradient buckets all-reduced while backward runs (what PyTorch DDP's reducer does, in the order our
 * flat gradient buffer already has). Gradients lie in reverse layer order in one flat buffer, so backward fills
 * it front to back. The buffer is cut into buckets at parameter boundaries, the first at most first_bucket_mb (so
 * that communication starts early), the others about bucket_mb; a bucket's all-reduce is launched as soon as
 * backward has finished the last node whose gradients it holds, while earlier layers still compute, and the
 * optimizer waits only for what is still in flight. Every rank has the same plan and launches the buckets in the
 * same order (comm.h's contract). Gradients are summed: the trainer scales the loss gradient by
 * 1/(accumulation x world size) beforehand, so the sum is the average over the global batch.
 *
 * Sharded (ZeRO-2, buckets_shard): the flat layout is cut into equal shards, one per rank, and each bucket is
 * reduced only to the ranks owning its parts (comm_reduce_scatter_v), in every micro-batch, from the same moment in
 * backward. Backward then writes each bucket's gradients into a staging slot of the gradient buffer rather than at
 * their place in the flat layout (the model's grad_offset), so that no rank holds a whole gradient: a slot is reused
 * once the bucket that held it has been reduced (buckets_plan_slots decides which and when, the same on every rank,
 * from the order of backward), and after each reduction the rank's block is added into its gradient shard. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "parallel/comm.h"

#define BUCKETS_SLOT_ALIGN 64 /* floats: staging slots start 256 bytes apart, as the model's views do */

/* One parameter's gradient in the flat buffer and the backward step that writes it (backward runs steps from the
 * highest down to 0). */
typedef struct {
    long offset, count; /* floats */
    int step;
} GradSpan;

typedef struct {
    long begin, end; /* floats of the flat buffer */
    int ready_step;  /* written completely once backward has finished this step */
    int first_step;  /* the first backward step to write it (its spans' highest) */
    /* sharded: its staging slot, where its begin lies in the staging buffer, and its floats per owner */
    int slot;
    long stage_begin;
    size_t *counts;
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
    /* sharded (buckets_shard): this rank's shard [shard_begin, shard_begin + shard_floats) of the flat layout, its
     * gradient shard (backend memory of be), whether the next pass overwrites it (beta 0) or adds to it (1), and per
     * slot the bucket whose reduction last used it in this pass (-1: free) */
    int sharded, nslots;
    long shard_begin, shard_floats;
    float *shard;
    const Backend *be;
    float beta;
    int *occupant;
    /* sharded: host seconds backward spent in the pre-hook waiting for the reduction that last used a slot, summed
     * since the buckets were made (the host's clock: the wait itself where comm_wait blocks the host, the CPU
     * backend; on a GPU only the time to enqueue the stream's wait) */
    double slot_wait_s;
} Buckets;

/* Plans buckets over spans (in any order; they must not overlap) for the flat buffer grad. */
Buckets *buckets_plan(const GradSpan *spans, int n_spans, float *grad, Comm *comm, double bucket_mb,
                      double first_bucket_mb);
void buckets_free(Buckets *bk);
/* Sharded: assigns each bucket a staging slot (at least min_slots of them, so that one bucket's reduction overlaps
 * the next one's backward; more only where the order of backward forces it), in a pass of backward steps from
 * `steps` - 1 down to 0 as the hooks will see them, and returns the staging buffer's length in floats. Pure: the
 * trainer and the memory plan call it alike. */
long buckets_plan_slots(Buckets *bk, int steps, int min_slots);
/* Makes the buckets sharded over `world` ranks in shards of shard_floats (this rank's starting at rank x
 * shard_floats, its gradient shard `shard` on backend be); buckets_plan_slots must have run. */
void buckets_shard(Buckets *bk, const Backend *be, long shard_floats, float *shard);
/* The backward pre-hook (model.h's backward_pre_hook), sharded: before backward step `step` writes a bucket's first
 * gradients, the reduction that used its slot before is finished and the slot zeroed. */
void buckets_backward_pre_hook(void *bk, int step);
/* Arms the buckets for optimizer step `step` (1-based): the next backward's hooks launch them. Sharded: shard_beta
 * 0 makes this pass overwrite the gradient shard (a step's first micro-batch), 1 add to it. */
void buckets_begin(Buckets *bk, int64_t step);
void buckets_begin_sharded(Buckets *bk, int64_t step, float shard_beta);
/* The backward hook (model.h's backward_hook): launches, in order, every bucket whose gradients are complete once
 * backward step `done_step` has run, and lets the communicator progress the ones in flight. */
void buckets_backward_hook(void *bk, int done_step);
/* Launches what is left (none, after a whole backward) and waits for every bucket of the step (sharded: and adds
 * each owned block into the gradient shard). */
void buckets_wait(Buckets *bk);

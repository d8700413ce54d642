/* train_trace.h: what the training loop puts on the profiler trace: the optional window of steps it records
 * (output.profile; CUPTI's kernels too on a GPU) and the gradient all-reduces on a track of their own, so their
 * overlap with backward shows. Kept out of train.c, which is the loop. */
#pragma once

#include <stdint.h>

#include "parallel/buckets.h"
#include "train/runtime.h"

/* The optional profiler window (output.profile): trace steps [first, last], 1-based. */
typedef struct {
    int first, last, active, gpu; /* gpu: CUPTI is recording kernels, copies and memsets */
} ProfileWindow;

/* Starts the trace when step1 enters the window (on a GPU, CUPTI's activity too). */
void profile_step_begin(ProfileWindow *p, const char *run_dir, const Runtime *rt, int64_t step1);
/* Ends it after the window's last step, or at once with force (the run ended inside the window). */
void profile_step_end(ProfileWindow *p, const Backend *be, int64_t step1, int force);
/* The step's bucket all-reduces (rank 0's, CPU communicators: NCCL's kernels come through CUPTI). */
void trace_buckets(const Buckets *bk);

/* runtime.h: what train, bench and probe share: detect the hardware, choose the backend and the batch size, build
 * the model, and say all of it in a few lines before the first step. */
#pragma once
#include "model/hw.h"
#include "model/model.h"

typedef struct {
    HwInfo hw;
    const Backend *be;
    char device_reason[2600]; /* long enough for a cuDNN planning reason (hw.c) */
    Model *model;
} Runtime;

/* cfg->batch_size 0 is resolved here (and written back into cfg). verbose: print the device and memory lines.
 * The model is built but not allocated: callers that run it call model_allocate(rt->model). */
void runtime_open(Runtime *rt, Config *cfg, int verbose);
/* The same on GPU `gpu` (a data-parallel rank's local rank) when the run goes to a GPU; `threads_share` ranks share
 * this machine's cores, so an automatic thread count (train.threads 0) is cores / threads_share. */
void runtime_open_rank(Runtime *rt, Config *cfg, int verbose, int gpu, int threads_share);
void runtime_close(Runtime *rt);
/* Generates training volumes first .. first+batch-1 of cfg's phantom stream, copies them to the model's input and
 * returns the host copy (caller frees): the fixed batch of `bench step` and `probe`. */
float *runtime_load_phantom_batch(Runtime *rt, const Config *cfg, int64_t first);

/* data.h: the training data: a synthetic 3D phantom generator and a background loader thread.
 * A phantom volume is a pure function of (seed, index): random soft-edged ellipsoids of different intensities
 * under a smooth multiplicative bias field, plus Gaussian noise; values roughly in [0, 1]. Because a volume is
 * fully determined by its global sample index, the loader's position is one number, counted in samples (not
 * batches), and a run resumes exactly where it stopped whatever the batch size before and after. */
#pragma once
#include <pthread.h>
#include <stdint.h>

#include "backend.h"
#include "core/config.h"

/* Writes volume `index` of stream `seed` into out [d][h][w][c] (NDHWC without N). */
void phantom_generate(uint64_t seed, uint64_t index, int d, int h, int w, int c, float noise, float *out);
/* Writes volumes first .. first+count-1 of stream `seed`, shaped by cfg, into out [count][D][H][W][C]. */
void phantom_batch(uint64_t seed, const Config *cfg, int count, int64_t first, float *out);

typedef struct {
    Config cfg;        /* shapes and noise of the volumes */
    int batch;
    long volume_count; /* floats per volume */
    uint64_t seed;
    int slots;
    const Backend *be;    /* whose alloc_host makes the slots (pinned memory on CUDA, for asynchronous uploads) */
    float **buf;          /* slots x [batch][d][h][w][c], host memory */
    int64_t *slot_batch;  /* which batch (counted from the start) each slot holds, -1 when empty */
    int64_t first_sample; /* global index of the first sample of batch 0 */
    int64_t stride;       /* samples from one batch's first to the next's: the global micro-batch of all ranks */
    int64_t next_produce, next_consume;
    int stop;
    double wait_seconds; /* time the consumer spent waiting for data */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} Loader;

/* Starts the thread; the k-th batch it produces holds the samples first_sample + k*stride .. + batch-1
 * (first_sample >= 0, stride >= batch). A data-parallel rank r of W takes the part r of every global micro-batch:
 * first_sample = position + r*batch, stride = W*batch; one process: stride = batch. The ring's slots are
 * be->alloc_host memory. */
void loader_start(Loader *l, const Config *cfg, int batch, int64_t first_sample, int64_t stride, const Backend *be);
/* Blocks until the next batch is ready and returns it; valid until loader_release. */
const float *loader_next(Loader *l);
void loader_release(Loader *l);
void loader_stop(Loader *l);

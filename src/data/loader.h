/* loader.h: the prefetching data loader: worker threads fill a ring of host batches ahead of the training step.
 * Batch k holds the training samples first_sample + k*stride .. + batch-1 of the dataset (a data-parallel rank r
 * of W takes part r of every global micro-batch: first_sample = position + r*batch, stride = W*batch; one process:
 * stride = batch), produced by whichever worker is free, consumed in order. The workers decode, normalise, crop and
 * (on the CPU path) augment in parallel: data.workers of them, by default as many as the cores the step leaves. */
#pragma once
#include <pthread.h>
#include <stdint.h>

#include "backend/backend.h"
#include "data/dataset.h"

typedef struct {
    Dataset *ds;
    int batch;
    long volume_count; /* floats per volume */
    int augment;       /* apply flips/rotations on the workers (CPU training); a GPU run applies them itself */
    int slots;
    const Backend *be;    /* whose alloc_host makes the slots (pinned memory on CUDA, for asynchronous uploads) */
    float **buf;          /* slots x [batch][d][h][w][c], host memory */
    int labels;           /* label floats per sample (the dataset's; 0: none) */
    float **lab;          /* slots x [batch][labels] */
    int views;            /* X-ray view floats per sample (the dataset's given views; 0: none, rendered) */
    float **vw;           /* slots x [batch][2][img][img] */
    int64_t *slot_batch;  /* which batch (counted from the start) each slot holds, -1 when empty or in the making */
    int64_t first_sample;
    int64_t stride;
    int64_t next_produce, next_consume;
    int stop;
    int failed; /* a worker met an unusable volume: loader_next reports it (exit 2) on the caller's thread */
    double wait_seconds; /* time the consumer spent waiting for data */
    int workers;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} Loader;

/* Starts `workers` threads over `slots` ring slots (first_sample >= 0, stride >= batch). */
void loader_start(Loader *l, Dataset *ds, int batch, long volume_count, int64_t first_sample, int64_t stride,
                  int slots, int workers, int augment, const Backend *be);
/* Blocks until the next batch is ready and returns it; valid until loader_release. When a worker met an unusable
 * volume it ends the run here, with the dataset's message and exit 2. */
const float *loader_next(Loader *l);
/* The labels of the batch loader_next returned: [batch][labels] (NULL when the dataset has none). */
const float *loader_labels(const Loader *l);
/* Its given X-ray views: [batch][2][img][img] (NULL when the dataset has none). */
const float *loader_views(const Loader *l);
void loader_release(Loader *l);
void loader_stop(Loader *l);

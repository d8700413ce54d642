/* loader.c: the prefetching loader's workers and ring (see loader.h). */
#include "data/loader.h"

#include <string.h>

#include "core/util.h"
#include "trace/trace.h"

/* A slot claimed by a worker: neither empty (-1) nor holding a batch yet. */
#define SLOT_FILLING (-2)

static void *loader_main(void *arg) {
    Loader *l = arg;
    trace_set_thread_name("data loader"); /* fails harmlessly when no trace is recording */
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        const int slot = (int)(l->next_produce % l->slots);
        if (l->slot_batch[slot] != -1) { /* ring full (or that slot still in the making): wait */
            pthread_cond_wait(&l->cv, &l->mu);
            continue;
        }
        const int64_t k = l->next_produce++;
        l->slot_batch[slot] = SLOT_FILLING;
        pthread_mutex_unlock(&l->mu);
        trace_range_push("load batch", "dataloader");
        int ok = 1;
        for (int b = 0; b < l->batch && ok; b++)
            ok = dataset_train_sample(l->ds, l->first_sample + k * l->stride + b, l->augment,
                                      l->buf[slot] + (long)b * l->volume_count,
                                      l->labels ? l->lab[slot] + (long)b * l->labels : NULL,
                                      l->views ? l->vw[slot] + (long)b * l->views : NULL);
        trace_range_pop();
        pthread_mutex_lock(&l->mu);
        if (!ok) {
            l->failed = 1; /* this worker stops; the consumer reports it */
            pthread_cond_broadcast(&l->cv);
            break;
        }
        l->slot_batch[slot] = k;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

void loader_start(Loader *l, Dataset *ds, int batch, long volume_count, int64_t first_sample, int64_t stride,
                  int slots, int workers, int augment, const Backend *be) {
    if (first_sample < 0 || batch < 1 || stride < batch || slots < 1 || workers < 1)
        vx_fatal("loader_start: first sample %lld, batch %d, stride %lld, %d slots, %d workers",
                 (long long)first_sample, batch, (long long)stride, slots, workers);
    memset(l, 0, sizeof *l);
    l->ds = ds;
    l->be = be;
    l->batch = batch;
    l->volume_count = volume_count;
    l->augment = augment;
    l->first_sample = first_sample;
    l->stride = stride;
    l->slots = slots;
    l->buf = vx_calloc((size_t)slots, sizeof *l->buf);
    l->labels = dataset_labels(ds);
    l->lab = vx_calloc((size_t)slots, sizeof *l->lab);
    for (int s = 0; s < slots && l->labels; s++) l->lab[s] = vx_malloc((size_t)batch * l->labels * sizeof(float));
    l->views = dataset_views(ds);
    l->vw = vx_calloc((size_t)slots, sizeof *l->vw);
    for (int s = 0; s < slots && l->views; s++) l->vw[s] = vx_malloc((size_t)batch * l->views * sizeof(float));
    l->slot_batch = vx_calloc((size_t)slots, sizeof *l->slot_batch);
    for (int s = 0; s < slots; s++) {
        l->buf[s] = be->alloc_host((size_t)batch * volume_count * sizeof(float));
        l->slot_batch[s] = -1;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->workers = workers;
    l->threads = vx_calloc((size_t)workers, sizeof *l->threads);
    for (int w = 0; w < workers; w++)
        if (pthread_create(&l->threads[w], NULL, loader_main, l) != 0) vx_fatal("cannot start a data loader thread");
}

const float *loader_next(Loader *l) {
    double t0 = vx_now();
    int slot = (int)(l->next_consume % l->slots);
    pthread_mutex_lock(&l->mu);
    while (l->slot_batch[slot] != l->next_consume) {
        if (l->failed) {
            pthread_mutex_unlock(&l->mu);
            const char *e = dataset_error(l->ds);
            vx_usage_error("%s", e ? e : "the data loader failed");
        }
        pthread_cond_wait(&l->cv, &l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    l->wait_seconds += vx_now() - t0;
    return l->buf[slot];
}

const float *loader_labels(const Loader *l) {
    return l->labels ? l->lab[(int)(l->next_consume % l->slots)] : NULL;
}

const float *loader_views(const Loader *l) {
    return l->views ? l->vw[(int)(l->next_consume % l->slots)] : NULL;
}

void loader_release(Loader *l) {
    int slot = (int)(l->next_consume % l->slots);
    pthread_mutex_lock(&l->mu);
    l->slot_batch[slot] = -1;
    l->next_consume++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void loader_stop(Loader *l) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (int w = 0; w < l->workers; w++) pthread_join(l->threads[w], NULL);
    for (int s = 0; s < l->slots; s++) {
        l->be->release_host(l->buf[s]);
        free(l->lab[s]);
        free(l->vw[s]);
    }
    free(l->threads);
    free(l->buf);
    free(l->lab);
    free(l->vw);
    free(l->slot_batch);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
}

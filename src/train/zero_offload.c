/* zero_offload.c: ZeRO-Offload's optimizer (see zero.h): the shard's float32 master weights and AdamW moments in
 * pinned host memory (the CUDA backend's alloc_host; 64-byte aligned malloc on the CPU), AdamW on the CPU with
 * adamw_cpu (vectorized, OpenMP over the rank's threads). The gradient shard goes down in chunks on the compute
 * stream, each with an event: the host updates a chunk as soon as it has landed while the later ones still copy, and
 * sends its parameters back up on the copy stream (upload_async) while it updates the next. The step's decisions
 * (clip, skip, AdamW's constants) come down with the first chunk: optim_prepare made them on the device. */
#include <string.h>

#include "core/util.h"
#include "train/zero.h"

#define OFFLOAD_CHUNK (1L << 20) /* floats per chunk: 4 MiB, large enough for full-speed copies */

struct ZeroOffload {
    const Backend *be;
    long shard, chunk;
    int nchunks;
    float *master, *m, *v, *grad; /* host, shard floats each */
    OptimState *state;            /* host copies of the step's states [2]: the group at lr, the backbone's */
    void **landed;                /* per chunk: recorded after its copy down (the state's with chunk 0) */
};

ZeroOffload *zero_offload_open(const Backend *be, long shard, size_t *host_bytes) {
    ZeroOffload *o = vx_calloc(1, sizeof *o);
    o->be = be;
    o->shard = shard;
    o->chunk = OFFLOAD_CHUNK;
    o->nchunks = (int)((shard + o->chunk - 1) / o->chunk);
    const size_t bytes = (size_t)(shard ? shard : 1) * sizeof(float);
    float **bufs[4] = {&o->master, &o->m, &o->v, &o->grad};
    for (int k = 0; k < 4; k++) {
        *bufs[k] = be->alloc_host(bytes);
        memset(*bufs[k], 0, bytes);
    }
    o->state = be->alloc_host(2 * sizeof *o->state);
    o->landed = vx_calloc((size_t)(o->nchunks ? o->nchunks : 1), sizeof *o->landed);
    for (int c = 0; c < o->nchunks; c++) o->landed[c] = be->event_create();
    *host_bytes = 4 * bytes + 2 * sizeof *o->state;
    return o;
}

void zero_offload_free(ZeroOffload *o) {
    if (!o) return;
    o->be->synchronize();
    float *bufs[4] = {o->master, o->m, o->v, o->grad};
    for (int k = 0; k < 4; k++) o->be->release_host(bufs[k]);
    o->be->release_host(o->state);
    for (int c = 0; c < o->nchunks; c++) o->be->event_destroy(o->landed[c]);
    free(o->landed);
    free(o);
}

float *zero_offload_master(ZeroOffload *o) { return o->master; }
float *zero_offload_m(ZeroOffload *o) { return o->m; }
float *zero_offload_v(ZeroOffload *o) { return o->v; }

void zero_offload_step(ZeroOffload *o, const float *grad, const ZeroRange *ranges, int n_ranges,
                       OptimState *const *st, int n_st, float *master) {
    const Backend *be = o->be;
    for (int k = 0; k < n_st; k++) be->copy_to_host_async(o->state + k, st[k], sizeof *o->state);
    for (int c = 0; c < o->nchunks; c++) { /* every chunk down, in order, each with its event */
        const long c0 = (long)c * o->chunk, n = o->shard - c0 < o->chunk ? o->shard - c0 : o->chunk;
        be->copy_to_host_async(o->grad + c0, grad + c0, (size_t)n * sizeof(float));
        be->event_record(o->landed[c]);
    }
    if (o->nchunks) be->event_synchronize(o->landed[0]); /* (the states landed before chunk 0) */
    else be->synchronize();
    if (o->state[0].skip) return; /* a non-finite gradient: nothing changes, as adamw's own skip (every group's) */
    const AdamWConsts consts[2] = {o->state[0].c, o->state[n_st > 1 ? 1 : 0].c};
    for (int c = 0; c < o->nchunks; c++) {
        const long c0 = (long)c * o->chunk, n = o->shard - c0 < o->chunk ? o->shard - c0 : o->chunk;
        be->event_synchronize(o->landed[c]);
        for (int r = 0; r < n_ranges; r++) { /* each group's part of the chunk (frozen floats: none) */
            const long a = ranges[r].lo > c0 ? ranges[r].lo : c0;
            const long b = ranges[r].hi < c0 + n ? ranges[r].hi : c0 + n;
            if (a < b) adamw_cpu(b - a, o->master + a, o->grad + a, o->m + a, o->v + a, &consts[ranges[r].state]);
        }
        be->upload_async(master + c0, o->master + c0, (size_t)n * sizeof(float), NULL); /* up while the next updates */
    }
    be->upload_wait(); /* the host buffers are the next step's */
}

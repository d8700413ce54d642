/* buckets.c: planning the gradient buckets and launching their all-reduces from the backward hook; sharded, their
 * staging slots and reductions to owners (see buckets.h). */
#include "parallel/buckets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "elementwise/elementwise.h"

static int by_offset(const void *a, const void *b) {
    const GradSpan *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

Buckets *buckets_plan(const GradSpan *spans, int n_spans, float *grad, Comm *comm, double bucket_mb,
                      double first_bucket_mb) {
    GradSpan *s = vx_malloc((size_t)(n_spans ? n_spans : 1) * sizeof *s);
    memcpy(s, spans, (size_t)n_spans * sizeof *s);
    qsort(s, (size_t)n_spans, sizeof *s, by_offset);
    Buckets *bk = vx_calloc(1, sizeof *bk);
    bk->b = vx_calloc((size_t)(n_spans ? n_spans : 1), sizeof *bk->b); /* at most one bucket per span */
    bk->comm = comm;
    bk->grad = grad;
    const double cap_first = first_bucket_mb * 1048576.0 / sizeof(float), cap = bucket_mb * 1048576.0 / sizeof(float);
    for (int i = 0; i < n_spans; i++) {
        Bucket *cur = bk->n ? &bk->b[bk->n - 1] : NULL;
        const double limit = bk->n <= 1 ? cap_first : cap;
        /* a new bucket when there is none, or the current one would pass its cap with this span (a span larger
         * than the cap gets a bucket of its own) */
        if (!cur || (double)(s[i].offset + s[i].count - cur->begin) > limit) {
            cur = &bk->b[bk->n++];
            cur->begin = s[i].offset;
            cur->ready_step = cur->first_step = s[i].step;
        }
        /* the gap before the span (alignment padding, zero in every rank's buffer) travels with it */
        cur->end = s[i].offset + s[i].count;
        if (s[i].step < cur->ready_step) cur->ready_step = s[i].step;
        if (s[i].step > cur->first_step) cur->first_step = s[i].step;
    }
    free(s);
    return bk;
}

void buckets_free(Buckets *bk) {
    if (!bk) return;
    for (int i = 0; i < bk->n; i++) free(bk->b[i].counts);
    free(bk->occupant);
    free(bk->b);
    free(bk);
}

long buckets_plan_slots(Buckets *bk, int steps, int min_slots) {
    int *occ = vx_malloc((size_t)(bk->n ? bk->n : 1) * sizeof *occ); /* per slot: its bucket, -1 free */
    long *size = vx_calloc((size_t)(bk->n ? bk->n : 1), sizeof *size);
    int nslots = 0, launched = 0;
    for (int j = steps - 1; j >= 0; j--) {
        for (int i = 0; i < bk->n; i++) { /* before step j: a slot for each bucket it starts */
            if (bk->b[i].first_step != j) continue;
            int k = -1;
            for (int q = 0; q < nslots && k < 0; q++)
                if (occ[q] < 0) k = q;
            if (k < 0 && nslots >= min_slots) { /* reuse the slot of the oldest bucket already launched */
                for (int q = 0; q < nslots; q++)
                    if (occ[q] >= 0 && occ[q] < launched && (k < 0 || occ[q] < occ[k])) k = q;
            }
            if (k < 0) k = nslots++; /* none launched yet (or too few slots): a new one */
            occ[k] = i;
            bk->b[i].slot = k;
            const long len = bk->b[i].end - bk->b[i].begin;
            if (len > size[k]) size[k] = len;
        }
        while (launched < bk->n && bk->b[launched].ready_step >= j) launched++; /* after step j, as the hook */
    }
    long total = 0, *base = vx_malloc((size_t)(nslots ? nslots : 1) * sizeof *base);
    for (int k = 0; k < nslots; k++) { /* each slot whole cache lines apart, vector-aligned for the kernels */
        base[k] = total;
        total += (size[k] + BUCKETS_SLOT_ALIGN - 1) / BUCKETS_SLOT_ALIGN * BUCKETS_SLOT_ALIGN;
    }
    for (int i = 0; i < bk->n; i++) bk->b[i].stage_begin = base[bk->b[i].slot];
    bk->nslots = nslots;
    free(occ);
    free(size);
    free(base);
    return total;
}

void buckets_shard(Buckets *bk, const Backend *be, long shard_floats, float *shard) {
    const int W = bk->comm->world;
    bk->sharded = 1;
    bk->be = be;
    bk->shard_floats = shard_floats;
    bk->shard_begin = (long)bk->comm->rank * shard_floats;
    bk->shard = shard;
    bk->occupant = vx_malloc((size_t)(bk->nslots ? bk->nslots : 1) * sizeof *bk->occupant);
    for (int k = 0; k < bk->nslots; k++) bk->occupant[k] = -1;
    for (int i = 0; i < bk->n; i++) { /* each owner's part of the bucket: its shard's intersection with it */
        Bucket *b = &bk->b[i];
        b->counts = vx_malloc((size_t)W * sizeof *b->counts);
        for (int r = 0; r < W; r++) {
            const long lo = (long)r * shard_floats, hi = lo + shard_floats;
            const long a = b->begin > lo ? b->begin : lo, e = b->end < hi ? b->end : hi;
            b->counts[r] = e > a ? (size_t)(e - a) : 0;
        }
    }
}

void buckets_begin(Buckets *bk, int64_t step) {
    bk->step = step;
    bk->launched = 0;
    bk->active = 1;
}

void buckets_begin_sharded(Buckets *bk, int64_t step, float shard_beta) {
    buckets_begin(bk, step);
    bk->beta = shard_beta;
}

static void launch(Buckets *bk, int i) {
    Bucket *b = &bk->b[i];
    char what[96];
    snprintf(what, sizeof what, "gradient bucket %d/%d (%.2f MB) of step %lld", i + 1, bk->n,
             (b->end - b->begin) * sizeof(float) / 1e6, (long long)bk->step);
    if (bk->sharded)
        b->work = comm_reduce_scatter_v(bk->comm, bk->grad + b->stage_begin, b->counts, COMM_SUM, what);
    else b->work = comm_allreduce(bk->comm, bk->grad + b->begin, (size_t)(b->end - b->begin), COMM_SUM, what);
}

/* Waits for bucket i's collective; sharded, adds this rank's block of it into the gradient shard (on the compute
 * stream, after it: comm_wait ordered it so). */
static void finish(Buckets *bk, int i) {
    Bucket *b = &bk->b[i];
    if (!b->work) return;
    comm_wait(bk->comm, b->work, &b->times);
    b->work = NULL;
    if (!bk->sharded || !b->counts[bk->comm->rank]) return;
    const long a = b->begin > bk->shard_begin ? b->begin : bk->shard_begin;
    bk->be->elementwise->accumulate(DT_F32, (long)b->counts[bk->comm->rank], bk->grad + b->stage_begin + (a - b->begin),
                                    bk->shard + (a - bk->shard_begin), bk->beta);
}

void buckets_backward_pre_hook(void *ctx, int step) {
    Buckets *bk = ctx;
    if (!bk->active || !bk->sharded) return;
    for (int i = 0; i < bk->n; i++) {
        Bucket *b = &bk->b[i];
        if (b->first_step != step) continue;
        const int prev = bk->occupant[b->slot];
        /* the plan gave this slot only after its bucket was launched (buckets_plan_slots): finishing it waits */
        if (prev >= 0) {
            if (prev >= bk->launched) vx_fatal("bucket %d's slot is bucket %d's, not launched yet", i, prev);
            const double t0 = vx_now();
            finish(bk, prev);
            bk->slot_wait_s += vx_now() - t0;
        }
        bk->occupant[b->slot] = i;
        /* zero, so that the alignment gaps between its views are zeros in every rank's sum */
        bk->be->zero(bk->grad + b->stage_begin, (size_t)(b->end - b->begin) * sizeof(float));
    }
}

void buckets_backward_hook(void *ctx, int done_step) {
    Buckets *bk = ctx;
    if (!bk->active) return;
    /* Buckets are launched strictly in order, so every rank issues the same sequence whatever its timing. */
    while (bk->launched < bk->n && bk->b[bk->launched].ready_step >= done_step) launch(bk, bk->launched++);
    /* MPI moves a non-blocking collective forward only inside MPI calls: a test per backward step is what lets
     * the all-reduces run during backward there. */
    for (int i = 0; i < bk->launched; i++)
        if (bk->b[i].work) (void)comm_test(bk->comm, bk->b[i].work);
}

void buckets_wait(Buckets *bk) {
    while (bk->launched < bk->n) launch(bk, bk->launched++);
    for (int i = 0; i < bk->n; i++) finish(bk, i);
    for (int k = 0; bk->sharded && k < bk->nslots; k++) bk->occupant[k] = -1;
    bk->active = 0;
}

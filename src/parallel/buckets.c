/* buckets.c: planning the gradient buckets and launching their all-reduces from the backward hook (see buckets.h). */
#include "parallel/buckets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

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
            cur->ready_step = s[i].step;
        }
        /* the gap before the span (alignment padding, zero in every rank's buffer) travels with it */
        cur->end = s[i].offset + s[i].count;
        if (s[i].step < cur->ready_step) cur->ready_step = s[i].step;
    }
    free(s);
    return bk;
}

void buckets_free(Buckets *bk) {
    if (!bk) return;
    free(bk->b);
    free(bk);
}

void buckets_begin(Buckets *bk, int64_t step) {
    bk->step = step;
    bk->launched = 0;
    bk->active = 1;
}

static void launch(Buckets *bk, int i) {
    Bucket *b = &bk->b[i];
    char what[96];
    snprintf(what, sizeof what, "gradient bucket %d/%d (%.2f MB) of step %lld", i + 1, bk->n,
             (b->end - b->begin) * sizeof(float) / 1e6, (long long)bk->step);
    b->work = comm_allreduce(bk->comm, bk->grad + b->begin, (size_t)(b->end - b->begin), COMM_SUM, what);
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
    for (int i = 0; i < bk->n; i++) {
        if (!bk->b[i].work) continue;
        comm_wait(bk->comm, bk->b[i].work, &bk->b[i].times);
        bk->b[i].work = NULL;
    }
    bk->active = 0;
}

/* plan.c: greedy-by-size interval packing for the activation arena (see plan.h). */
#include "graph/plan.h"

#include <stdlib.h>

#include "core/util.h"

#define PLAN_ALIGN 256

int plan_add(Plan *p, size_t bytes, int first, int last) {
    if (p->count == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->items = realloc(p->items, (size_t)p->cap * sizeof *p->items);
        if (!p->items) vx_fatal("out of memory planning the arena");
    }
    bytes = (bytes + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
    p->items[p->count] = (PlanItem){.bytes = bytes ? bytes : PLAN_ALIGN, .first = first, .last = last};
    return p->count++;
}

static const Plan *sort_plan;
static int by_size_desc(const void *a, const void *b) {
    const PlanItem *x = &sort_plan->items[*(const int *)a], *y = &sort_plan->items[*(const int *)b];
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return *(const int *)a - *(const int *)b; /* stable: the plan must not depend on qsort's whims */
}
static int by_offset(const void *a, const void *b) {
    const PlanItem *x = &sort_plan->items[*(const int *)a], *y = &sort_plan->items[*(const int *)b];
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

size_t plan_solve(Plan *p) {
    int n = p->count;
    int *order = vx_malloc((size_t)n * sizeof *order), *placed = vx_malloc((size_t)n * sizeof *placed);
    int *live = vx_malloc((size_t)n * sizeof *live);
    for (int i = 0; i < n; i++) order[i] = i;
    sort_plan = p;
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    int nplaced = 0;
    p->total = 0;
    for (int oi = 0; oi < n; oi++) {
        PlanItem *it = &p->items[order[oi]];
        /* Placed items whose lifetimes overlap this one, by address: take the first gap that fits. */
        int nlive = 0;
        for (int j = 0; j < nplaced; j++) {
            const PlanItem *q = &p->items[placed[j]];
            if (q->first <= it->last && it->first <= q->last) live[nlive++] = placed[j];
        }
        qsort(live, (size_t)nlive, sizeof *live, by_offset);
        size_t offset = 0;
        for (int j = 0; j < nlive; j++) {
            const PlanItem *q = &p->items[live[j]];
            if (q->offset >= offset + it->bytes) break;
            if (q->offset + q->bytes > offset) offset = q->offset + q->bytes;
        }
        it->offset = offset;
        placed[nplaced++] = order[oi];
        if (offset + it->bytes > p->total) p->total = offset + it->bytes;
    }
    free(order);
    free(placed);
    free(live);
    return p->total;
}

size_t plan_unshared_bytes(const Plan *p) {
    size_t s = 0;
    for (int i = 0; i < p->count; i++) s += p->items[i].bytes;
    return s;
}

void plan_free(Plan *p) {
    free(p->items);
    *p = (Plan){0};
}

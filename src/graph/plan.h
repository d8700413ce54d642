/* plan.h: the activation arena planner. Every buffer a step needs (activations, their gradients, saved
 * statistics, workspace) is known with its size and the interval of step "times" in which it is live; the planner
 * packs them into one arena once at start-up (greedy by size, first fit between live neighbours), so the peak is
 * known before step 1 and addresses are fixed (what CUDA Graph capture will need). */
#pragma once
#include <stddef.h>

typedef struct {
    size_t bytes;
    int first, last; /* live during [first, last], inclusive */
    size_t offset;   /* set by plan_solve */
} PlanItem;

typedef struct {
    PlanItem *items;
    int count, cap;
    size_t total; /* arena bytes after plan_solve */
} Plan;

/* Adds an item and returns its index; sizes are rounded up to 256 bytes (alignment for vector loads). */
int plan_add(Plan *p, size_t bytes, int first, int last);
/* Assigns offsets; returns the arena size. Items whose intervals overlap never overlap in memory. */
size_t plan_solve(Plan *p);
/* Sum of all item sizes: what the arena would take without reuse. */
size_t plan_unshared_bytes(const Plan *p);
void plan_free(Plan *p);

/* scaling_model.h: the step-time model of `bench scaling`'s projections (scaling_model.c), apart so that a unit test
 * can check it against hand-computed cases (tests/unit/test_scaling_model.c). */
#pragma once

/* One rank's measured step: phases in seconds, and per gradient bucket (in launch order) the moment after the start
 * of backward at which its gradients are complete, and its size in bytes. */
typedef struct {
    double fwd, bwd, opt;
    double *ready;
    double *bytes;
    int nb;
    int estimated; /* ready moments from FLOP shares (GPU), not timestamps */
} Timeline;

/* The alpha-beta ring all-reduce of `bytes` on n ranks: 2(n-1) alpha + 2(n-1)/n bytes / bus (0 for n = 1). */
double scaling_allreduce_time(int n, double bytes, double alpha, double bus);
/* The step time of n ranks: buckets all-reduced in order, each starting at max(its ready moment, the previous one's
 * end), overlapping backward; step = fwd + max(bwd, last end) + opt, with every compute time (ready moments too)
 * stretched by `share` (ranks sharing cores; 1 on GPUs). */
double scaling_project_step(const Timeline *tl, int n, double alpha, double bus, double share);

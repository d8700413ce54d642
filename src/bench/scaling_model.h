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

/* A data-parallel mode's communication and optimizer (dist.zero, train/zero.h); stage 0 is DDP. */
typedef struct {
    int stage;          /* 0 DDP, 1 ZeRO-1, 2 ZeRO-2 */
    int offload;        /* the shard's AdamW on the host (GPU ranks only: on CPU ranks offload changes nothing) */
    double param_bytes; /* the parameters as the ranks all-gather them (float32, or the compute type) */
    double host_bus;    /* offload: host <-> device bytes/s */
} ZeroComm;

/* The alpha-beta ring reduce-scatter (or all-gather) of `bytes` on n ranks: (n-1) alpha + (n-1)/n bytes / bus. */
double scaling_half_ring_time(int n, double bytes, double alpha, double bus);
/* The step time of n ranks in mode z (NULL: DDP, scaling_project_step): ZeRO-2's buckets are reduce-scattered (half
 * an all-reduce each) in the same order and overlap; ZeRO-1 and 2 then gather the shards' squared norms ((n-1)
 * alpha), update 1/n of the parameters (opt / n) and all-gather them (a half ring of param_bytes, after the
 * optimizer: exposed), so ZeRO-2 moves what DDP moves and ZeRO-1 an all-gather more; offload adds the gradient
 * shard down and the parameter shard up (2 x float32 shard / host_bus, not overlapped with the host's AdamW). */
double scaling_project_step_zero(const Timeline *tl, int n, double alpha, double bus, double share, const ZeroComm *z);

/* The alpha-beta ring model fitted to measured all-reduce times (bench allreduce; bench scaling projects with it):
 * T(S) = 2(n-1) alpha + 2(n-1)/n S / bus, by least squares on relative error over the nr sizes (ascending). Where
 * the times did not grow with the size (a loaded machine: a small message that waited for a descheduled rank), the
 * largest message sets bus (all its time counted as transfer) and the smallest alpha, and method says so. */
typedef struct {
    double alpha, bus;    /* s per ring step, bytes/s of bus bandwidth; 0 where nothing could be fitted */
    double worst_error;   /* the largest |model/measured - 1| at 1 MiB and above */
    const char *method;
} RingFit;
RingFit scaling_fit_ring(int n, int nr, const double *bytes, const double *seconds);

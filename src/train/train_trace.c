/* train_trace.c: what the training loop puts on the profiler trace (see train_trace.h). */
#include "train/train_trace.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "trace/gpu_activity.h"
#include "trace/trace.h"

void profile_step_begin(ProfileWindow *p, const char *run_dir, const Runtime *rt, int64_t step1) {
    if (p->active || step1 < p->first || step1 > p->last) return;
    if (trace_begin(run_dir, 0) != TRACE_OK) vx_fatal("cannot start the profiler trace");
    trace_set_thread_name("train");
    if (strcmp(rt->be->name, "cuda") == 0) {
        const HwGpu *g = &rt->hw.gpus[rt->hw.gpu];
        TraceDevice dev = {.id = 0, .name = g->name, .total_global_mem = g->total_bytes,
                           .compute_major = g->cc_major, .compute_minor = g->cc_minor, .num_sms = g->sms,
                           .warp_size = g->warp_size, .max_threads_per_block = g->max_threads_per_block,
                           .shared_mem_per_block = g->shared_mem_per_block};
        trace_add_device(&dev);
        char why[256];
        p->gpu = trace_gpu_begin(0, why, sizeof why);
        if (!p->gpu) vx_log("profile: GPU activity not recorded (%s); the trace has the host side only\n", why);
    }
    p->active = 1;
    vx_log("profile: recording steps %d..%d\n", p->first, p->last);
}
void profile_step_end(ProfileWindow *p, const Backend *be, int64_t step1, int force) {
    if (!p->active || (step1 < p->last && !force)) return;
    if (p->gpu) {
        be->synchronize(); /* unfinished kernels have no end time */
        trace_gpu_end();
        p->gpu = 0;
    }
    trace_end();
    p->active = 0;
    vx_log("profile: trace written to %s (open it in ui.perfetto.dev or chrome://tracing)\n", trace_last_file());
}

/* The bucket all-reduces of the step on the trace (rank 0's, CPU communicators: NCCL's kernels come through
 * CUPTI), on a track of their own, so their overlap with backward shows. */
void trace_buckets(const Buckets *bk) {
    if (!bk || !trace_is_active()) return;
    const int64_t track = 1000000 + getpid();
    trace_set_track_name(getpid(), track, "gradient all-reduce");
    for (int i = 0; i < bk->n; i++) {
        const CommTimes *c = &bk->b[i].times;
        if (c->start_ns == 0 || c->end_ns < c->start_ns) continue;
        char args[96];
        snprintf(args, sizeof args, "\"bucket\": %d, \"bytes\": %ld", i + 1, (bk->b[i].end - bk->b[i].begin) * 4L);
        trace_add_complete_args("allreduce", "comm", trace_us_at(c->start_ns), (c->end_ns - c->start_ns) / 1e3,
                                getpid(), track, -1, args);
    }
}

/* gpu_events.c: GPU activity records (gpu_activity.h) to trace events, in the layout of PyTorch's profiler
 * (Kineto): names, categories, args and "ac2g" flows as Kineto writes them, so TensorBoard's profiler plugin,
 * Perfetto and chrome://tracing show voxscale's traces like PyTorch's. Plain C over plain structs: compiled in
 * every build and tested without a GPU; gpu_activity.c fills the records from CUPTI. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "trace/gpu_activity.h"
#include "trace/trace.h"

const char *trace_gpu_memcpy_kind_name(unsigned kind) {
    static const char *const names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                        "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
    return kind < sizeof names / sizeof names[0] ? names[kind] : "Unknown";
}

const char *trace_gpu_memory_kind_name(unsigned kind) {
    static const char *const names[] = {"Unknown", "Pageable", "Pinned",        "Device",
                                        "Array",   "Managed",  "Device Static", "Managed Static"};
    return kind < sizeof names / sizeof names[0] ? names[kind] : "Unknown";
}

static bool is_gpu(const TraceGpuRecord *r) {
    return r->kind == TRACE_GPU_KERNEL || r->kind == TRACE_GPU_MEMCPY || r->kind == TRACE_GPU_MEMSET;
}
static bool is_api(const TraceGpuRecord *r) { return r->kind == TRACE_GPU_RUNTIME || r->kind == TRACE_GPU_DRIVER; }
/* CUPTI reports 0 for both timestamps when it could not time an activity (e.g. still running at a forced flush). */
static bool timed(const TraceGpuRecord *r) { return r->end_ns >= r->start_ns && !(r->start_ns == 0 && r->end_ns == 0); }

static double to_trace_us(uint64_t ns, int64_t offset_ns) { return trace_us_at((int64_t)ns - offset_ns); }

/* ---- flows: a launch (API record) to the earliest GPU record with its correlation id ------------------------- */
/* API records by correlation id, a runtime call before a driver call of the same id (the outer one). The arrays
 * sorted hold indices into recs (qsort_r's argument). */
static int api_cmp(const void *a, const void *b, void *recs) {
    const TraceGpuRecord *x = (const TraceGpuRecord *)recs + *(const size_t *)a;
    const TraceGpuRecord *y = (const TraceGpuRecord *)recs + *(const size_t *)b;
    if (x->correlation != y->correlation) return x->correlation < y->correlation ? -1 : 1;
    if (x->kind != y->kind) return x->kind == TRACE_GPU_RUNTIME ? -1 : 1;
    return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

/* GPU records by correlation id, then start. */
static int gpu_cmp(const void *a, const void *b, void *recs) {
    const TraceGpuRecord *x = (const TraceGpuRecord *)recs + *(const size_t *)a;
    const TraceGpuRecord *y = (const TraceGpuRecord *)recs + *(const size_t *)b;
    if (x->correlation != y->correlation) return x->correlation < y->correlation ? -1 : 1;
    return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

static int add_flows(const TraceGpuRecord *recs, size_t n, int64_t offset_ns) {
    size_t *api = vx_malloc(n * sizeof *api), *gpu = vx_malloc(n * sizeof *gpu), n_api = 0, n_gpu = 0;
    for (size_t i = 0; i < n; i++) {
        if (!timed(&recs[i]) || recs[i].correlation == 0) continue;
        if (is_api(&recs[i])) api[n_api++] = i;
        else if (is_gpu(&recs[i])) gpu[n_gpu++] = i;
    }
    qsort_r(api, n_api, sizeof *api, api_cmp, (void *)recs);
    qsort_r(gpu, n_gpu, sizeof *gpu, gpu_cmp, (void *)recs);
    int rc = TRACE_OK;
    size_t a = 0;
    for (size_t g = 0; g < n_gpu && rc == TRACE_OK; g++) {
        const TraceGpuRecord *k = &recs[gpu[g]];
        if (g && recs[gpu[g - 1]].correlation == k->correlation) continue; /* not the earliest of its launch */
        while (a < n_api && recs[api[a]].correlation < k->correlation) a++;
        if (a == n_api) break;
        const TraceGpuRecord *l = &recs[api[a]];
        if (l->correlation != k->correlation) continue;
        rc = trace_add_flow("ac2g", k->correlation, to_trace_us(l->start_ns, offset_ns), l->pid, l->tid,
                            to_trace_us(k->start_ns, offset_ns), k->device, k->stream);
    }
    free(api);
    free(gpu);
    return rc;
}

/* ---- rows and tracks: "GPU <d>" and "stream <s>" once each, host threads listed ------------------------------ */
typedef struct {
    int64_t pid, tid;
} Track;

static int track_cmp(const void *a, const void *b) {
    const Track *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static int name_tracks(const TraceGpuRecord *recs, size_t n, int device_index) {
    Track *gpu = vx_malloc((n + 1) * sizeof *gpu), *api = vx_malloc((n + 1) * sizeof *api);
    size_t n_gpu = 0, n_api = 0;
    for (size_t i = 0; i < n; i++) {
        if (!timed(&recs[i])) continue;
        if (is_gpu(&recs[i])) gpu[n_gpu++] = (Track){recs[i].device, recs[i].stream};
        else if (is_api(&recs[i])) api[n_api++] = (Track){recs[i].pid, recs[i].tid};
    }
    qsort(gpu, n_gpu, sizeof *gpu, track_cmp);
    qsort(api, n_api, sizeof *api, track_cmp);
    int rc = TRACE_OK;
    char name[64];
    if (device_index >= 0) {
        snprintf(name, sizeof name, "GPU %d", device_index);
        rc = trace_set_process_name(device_index, name);
    }
    for (size_t i = 0; i < n_gpu && rc == TRACE_OK; i++) {
        if (i && gpu[i].pid == gpu[i - 1].pid && gpu[i].tid == gpu[i - 1].tid) continue;
        if (gpu[i].pid != device_index && (i == 0 || gpu[i].pid != gpu[i - 1].pid)) {
            snprintf(name, sizeof name, "GPU %" PRId64, gpu[i].pid);
            rc = trace_set_process_name(gpu[i].pid, name);
        }
        snprintf(name, sizeof name, "stream %" PRId64, gpu[i].tid);
        if (rc == TRACE_OK) rc = trace_set_track_name(gpu[i].pid, gpu[i].tid, name);
    }
    for (size_t i = 0; i < n_api && rc == TRACE_OK; i++) {
        if (i && api[i].pid == api[i - 1].pid && api[i].tid == api[i - 1].tid) continue;
        rc = trace_set_track_name(api[i].pid, api[i].tid, NULL); /* keeps a name the thread gave itself */
    }
    free(gpu);
    free(api);
    return rc;
}

/* ---- the events --------------------------------------------------------------------------------------------- */
static int add_event(const TraceGpuRecord *r, int64_t offset_ns) {
    char args[512], name[96];
    double ts = to_trace_us(r->start_ns, offset_ns), dur = (double)(r->end_ns - r->start_ns) / 1e3;
    double gbps = r->end_ns > r->start_ns ? (double)r->bytes / (double)(r->end_ns - r->start_ns) : 0.0;
    int64_t corr = r->correlation ? (int64_t)r->correlation : -1;
    switch (r->kind) {
    case TRACE_GPU_KERNEL:
        snprintf(args, sizeof args,
                 "\"device\": %" PRIu32 ", \"context\": %" PRIu32 ", \"stream\": %" PRIu32
                 ", \"registers per thread\": %" PRIu32 ", \"shared memory\": %" PRId64
                 ", \"grid\": [%" PRId32 ", %" PRId32 ", %" PRId32 "], \"block\": [%" PRId32 ", %" PRId32 ", %" PRId32
                 "]",
                 r->device, r->context, r->stream, r->registers, (int64_t)r->static_shared + r->dynamic_shared,
                 r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1], r->block[2]);
        return trace_add_complete_args(r->name && r->name[0] ? r->name : "kernel", "kernel", ts, dur, r->device,
                                       r->stream, corr, args);
    case TRACE_GPU_MEMCPY:
        snprintf(name, sizeof name, "Memcpy %s (%s -> %s)", trace_gpu_memcpy_kind_name(r->copy_kind),
                 trace_gpu_memory_kind_name(r->src_kind), trace_gpu_memory_kind_name(r->dst_kind));
        snprintf(args, sizeof args,
                 "\"device\": %" PRIu32 ", \"context\": %" PRIu32 ", \"stream\": %" PRIu32
                 ", \"kind\": \"%s\", \"bytes\": %" PRIu64 ", \"memory bandwidth (GB/s)\": %.4f",
                 r->device, r->context, r->stream, trace_gpu_memcpy_kind_name(r->copy_kind), r->bytes, gbps);
        return trace_add_complete_args(name, "gpu_memcpy", ts, dur, r->device, r->stream, corr, args);
    case TRACE_GPU_MEMSET:
        snprintf(name, sizeof name, "Memset (%s)", trace_gpu_memory_kind_name(r->memory_kind));
        snprintf(args, sizeof args,
                 "\"device\": %" PRIu32 ", \"context\": %" PRIu32 ", \"stream\": %" PRIu32 ", \"bytes\": %" PRIu64
                 ", \"memory bandwidth (GB/s)\": %.4f",
                 r->device, r->context, r->stream, r->bytes, gbps);
        return trace_add_complete_args(name, "gpu_memset", ts, dur, r->device, r->stream, corr, args);
    case TRACE_GPU_RUNTIME:
    case TRACE_GPU_DRIVER:
        return trace_add_complete_args(r->name && r->name[0] ? r->name : "cuda api",
                                       r->kind == TRACE_GPU_RUNTIME ? "cuda_runtime" : "cuda_driver", ts, dur,
                                       r->pid, r->tid, corr, NULL);
    }
    return TRACE_ERR_ARG;
}

int trace_gpu_add_events(const TraceGpuRecord *recs, size_t n, int64_t offset_ns, int device_index) {
    if (!recs && n) return TRACE_ERR_ARG;
    int rc = name_tracks(recs, n, device_index);
    int added = 0;
    /* Each launch's X event goes before the flows, so a viewer that keeps file order for equal timestamps
     * binds the flow to the launch rather than to the range around it. */
    for (size_t i = 0; i < n && rc == TRACE_OK; i++) {
        if (!timed(&recs[i]) || !(is_gpu(&recs[i]) || is_api(&recs[i]))) continue;
        rc = add_event(&recs[i], offset_ns);
        if (rc == TRACE_OK) added++;
    }
    if (rc == TRACE_OK) rc = add_flows(recs, n, offset_ns);
    return rc == TRACE_OK ? added : rc;
}

uint64_t trace_gpu_kernel_ns_of(const TraceGpuRecord *recs, size_t n, int64_t offset_ns, double from_us,
                                double to_us) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        const TraceGpuRecord *r = &recs[i];
        if (r->kind != TRACE_GPU_KERNEL || !timed(r)) continue;
        double a = to_trace_us(r->start_ns, offset_ns), b = a + (double)(r->end_ns - r->start_ns) / 1e3;
        if (a < from_us) a = from_us;
        if (b > to_us) b = to_us;
        if (b > a) sum += (uint64_t)((b - a) * 1e3 + 0.5);
    }
    return sum;
}

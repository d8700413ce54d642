/* trace.h: a profiler trace in the Chrome trace event format, written the way PyTorch's profiler writes it
 * (runs/<run>/traces/<host>_<pid>.<ms>.pt.trace.json.gz), so chrome://tracing, Perfetto and TensorBoard's
 * profiler plugin open it.
 *
 * CPU work is recorded with nested ranges per thread (trace_range_push/pop, monotonic clock); device work
 * measured elsewhere (CUPTI through gpu_activity.h, or CUDA events) is added as complete events on the same time
 * line (trace_now_us, trace_us_at). Timestamps are microseconds since trace_begin; the file's baseTimeNanoseconds holds that
 * moment in nanoseconds since the epoch, so traces of several ranks line up.
 * When no trace is active, push and pop cost one predictable branch on a global flag (and, in CUDA builds, the
 * NVTX call: a null function-pointer test when no tool is attached).
 * Threads: push/pop and the trace_add_* and trace_set_* functions may be called from any thread; begin/end from
 * one. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef VX_CUDA
/* NVTX v3 is header-only: the first call looks for a tool (NVTX_INJECTION64_PATH, set by nsys/ncu), and without one
 * every later call is a load of a null function pointer and a branch. Needs -ldl, which CUDA builds link. */
#include <nvtx3/nvToolsExt.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TRACE_OK = 0,
    TRACE_ERR_ARG = -1,   /* NULL or empty argument */
    TRACE_ERR_STATE = -2, /* begin while a trace is active, or end/add without one */
};

/* Starts recording for this process; trace_end writes the file under run_dir/traces/. rank goes into the
 * file's distributedInfo (with world size 1 and no backend unless trace_set_distributed says otherwise). */
int trace_begin(const char *run_dir, int rank);
/* Sets distributedInfo's world_size and backend (e.g. "nccl") for the active trace. */
int trace_set_distributed(int world_size, const char *backend);

/* One deviceProperties entry (the fields PyTorch writes from cudaDeviceProp); none are given on a CPU run. */
typedef struct {
    int id;
    const char *name;
    uint64_t total_global_mem;
    int compute_major, compute_minor;
    int num_sms;
    int warp_size;
    int max_threads_per_block;
    uint64_t shared_mem_per_block;
} TraceDevice;
int trace_add_device(const TraceDevice *dev);

/* Names the calling thread in the trace (thread_name metadata); default "thread <tid>". */
int trace_set_thread_name(const char *name);

/* Stops recording and writes the trace atomically (temporary file, fsync, rename). Ranges still open are
 * dropped. I/O failures are fatal (vx_fatal). */
int trace_end(void);
/* Path of the file the last trace_end wrote ("" before any). */
const char *trace_last_file(void);

/* 1 while a trace is recording (between trace_begin and trace_end), else 0. */
int trace_is_active(void);

/* Microseconds since trace_begin on the trace's clock (0 when no trace is active). */
double trace_now_us(void);

/* A complete event measured elsewhere, e.g. a kernel: pid/tid as the caller wants them shown (PyTorch uses the
 * device index and the stream), correlation links it to the CPU-side launch (-1: none). */
int trace_add_complete(const char *name, const char *cat, double ts_us, double dur_us, int64_t pid, int64_t tid,
                       int64_t correlation);
/* The same with more members for the event's "args" object: args_json is the inside of a JSON object, e.g.
 * "\"stream\": 7, \"grid\": [40, 1, 1]", written after "correlation" as it is (it is not checked: the caller makes
 * it valid JSON). NULL or "" adds nothing. */
int trace_add_complete_args(const char *name, const char *cat, double ts_us, double dur_us, int64_t pid, int64_t tid,
                            int64_t correlation, const char *args_json);
/* An arrow from the slice that holds start_ts_us on track (start_pid, start_tid) to the slice that holds end_ts_us
 * on (end_pid, end_tid): a flow start (ph "s") and a flow end (ph "f", bp "e") with this id, name = cat. PyTorch
 * draws one from each kernel launch to its kernel: cat "ac2g", id = the correlation id. Ids are unique per cat. */
int trace_add_flow(const char *cat, int64_t id, double start_ts_us, int64_t start_pid, int64_t start_tid,
                   double end_ts_us, int64_t end_pid, int64_t end_tid);

/* Names a process row (process_name metadata), e.g. pid 0 "GPU 0" for a device; the default for this process is
 * "voxscale rank <rank>", and other pids have none. */
int trace_set_process_name(int64_t pid, const char *name);
/* Names the track (pid, tid) (thread_name metadata), e.g. (0, 7) "stream 7". NULL lists the track without
 * renaming it: its name stays, or is "thread <tid>". */
int trace_set_track_name(int64_t pid, int64_t tid, const char *name);

/* The trace's clock: CLOCK_MONOTONIC in nanoseconds, with or without an active trace. trace_us_at converts a
 * reading of it to trace time, of the active trace or, after trace_end, of the last one (meaningless before the
 * first trace_begin): during a trace, trace_now_us() == trace_us_at(trace_clock_ns()). For timestamps taken
 * elsewhere on this clock, e.g. CUPTI's once it is given trace_clock_ns. */
int64_t trace_clock_ns(void);
double trace_us_at(int64_t clock_ns);

/* ---- ranges: inline so that the inactive case is a flag test ---------------------------------------------- */
extern int trace_active_flag; /* internal: read with __atomic builtins; written by begin/end */
void trace_range_push_slow(const char *name, const char *cat);
void trace_range_pop_slow(void);

/* Opens a range on the calling thread. name and cat must stay valid until the matching pop (string literals
 * are the usual case). Ranges nest; unmatched pops are ignored. */
static inline void trace_range_push(const char *name, const char *cat) {
#ifdef VX_CUDA
    /* Outside the flag test, so Nsight Systems (nsys profile -t cuda,nvtx) sees the ranges also when this trace is
     * off. NVTX copies the name. */
    nvtxRangePushA(name ? name : "?");
#endif
    if (__builtin_expect(__atomic_load_n(&trace_active_flag, __ATOMIC_RELAXED), 0)) trace_range_push_slow(name, cat);
}

/* Closes the innermost open range of the calling thread. */
static inline void trace_range_pop(void) {
#ifdef VX_CUDA
    nvtxRangePop();
#endif
    if (__builtin_expect(__atomic_load_n(&trace_active_flag, __ATOMIC_RELAXED), 0)) trace_range_pop_slow();
}

#ifdef __cplusplus
}
#endif

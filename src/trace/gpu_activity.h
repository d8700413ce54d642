/* gpu_activity.h: the GPU side of the profiler trace (trace.h). In CUDA builds CUPTI's activity API records every
 * kernel, memcpy and memset with its device timestamps, and every CUDA runtime call (plus driver-API kernel launches,
 * as cuDNN and cuBLAS make them) with its host thread; trace_gpu_end turns the records into trace events the way
 * PyTorch's profiler (Kineto) writes them: kernels on one track per stream of the device's row (pid = device,
 * tid = stream), runtime calls on the launching thread's track, and an "ac2g" flow arrow from each launch to what it
 * launched. CPU builds get stubs: trace_gpu_begin says why not and the trace keeps its CPU side.
 *
 * Order: trace_begin, trace_gpu_begin, ... synchronize the device ..., trace_gpu_end, trace_end.
 *
 * Time: CUPTI is given the trace's clock (trace_clock_ns) as its timestamp source, so its timestamps and the CPU
 * ranges share one clock; where CUPTI does not take it, trace_gpu_begin measures the offset between CUPTI's clock
 * (cuptiGetTimestamp) and the trace's. Either way a record's time on the trace is trace_us_at(ns - offset_ns).
 *
 * The record-to-event conversion takes plain structs (TraceGpuRecord) and no CUPTI type, so it is tested without
 * a GPU. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TRACE_GPU_KERNEL = 1,
    TRACE_GPU_MEMCPY = 2,
    TRACE_GPU_MEMSET = 3,
    TRACE_GPU_RUNTIME = 4, /* a CUDA runtime API call, on a host thread */
    TRACE_GPU_DRIVER = 5,  /* a CUDA driver API kernel launch (cuLaunchKernel*), on a host thread */
} TraceGpuKind;

/* What trace_gpu_end keeps of one CUPTI activity record. Memory and copy kinds carry CUPTI's enum values
 * (CUpti_ActivityMemcpyKind, CUpti_ActivityMemoryKind); gpu_activity.c checks that they match the names here. */
typedef struct {
    TraceGpuKind kind;
    const char *name;          /* kernel: its name (demangled where possible); runtime/driver: the API function,
                                * e.g. "cudaLaunchKernel"; memcpy/memset: NULL (named from the kinds) */
    uint64_t start_ns, end_ns; /* CUPTI timestamps; both 0: CUPTI could not time it (the record is skipped) */
    uint32_t correlation;      /* equal on a launch and what it launched; 0: none */
    uint32_t device, context, stream; /* GPU records */
    uint32_t pid, tid;                /* API records: host process and thread (gettid(), as the trace's CPU side) */
    int32_t grid[3], block[3];        /* kernel */
    uint32_t registers;               /* kernel: registers per thread */
    int32_t static_shared, dynamic_shared; /* kernel: shared memory bytes per block */
    uint64_t bytes;                        /* memcpy, memset */
    uint8_t copy_kind;                     /* memcpy: CUpti_ActivityMemcpyKind */
    uint8_t src_kind, dst_kind;            /* memcpy: CUpti_ActivityMemoryKind */
    uint8_t memory_kind;                   /* memset: CUpti_ActivityMemoryKind */
} TraceGpuRecord;

/* Starts recording GPU activity into the active trace (call after trace_begin). device_index is the CUDA device
 * this process runs on: its row is named "GPU <device_index>" (other devices' records get rows of their own ids).
 * Returns 1 when recording, 0 with a one-line reason when not (CPU build, no trace, CUPTI or driver unavailable);
 * the trace then has its CPU side only. */
int trace_gpu_begin(int device_index, char *reason, size_t reason_len);

/* Stops recording and adds every record to the active trace (call before trace_end, after synchronizing the
 * device: kernels that have not finished have no end time and are left out). Records stay readable through
 * trace_gpu_kernel_ns until the next trace_gpu_begin. Does nothing if trace_gpu_begin did not return 1. */
void trace_gpu_end(void);

/* While recording: hands CUPTI's filled buffers over now (cuptiActivityFlushAll), so trace_gpu_kernel_ns sees the
 * kernels that have finished so far; synchronize the device first to see them all. */
void trace_gpu_flush(void);

/* Sum of the durations of the kernels recorded so far, clipped to the window [from_us, to_us) of trace time
 * (trace_now_us readings), in ns: a step's kernel time. Kernels on concurrent streams add up. 0 in CPU builds. */
uint64_t trace_gpu_kernel_ns(double from_us, double to_us);

/* ---- the parts that do not need CUPTI, for the tests and for trace_gpu_end --------------------------------- */

/* Adds the events of n records to the active trace, with CUPTI time ns at trace time trace_us_at(ns - offset_ns):
 * X events (kernels cat "kernel", memcpy "gpu_memcpy", memset "gpu_memset" on (device, stream); runtime calls
 * "cuda_runtime" and driver launches "cuda_driver" on (pid, tid)) with their args, "ac2g" flows from each API
 * record to the earliest GPU record of its correlation id (one per id: a CUDA graph launch points at its first
 * kernel), and the names of the rows and tracks: "GPU <d>" and "stream <s>". device_index: as trace_gpu_begin's,
 * -1 for none. Returns the number of X events added, or a TRACE_ERR_* code. */
int trace_gpu_add_events(const TraceGpuRecord *recs, size_t n, int64_t offset_ns, int device_index);

/* trace_gpu_kernel_ns over the given records. */
uint64_t trace_gpu_kernel_ns_of(const TraceGpuRecord *recs, size_t n, int64_t offset_ns, double from_us,
                                double to_us);

/* "HtoD", "DtoH", "DtoD", ... for a CUpti_ActivityMemcpyKind value; "Pageable", "Pinned", "Device", ... for a
 * CUpti_ActivityMemoryKind value ("Unknown" for others). */
const char *trace_gpu_memcpy_kind_name(unsigned kind);
const char *trace_gpu_memory_kind_name(unsigned kind);

/* Whether a CUPTI of API version `loaded` (cuptiGetVersion: 130001 is CUDA 13.0 update 1) fills the records this
 * build reads with the headers of version `built`: the same CUDA major, a minor at least the build's and at most the
 * newest whose record layouts were checked to only append fields (cupti_load.c). 0 with a one-line reason. */
int trace_cupti_version_ok(unsigned built, unsigned loaded, char *why, size_t why_len);

#ifdef VX_CUDA
/* What trace_gpu_end keeps of one CUPTI activity record (a CUpti_Activity *): the conversion the buffer callback
 * runs, for tests. Returns 0 for records the trace does not keep. Names stay valid until the next
 * trace_gpu_begin. */
int trace_gpu_record_from_cupti(const void *activity, TraceGpuRecord *out);
#endif

#ifdef __cplusplus
}
#endif

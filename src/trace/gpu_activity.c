/* gpu_activity.c: GPU activity for the profiler trace through CUPTI's activity API (see gpu_activity.h). CUPTI
 * asks for empty buffers and hands them back filled, on a thread of its own or inside cuptiActivityFlushAll; the
 * completed callback copies what the trace needs out of each record into a growable array under a mutex and frees
 * the buffer. trace_gpu_end turns the array into trace events (gpu_events.c). CPU builds compile the stubs at
 * the end of the file. */
#include "trace/gpu_activity.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"

#ifdef VX_CUDA
#include <pthread.h>

#include <cupti.h>

#include "trace/cupti_load.h"

/* Every CUPTI call goes through the functions cupti_load found (libcupti is loaded, not linked): each path below
 * reaches a call only after cupti_load succeeded (trace_gpu_begin, api_name_locked). */
static inline const CuptiFunctions *cupti(void) { return cupti_load(NULL, 0); }
#define VX_CUPTI_CALL(f) (cupti()->f)
#define cuptiGetVersion VX_CUPTI_CALL(cuptiGetVersion)
#define cuptiGetCallbackName VX_CUPTI_CALL(cuptiGetCallbackName)
#define cuptiGetResultString VX_CUPTI_CALL(cuptiGetResultString)
#define cuptiGetTimestamp VX_CUPTI_CALL(cuptiGetTimestamp)
#define cuptiSetThreadIdType VX_CUPTI_CALL(cuptiSetThreadIdType)
#define cuptiActivityRegisterTimestampCallback VX_CUPTI_CALL(cuptiActivityRegisterTimestampCallback)
#define cuptiActivityRegisterCallbacks VX_CUPTI_CALL(cuptiActivityRegisterCallbacks)
#define cuptiActivityGetNextRecord VX_CUPTI_CALL(cuptiActivityGetNextRecord)
#define cuptiActivityGetNumDroppedRecords VX_CUPTI_CALL(cuptiActivityGetNumDroppedRecords)
#define cuptiActivityEnable VX_CUPTI_CALL(cuptiActivityEnable)
#define cuptiActivityDisable VX_CUPTI_CALL(cuptiActivityDisable)
#define cuptiActivityFlushAll VX_CUPTI_CALL(cuptiActivityFlushAll)

/* The record carries CUPTI's enum values; the names in gpu_events.c are indexed by them. */
_Static_assert(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD == 1 && CUPTI_ACTIVITY_MEMCPY_KIND_DTOH == 2 &&
                   CUPTI_ACTIVITY_MEMCPY_KIND_DTOD == 8 && CUPTI_ACTIVITY_MEMCPY_KIND_PTOP == 10,
               "CUpti_ActivityMemcpyKind changed: update trace_gpu_memcpy_kind_name");
_Static_assert(CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE == 1 && CUPTI_ACTIVITY_MEMORY_KIND_PINNED == 2 &&
                   CUPTI_ACTIVITY_MEMORY_KIND_DEVICE == 3 && CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC == 7,
               "CUpti_ActivityMemoryKind changed: update trace_gpu_memory_kind_name");

/* libstdc++'s demangler (extern "C" in the Itanium C++ ABI); CUDA builds link libstdc++ (mk/trace.mk). */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define BUF_BYTES ((size_t)8 << 20) /* per CUPTI buffer; about 40k kernel records */

static const CUpti_ActivityKind kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER, /* kernel launches of cuDNN/cuBLAS, kept below */
};
static const char *const kind_names[] = {"kernels", "memory copies", "memsets", "runtime API calls",
                                         "driver API calls"};
_Static_assert(sizeof kinds / sizeof kinds[0] == sizeof kind_names / sizeof kind_names[0], "one name per kind");
#define N_KINDS (sizeof kinds / sizeof kinds[0])

/* Only the main thread (begin/end) touches these. */
static bool recording;
static bool callbacks_registered;
static int device_;

/* Guarded by mu: the completed callback runs on CUPTI's thread. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static bool collecting; /* records are kept only between begin and the end's flush */
static TraceGpuRecord *recs;
static size_t n_recs, cap_recs;
static size_t dropped;
static int64_t offset_ns; /* CUPTI ns - trace clock ns; written by begin before collecting starts */
/* Interned names: CUPTI's kernel name (mangled) or API name -> our copy (demangled, version suffix cut). */
typedef struct {
    char *key, *val;
} Name;
static Name *names;
static size_t cap_names, n_names;
/* API function names by callback id, cut of their "_v7000" suffix; NULL until first seen. */
static const char *runtime_names[CUPTI_RUNTIME_TRACE_CBID_SIZE], *driver_names[CUPTI_DRIVER_TRACE_CBID_SIZE];

static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static size_t name_slot(Name *tab, size_t cap, const char *key) {
    size_t i = (size_t)str_hash(key) & (cap - 1);
    while (tab[i].key && strcmp(tab[i].key, key) != 0) i = (i + 1) & (cap - 1);
    return i;
}

/* Demangles C++ names (CUDA kernels are "_Z..."); anything else, or a failure, is kept as it is. */
static char *display_name(const char *s, bool demangle) {
    if (demangle && s[0] == '_' && s[1] == 'Z') {
        int status = -1;
        char *d = __cxa_demangle(s, NULL, NULL, &status);
        if (d && status == 0) return d;
        free(d);
    }
    return strdup(s);
}

/* Our copy of a name, made once per distinct name; NULL when out of memory. Called under mu. */
static const char *intern_locked(const char *key, bool demangle) {
    if (!key) return NULL;
    if (2 * (n_names + 1) > cap_names) {
        size_t cap = cap_names ? 2 * cap_names : 256;
        Name *tab = calloc(cap, sizeof *tab);
        if (!tab) return NULL;
        for (size_t i = 0; i < cap_names; i++)
            if (names[i].key) tab[name_slot(tab, cap, names[i].key)] = names[i];
        free(names);
        names = tab;
        cap_names = cap;
    }
    size_t i = name_slot(names, cap_names, key);
    if (!names[i].key) {
        char *k = strdup(key), *v = display_name(key, demangle);
        if (!k || !v) {
            free(k);
            free(v);
            return NULL;
        }
        names[i] = (Name){k, v};
        n_names++;
    }
    return names[i].val;
}

/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel", interned. */
static const char *api_name_locked(CUpti_CallbackDomain domain, uint32_t cbid) {
    const char *name = NULL;
    if (!cupti() || cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) return "cuda api";
    char buf[256];
    snprintf(buf, sizeof buf, "%s", name);
    char *v = NULL;
    for (char *p = strstr(buf, "_v"); p; p = strstr(p + 2, "_v")) v = p;
    if (v && v[2] && strspn(v + 2, "0123456789") == strlen(v + 2)) *v = '\0';
    const char *s = intern_locked(buf, false);
    return s ? s : "cuda api";
}

static bool is_kernel_launch(uint32_t cbid) {
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
        return true;
    default:
        return false;
    }
}

/* What the trace needs of one CUPTI record; returns 0 for records it does not keep. Called under mu. */
static int convert_locked(const CUpti_Activity *a, TraceGpuRecord *out) {
    TraceGpuRecord r = {0};
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
        r = (TraceGpuRecord){
            .kind = TRACE_GPU_KERNEL,
            .name = intern_locked(k->name, true),
            .start_ns = k->start,
            .end_ns = k->end,
            .correlation = k->correlationId,
            .device = k->deviceId,
            .context = k->contextId,
            .stream = k->streamId,
            .grid = {k->gridX, k->gridY, k->gridZ},
            .block = {k->blockX, k->blockY, k->blockZ},
            .registers = k->registersPerThread,
            .static_shared = k->staticSharedMemory,
            .dynamic_shared = k->dynamicSharedMemory,
        };
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)a;
        r = (TraceGpuRecord){
            .kind = TRACE_GPU_MEMCPY,
            .start_ns = m->start,
            .end_ns = m->end,
            /* the id of the runtime call that asked for the copy, where there was one */
            .correlation = m->runtimeCorrelationId ? m->runtimeCorrelationId : m->correlationId,
            .device = m->deviceId,
            .context = m->contextId,
            .stream = m->streamId,
            .bytes = m->bytes,
            .copy_kind = m->copyKind,
            .src_kind = m->srcKind,
            .dst_kind = m->dstKind,
        };
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
        r = (TraceGpuRecord){
            .kind = TRACE_GPU_MEMSET,
            .start_ns = m->start,
            .end_ns = m->end,
            .correlation = m->correlationId,
            .device = m->deviceId,
            .context = m->contextId,
            .stream = m->streamId,
            .bytes = m->bytes,
            .memory_kind = (uint8_t)m->memoryKind,
        };
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *api = (const CUpti_ActivityAPI *)a;
        bool runtime = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
        /* Driver calls made by the runtime are not recorded; the ones libraries make directly are, and of those
         * only kernel launches are kept (as Kineto does), so their kernels get a launch and a flow. */
        if (!runtime && !is_kernel_launch(api->cbid)) return 0;
        const char **cache = runtime ? runtime_names : driver_names;
        size_t n_cache = runtime ? CUPTI_RUNTIME_TRACE_CBID_SIZE : CUPTI_DRIVER_TRACE_CBID_SIZE;
        const char *name;
        if (api->cbid < n_cache) {
            if (!cache[api->cbid])
                cache[api->cbid] =
                    api_name_locked(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, api->cbid);
            name = cache[api->cbid];
        } else {
            name = api_name_locked(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, api->cbid);
        }
        r = (TraceGpuRecord){
            .kind = runtime ? TRACE_GPU_RUNTIME : TRACE_GPU_DRIVER,
            .name = name,
            .start_ns = api->start,
            .end_ns = api->end,
            .correlation = api->correlationId,
            .pid = api->processId,
            .tid = api->threadId,
        };
        break;
    }
    default:
        return 0;
    }
    *out = r;
    return 1;
}

/* Appends one CUPTI record to the records kept. Called under mu. */
static void take_locked(const CUpti_Activity *a) {
    TraceGpuRecord r;
    if (!convert_locked(a, &r)) return;
    if (n_recs == cap_recs) {
        size_t cap = cap_recs ? 2 * cap_recs : 1 << 16;
        TraceGpuRecord *p = realloc(recs, cap * sizeof *p);
        if (!p) { /* on CUPTI's thread: losing records beats exiting; reported at the end */
            dropped++;
            return;
        }
        recs = p;
        cap_recs = cap;
    }
    recs[n_recs++] = r;
}

int trace_gpu_record_from_cupti(const void *activity, TraceGpuRecord *out) {
    pthread_mutex_lock(&mu);
    int kept = convert_locked((const CUpti_Activity *)activity, out);
    pthread_mutex_unlock(&mu);
    return kept;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *p = NULL;
    /* CUPTI needs ACTIVITY_RECORD_ALIGNMENT (8); a NULL buffer makes it drop records, which it counts. */
    if (posix_memalign(&p, ACTIVITY_RECORD_ALIGNMENT, BUF_BYTES) != 0) p = NULL;
    *buffer = p;
    *size = p ? BUF_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid_size) {
    (void)size;
    pthread_mutex_lock(&mu);
    if (collecting && buffer) {
        CUpti_Activity *a = NULL;
        while (cuptiActivityGetNextRecord(buffer, valid_size, &a) == CUPTI_SUCCESS) take_locked(a);
        size_t d = 0;
        if (cuptiActivityGetNumDroppedRecords(ctx, stream, &d) == CUPTI_SUCCESS) dropped += d;
    }
    pthread_mutex_unlock(&mu);
    free(buffer);
}

/* CUPTI's timestamp source: the trace's own clock, so GPU and CPU events need no conversion. */
static uint64_t CUPTIAPI trace_clock_for_cupti(void) { return (uint64_t)trace_clock_ns(); }

static void say(char *reason, size_t len, const char *what, CUptiResult r) {
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown error";
    snprintf(reason, len, "%s: %s (CUPTI %d)", what, s, (int)r);
}

static void clear_locked(void) {
    for (size_t i = 0; i < cap_names; i++) {
        free(names[i].key);
        free(names[i].val);
    }
    free(names);
    free(recs);
    names = NULL;
    recs = NULL;
    cap_names = n_names = n_recs = cap_recs = dropped = 0;
    memset(runtime_names, 0, sizeof runtime_names);
    memset(driver_names, 0, sizeof driver_names);
}

int trace_gpu_begin(int device_index, char *reason, size_t reason_len) {
    char dummy[8];
    if (!reason || !reason_len) {
        reason = dummy;
        reason_len = sizeof dummy;
    }
    reason[0] = '\0';
    if (recording) {
        snprintf(reason, reason_len, "GPU activity is already being recorded");
        return 0;
    }
    if (device_index < 0) {
        snprintf(reason, reason_len, "no GPU (device index %d)", device_index);
        return 0;
    }
    if (!trace_is_active()) {
        snprintf(reason, reason_len, "no trace is recording (trace_begin comes first)");
        return 0;
    }
    if (!cupti_load(reason, reason_len)) return 0;
    /* The records are read through the structs of the headers we were built with (CUpti_ActivityKernel10 in 13.0);
     * a CUPTI of a newer CUDA minor fills a newer struct (13.2 has Kernel11) under the same soname, which reads right
     * only where it just adds fields (trace_cupti_version_ok, cupti_load.c: checked up to 13.5). */
    uint32_t loaded = 0;
    if (cuptiGetVersion(&loaded) != CUPTI_SUCCESS) loaded = 0;
    if (!trace_cupti_version_ok(CUPTI_API_VERSION, loaded, reason, reason_len)) return 0;
    pthread_mutex_lock(&mu);
    clear_locked();
    pthread_mutex_unlock(&mu);

    /* Runtime records then carry gettid() like the trace's CPU ranges, so launches nest in the ranges around
     * them; if CUPTI refuses, they land on tracks of pthread ids of their own. */
    (void)cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    /* Must come before any kind is enabled. Where it fails the offset measured below carries the conversion. */
    bool own_clock = cuptiActivityRegisterTimestampCallback(trace_clock_for_cupti) == CUPTI_SUCCESS;
    CUptiResult r;
    if (!callbacks_registered) {
        r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
        if (r != CUPTI_SUCCESS) {
            say(reason, reason_len, "CUPTI activity buffers unavailable", r);
            return 0;
        }
        callbacks_registered = true;
    }

    /* Offset between CUPTI's clock and the trace's: the reading with the tightest bracket of trace clock reads.
     * With CUPTI on our clock it is 0 within that bracket, and then exactly 0. */
    int64_t best = INT64_MAX, off = 0;
    for (int i = 0; i < 16; i++) {
        uint64_t c = 0;
        int64_t t0 = trace_clock_ns();
        r = cuptiGetTimestamp(&c);
        int64_t t1 = trace_clock_ns();
        if (r != CUPTI_SUCCESS) {
            say(reason, reason_len, "CUPTI has no timestamp", r);
            return 0;
        }
        if (t1 - t0 < best) {
            best = t1 - t0;
            off = (int64_t)c - (t0 + (t1 - t0) / 2);
        }
    }
    if (own_clock && off >= -best && off <= best) off = 0;

    pthread_mutex_lock(&mu);
    offset_ns = off;
    collecting = true;
    pthread_mutex_unlock(&mu);
    for (size_t i = 0; i < N_KINDS; i++) {
        r = cuptiActivityEnable(kinds[i]);
        if (r == CUPTI_SUCCESS) continue;
        char what[96];
        snprintf(what, sizeof what, "CUPTI cannot record %s (is a CUDA driver and GPU there?)", kind_names[i]);
        say(reason, reason_len, what, r);
        while (i-- > 0) cuptiActivityDisable(kinds[i]);
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        pthread_mutex_lock(&mu);
        collecting = false;
        clear_locked();
        pthread_mutex_unlock(&mu);
        return 0;
    }
    device_ = device_index;
    recording = true;
    return 1;
}

void trace_gpu_flush(void) {
    if (recording) cuptiActivityFlushAll(0); /* completed buffers only: a forced flush would cut running ones */
}

void trace_gpu_end(void) {
    if (!recording) return;
    recording = false;
    /* Disable first, then flush (forced: also buffers with records still open), so nothing recorded after this
     * point waits in CUPTI's buffers to arrive during a later trace. */
    for (size_t i = 0; i < N_KINDS; i++) cuptiActivityDisable(kinds[i]);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&mu);
    collecting = false;
    pthread_mutex_unlock(&mu);
    /* CUPTI's thread no longer appends (collecting is off), so the records can be read without the lock. */
    if (dropped)
        fprintf(stderr, "voxscale: trace: %zu GPU activity records were dropped (CUPTI buffers full or out of host "
                        "memory); the trace misses them\n", dropped);
    /* Every record was taken during this trace, so on the trace's clock it lies in [0, now]. Check the host-side
     * API records and the device-side ones apart: CUPTI stamps the first on the host through our timestamp
     * callback, but converts the GPU's timestamps itself, and some CUPTI builds have been reported to leave those
     * on their own clock. Either way the GPU events would sit away from the CPU ranges: say so. */
    static const char *const side_name[2] = {"CUDA runtime and driver calls", "GPU kernels, copies and memsets"};
    size_t n_side[2] = {0, 0}, outside[2] = {0, 0};
    double now = trace_now_us();
    for (size_t i = 0; i < n_recs; i++) {
        if (recs[i].start_ns == 0) continue;
        const int device_side = recs[i].kind != TRACE_GPU_RUNTIME && recs[i].kind != TRACE_GPU_DRIVER;
        double ts = trace_us_at((int64_t)recs[i].start_ns - offset_ns);
        n_side[device_side]++;
        if (ts < -1000.0 || ts > now + 1000.0) outside[device_side]++;
    }
    for (int s = 0; s < 2; s++)
        if (2 * outside[s] > n_side[s])
            fprintf(stderr, "voxscale: trace: %zu of %zu %s fall outside the trace's time window (CUPTI clock "
                            "offset %lld ns); those GPU events are misplaced\n", outside[s], n_side[s], side_name[s],
                    (long long)offset_ns);
    int rc = trace_gpu_add_events(recs, n_recs, offset_ns, device_);
    if (rc < 0) fprintf(stderr, "voxscale: trace: GPU events not added (trace error %d)\n", rc);
}

uint64_t trace_gpu_kernel_ns(double from_us, double to_us) {
    pthread_mutex_lock(&mu);
    uint64_t ns = trace_gpu_kernel_ns_of(recs, n_recs, offset_ns, from_us, to_us);
    pthread_mutex_unlock(&mu);
    return ns;
}

#else /* CPU build: no CUPTI */

int trace_gpu_begin(int device_index, char *reason, size_t reason_len) {
    (void)device_index;
    if (reason && reason_len) snprintf(reason, reason_len, "this build has no CUDA (make CUDA=0), so no GPU activity");
    return 0;
}

void trace_gpu_end(void) {}

void trace_gpu_flush(void) {}

uint64_t trace_gpu_kernel_ns(double from_us, double to_us) {
    (void)from_us;
    (void)to_us;
    return 0;
}

#endif

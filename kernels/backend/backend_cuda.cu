/* backend_cuda.cu: the "cuda" Backend table (backend.h): device memory through cudaMalloc with the bytes in use
 * and their peak tracked, pinned host staging buffers, copies, uploads on a separate copy stream, event timers,
 * and each op folder's CUDA table (kernels/<op>/<op>_cuda.cu). Every op is enqueued on the one non-blocking
 * compute stream of common/cuda_device.cu, which init starts; the blocking copies (copy_to_device, copy_to_host)
 * synchronize that stream, so they also wait for the ops before them. Graph capture (--compile) records the compute
 * stream's work into a CUDA Graph replayed by graph_launch. backend_cuda_shutdown (registered with atexit) frees
 * everything; it never exits on an error itself, so it is safe to run while the process is already exiting
 * because of one. */
#include <pthread.h>
#include <string.h>

#include "backend/backend.h"
#include "common/cuda_check.h"
#include "attention/attention.h"
#include "conv3d/conv3d.h"

/* ---- state ------------------------------------------------------------------------------------------------ */

typedef struct {
    void *ptr;
    size_t bytes;
} Allocation;

/* the device itself (compute stream, cuDNN, scratch) is common/cuda_device.cu's; this is the table's */
static struct {
    int ready, atexit_registered;
    cudaStream_t copy;
    cudaEvent_t upload_done;  /* recorded on the copy stream after each upload */
    cudaEvent_t compute_mark; /* recorded on the compute stream before each upload (the copy waits for it) */
    cudaEvent_t timer[BACKEND_TIMER_SLOTS];
    int timer_marked[BACKEND_TIMER_SLOTS];
    /* allocations made through alloc: the list (for release's byte count and shutdown), in use, peak */
    pthread_mutex_t mu;
    Allocation *allocs;
    size_t n_allocs, cap_allocs, in_use, peak;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void require_ready(const char *what) {
    if (!g.ready) vx_fatal("CUDA backend used (%s) before a successful backend_cuda_init", what);
}

/* The current device is per host thread. The entries a data-loader thread may call (memory, host buffers,
 * uploads) select the backend's device first; the ops are meant for the thread that called backend_cuda_init. */
static void bind_thread(const char *what) {
    require_ready(what);
    CUDA_CHECK(cudaSetDevice(vx_cuda_device_id()));
}

/* ---- memory ----------------------------------------------------------------------------------------------- */

static void *cuda_alloc(size_t bytes) {
    bind_thread("alloc");
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* cudaMalloc's errors are not sticky, but keep later checks clean */
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        char who[160];
        snprintf(who, sizeof who, "cudaMalloc (%s; %.2f of %.2f GiB free on the GPU)", cudaGetErrorName(e),
                 free_b / 1073741824.0, total_b / 1073741824.0);
        vx_out_of_memory("GPU", who, bytes, g.in_use);
    }
    pthread_mutex_lock(&g.mu);
    if (g.n_allocs == g.cap_allocs) {
        g.cap_allocs = g.cap_allocs ? 2 * g.cap_allocs : 64;
        g.allocs = (Allocation *)realloc(g.allocs, sizeof(Allocation) * g.cap_allocs);
        if (!g.allocs) vx_fatal("out of host memory for the allocation list");
    }
    g.allocs[g.n_allocs++] = Allocation{p, bytes};
    g.in_use += bytes;
    if (g.in_use > g.peak) g.peak = g.in_use;
    pthread_mutex_unlock(&g.mu);
    return p;
}

static void cuda_release(void *ptr) {
    if (!ptr || !g.ready) return; /* after backend_cuda_shutdown every buffer has been freed already */
    pthread_mutex_lock(&g.mu);
    size_t i = 0;
    while (i < g.n_allocs && g.allocs[i].ptr != ptr) i++;
    if (i == g.n_allocs) {
        pthread_mutex_unlock(&g.mu);
        vx_fatal("release of %p, which the CUDA backend did not allocate (or already released)", ptr);
    }
    g.in_use -= g.allocs[i].bytes;
    g.allocs[i] = g.allocs[--g.n_allocs];
    pthread_mutex_unlock(&g.mu);
    bind_thread("release");
    CUDA_CHECK(cudaFree(ptr)); /* waits for the work still using it */
}

static size_t cuda_bytes_in_use(void) {
    pthread_mutex_lock(&g.mu);
    const size_t v = g.in_use;
    pthread_mutex_unlock(&g.mu);
    return v;
}
static size_t cuda_peak_bytes(void) {
    pthread_mutex_lock(&g.mu);
    const size_t v = g.peak;
    pthread_mutex_unlock(&g.mu);
    return v;
}

static void *cuda_alloc_host(size_t bytes) {
    bind_thread("alloc_host");
    void *p = NULL;
    const cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        char who[96];
        snprintf(who, sizeof who, "cudaHostAlloc (pinned; %s)", cudaGetErrorName(e));
        vx_out_of_memory("host", who, bytes, 0);
    }
    return p;
}
static void cuda_release_host(void *ptr) {
    if (!ptr) return;
    if (!g.ready) { /* after shutdown (at exit, say): the context is still there, errors no longer matter */
        cudaFreeHost(ptr);
        return;
    }
    bind_thread("release_host");
    CUDA_CHECK(cudaFreeHost(ptr));
}

static void cuda_copy_to_device(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, vx_cuda_stream()));
    CUDA_CHECK(cudaStreamSynchronize(vx_cuda_stream())); /* blocking: src may be reused when this returns */
}
static void cuda_copy_to_host(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, vx_cuda_stream()));
    CUDA_CHECK(cudaStreamSynchronize(vx_cuda_stream()));
}
static void cuda_zero(void *ptr, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, vx_cuda_stream()));
}
static void cuda_synchronize(void) {
    CUDA_CHECK(cudaStreamSynchronize(vx_cuda_stream()));
    CUDA_CHECK(cudaStreamSynchronize(g.copy));
}
/* pageable source: cudaMemcpyAsync stages it before returning, so the caller may reuse it at once */
static void cuda_write_async(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, vx_cuda_stream()));
}
static void cuda_copy_to_host_async(void *dst_host, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, vx_cuda_stream()));
}

/* copy stream: after `after`, or the compute work enqueued so far (dst may still be read by it), before the compute
 * work enqueued from now on */
static void cuda_upload_async(void *dst_device, const void *src_host, size_t bytes, void *after) {
    if (!bytes) return;
    bind_thread("upload_async");
    if (!after) CUDA_CHECK(cudaEventRecord(g.compute_mark, vx_cuda_stream()));
    CUDA_CHECK(cudaStreamWaitEvent(g.copy, after ? (cudaEvent_t)after : g.compute_mark, 0));
    CUDA_CHECK(cudaMemcpyAsync(dst_device, src_host, bytes, cudaMemcpyHostToDevice, g.copy));
    CUDA_CHECK(cudaEventRecord(g.upload_done, g.copy));
    CUDA_CHECK(cudaStreamWaitEvent(vx_cuda_stream(), g.upload_done, 0));
}
static void cuda_upload_wait(void) {
    bind_thread("upload_wait");
    CUDA_CHECK(cudaEventSynchronize(g.upload_done));
}

/* ---- timers ----------------------------------------------------------------------------------------------- */

static void check_slot(int slot) {
    if (slot < 0 || slot >= BACKEND_TIMER_SLOTS)
        vx_fatal("timer slot %d is outside 0..%d", slot, BACKEND_TIMER_SLOTS - 1);
}
static void cuda_timer_mark(int slot) {
    check_slot(slot);
    CUDA_CHECK(cudaEventRecord(g.timer[slot], vx_cuda_stream()));
    g.timer_marked[slot] = 1;
}
static double cuda_timer_elapsed_ms(int from_slot, int to_slot) {
    check_slot(from_slot);
    check_slot(to_slot);
    if (!g.timer_marked[from_slot] || !g.timer_marked[to_slot])
        vx_fatal("timer_elapsed_ms(%d, %d): slot %d was never marked", from_slot, to_slot,
                 g.timer_marked[from_slot] ? to_slot : from_slot);
    CUDA_CHECK(cudaEventSynchronize(g.timer[from_slot]));
    CUDA_CHECK(cudaEventSynchronize(g.timer[to_slot]));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, g.timer[from_slot], g.timer[to_slot]));
    return ms;
}

/* ---- table ------------------------------------------------------------------------------------------------ */

/* events on the compute stream, for the communication stream's ordering (backend.h) */
static void *cuda_event_create(void) {
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return (void *)ev;
}
static void *cuda_timed_event_create(void) {
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreate(&ev));
    return (void *)ev;
}
static double cuda_event_elapsed_ms(void *from, void *to) {
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)to));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to));
    return ms;
}
static void cuda_event_destroy(void *ev) {
    if (ev) CUDA_CHECK(cudaEventDestroy((cudaEvent_t)ev));
}
static void cuda_event_record(void *ev) { CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, vx_cuda_stream())); }
static void cuda_event_wait(void *ev) { CUDA_CHECK(cudaStreamWaitEvent(vx_cuda_stream(), (cudaEvent_t)ev, 0)); }
static void cuda_event_synchronize(void *ev) { CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)ev)); }

/* ---- graphs ----------------------------------------------------------------------------------------------- */

/* Thread-local capture: only the capturing thread is kept from unsafe calls (the loader's threads still allocate
 * and fill pinned buffers). LAUNCH_CHECK does not synchronise while vx_cuda_capturing (VX_CUDA_SYNC would break
 * the capture). */
static void cuda_graph_capture_begin(void) {
    CUDA_CHECK(cudaStreamBeginCapture(vx_cuda_stream(), cudaStreamCaptureModeThreadLocal));
    vx_cuda_capturing = 1;
}

static void *cuda_graph_capture_end(char *why, size_t why_len) {
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(vx_cuda_stream(), &graph);
    vx_cuda_capturing = 0;
    cudaGraphExec_t exec = NULL;
    /* node priorities as captured: the NCCL all-reduces captured from the high-priority communication stream keep
     * their priority over backward's kernels in a replay (without the flag every node takes the launch stream's) */
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "CUDA graph capture failed: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
        cudaGetLastError(); /* capture errors invalidate the capture, not the context */
        return NULL;
    }
    return (void *)exec;
}

static void cuda_graph_launch(void *graph) { CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, vx_cuda_stream())); }
static void cuda_graph_destroy(void *graph) {
    if (graph && g.ready) CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

/* ---- ops -------------------------------------------------------------------------------------------------- */

/* each op folder's CUDA table (kernels/<op>/<op>_cuda.cu), registered in ops.def */
#define VX_OP(name, Type) extern "C" const struct Type name##_ops_cuda;
#include "backend/ops.def"
#undef VX_OP

static const Backend cuda_backend = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .release = cuda_release,
    .copy_to_device = cuda_copy_to_device,
    .copy_to_host = cuda_copy_to_host,
    .zero = cuda_zero,
    .synchronize = cuda_synchronize,
    .write_async = cuda_write_async,
    .copy_to_host_async = cuda_copy_to_host_async,
    .alloc_host = cuda_alloc_host,
    .release_host = cuda_release_host,
    .upload_async = cuda_upload_async,
    .upload_wait = cuda_upload_wait,
    .timer_mark = cuda_timer_mark,
    .timer_elapsed_ms = cuda_timer_elapsed_ms,
    .event_create = cuda_event_create,
    .timed_event_create = cuda_timed_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_wait = cuda_event_wait,
    .event_synchronize = cuda_event_synchronize,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .graph_capture_begin = cuda_graph_capture_begin,
    .graph_capture_end = cuda_graph_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .bytes_in_use = cuda_bytes_in_use,
    .peak_bytes = cuda_peak_bytes,
#define VX_OP(name, Type) .name = &name##_ops_cuda,
#include "backend/ops.def"
#undef VX_OP
};

/* ---- init and shutdown ------------------------------------------------------------------------------------ */

extern "C" const Backend *backend_cuda(void) { return g.ready ? &cuda_backend : NULL; }

/* Best effort, errors ignored (see the file comment). */
static void teardown(void) {
    if (vx_cuda_stream()) cudaStreamSynchronize(vx_cuda_stream());
    if (g.copy) cudaStreamSynchronize(g.copy);
    /* trylock: shutdown may run from atexit after a fatal error raised with the lock held (see conv3d_cudnn_plan.cu) */
    if (pthread_mutex_trylock(&g.mu) == 0) {
        for (size_t i = 0; i < g.n_allocs; i++) cudaFree(g.allocs[i].ptr);
        free(g.allocs);
        g.allocs = NULL;
        g.n_allocs = g.cap_allocs = 0;
        g.in_use = 0;
        pthread_mutex_unlock(&g.mu);
    }
    conv3d_cuda_cache_clear();
    attention_cuda_cache_clear();
    for (int i = 0; i < BACKEND_TIMER_SLOTS; i++) {
        if (g.timer[i]) cudaEventDestroy(g.timer[i]);
        g.timer[i] = NULL;
        g.timer_marked[i] = 0;
    }
    if (g.upload_done) cudaEventDestroy(g.upload_done);
    if (g.compute_mark) cudaEventDestroy(g.compute_mark);
    g.upload_done = g.compute_mark = NULL;
    if (g.copy) cudaStreamDestroy(g.copy);
    g.copy = NULL;
    vx_cuda_device_stop();
}

extern "C" void backend_cuda_shutdown(void) {
    static int running = 0; /* vx_fatal inside a CUDA call during shutdown would re-enter through atexit */
    if (running) return;
    running = 1;
    teardown();
    g.ready = 0;
    running = 0;
}

extern "C" int backend_cuda_init(int device, char *reason, size_t reason_len) {
    if (g.ready) return 1;
    char dummy[8];
    if (!reason || !reason_len) reason = dummy, reason_len = sizeof dummy;
    reason[0] = '\0';
    if (!vx_cuda_device_start(device, reason, reason_len)) return 0;

#define INIT_TRY(call, what)                                                                                   \
    do {                                                                                                       \
        const cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess) {                                                                               \
            snprintf(reason, reason_len, "%s failed on GPU %d: %s: %s", what, device, cudaGetErrorName(e_),     \
                     cudaGetErrorString(e_));                                                                  \
            teardown();                                                                                        \
            return 0;                                                                                          \
        }                                                                                                      \
    } while (0)

    INIT_TRY(cudaStreamCreateWithFlags(&g.copy, cudaStreamNonBlocking), "creating the copy stream");
    INIT_TRY(cudaEventCreateWithFlags(&g.upload_done, cudaEventDisableTiming), "creating an event");
    INIT_TRY(cudaEventCreateWithFlags(&g.compute_mark, cudaEventDisableTiming), "creating an event");
    for (int i = 0; i < BACKEND_TIMER_SLOTS; i++) INIT_TRY(cudaEventCreate(&g.timer[i]), "creating a timer event");
#undef INIT_TRY
    g.ready = 1;
    if (!g.atexit_registered) {
        /* registered after the CUDA runtime's own exit handler, so it runs before the runtime tears down */
        atexit(backend_cuda_shutdown);
        g.atexit_registered = 1;
    }
    return 1;
}

/* backend_cuda.cu: the "cuda" Backend table (backend.h): device memory through cudaMalloc with the bytes in use
 * and their peak tracked, pinned host staging buffers, copies, uploads on a separate copy stream, event timers,
 * and the ops of the kernels/..._cuda.cu files. Every op is enqueued on one non-blocking compute stream created at
 * init; the blocking copies (copy_to_device, copy_to_host) synchronize that stream, so they also wait for the ops
 * before them. Graph capture (--compile) records the compute stream's work into a CUDA Graph replayed by
 * graph_launch. Also here: the error hints of cuda_check.h, the shared reduction scratch and the reductions' second
 * pass. backend_cuda_shutdown (registered with atexit) frees everything; it never exits on an error itself, so
 * it is safe to run while the process is already exiting because of one. */
#include <pthread.h>
#include <string.h>

#include "common/cuda_check.h"

/* ---- state ------------------------------------------------------------------------------------------------ */

typedef struct {
    void *ptr;
    size_t bytes;
} Allocation;

static struct {
    int ready, device, atexit_registered;
    cudaStream_t compute, copy;
    cudaEvent_t upload_done;  /* recorded on the copy stream after each upload */
    cudaEvent_t compute_mark; /* recorded on the compute stream before each upload (the copy waits for it) */
    cudaEvent_t timer[BACKEND_TIMER_SLOTS];
    int timer_marked[BACKEND_TIMER_SLOTS];
    cudnnHandle_t cudnn;
    void *scratch;
    /* allocations made through alloc: the list (for release's byte count and shutdown), in use, peak */
    pthread_mutex_t mu;
    Allocation *allocs;
    size_t n_allocs, cap_allocs, in_use, peak;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static BackendOptions g_options = {.deterministic = 0, .allow_tf32 = 1};
int vx_cuda_sync_launches = 0;
int vx_cuda_capturing = 0;

static void require_ready(const char *what) {
    if (!g.ready) vx_fatal("CUDA backend used (%s) before a successful backend_cuda_init", what);
}

/* The current device is per host thread. The entries a data-loader thread may call (memory, host buffers,
 * uploads) select the backend's device first; the ops are meant for the thread that called backend_cuda_init. */
static void bind_thread(const char *what) {
    require_ready(what);
    CUDA_CHECK(cudaSetDevice(g.device));
}

cudaStream_t vx_cuda_stream(void) { return g.compute; }
cudnnHandle_t vx_cudnn_handle(void) {
    require_ready("cuDNN");
    return g.cudnn;
}
const BackendOptions *vx_cuda_options(void) { return &g_options; }
void *vx_cuda_scratch(void) {
    require_ready("scratch");
    return g.scratch;
}

/* ---- errors ----------------------------------------------------------------------------------------------- */

const char *vx_cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation: return "out of GPU memory: lower batch_size or input_size";
    case cudaErrorInsufficientDriver: return "the NVIDIA driver is older than this build's CUDA 13: update the driver";
    case cudaErrorNoDevice: return "no GPU is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES";
    case cudaErrorNoKernelImageForDevice:
        return "this build has code for sm_80/sm_90 (+PTX 9.0) only: the GPU needs compute capability 8.0 or newer";
    case cudaErrorIllegalAddress:
    case cudaErrorMisalignedAddress:
        return "a kernel accessed memory out of bounds: rerun under compute-sanitizer, or with VX_CUDA_SYNC=1 to name "
               "it";
    case cudaErrorInvalidConfiguration:
        return "bad launch configuration (grid or block size): a bug in the launcher named above";
    case cudaErrorLaunchTimeout: return "a kernel ran too long (display watchdog): use a GPU without a display";
    case cudaErrorInvalidValue:
        return "an argument was invalid (a NULL or foreign pointer, or a size 0 where not allowed)";
    case cudaErrorInvalidResourceHandle:
        return "a stream or event was used after backend_cuda_shutdown, or never created";
    default: return "rerun with VX_CUDA_SYNC=1 (and compute-sanitizer) to find the failing kernel";
    }
}

const char *vx_cudnn_hint(cudnnStatus_t s) {
    /* cuDNN 9 refines each status into a range of detailed codes (cudnn_graph.h): the exact ones first, then
     * the category (thousands). */
    switch (s) {
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER:
        return "cuDNN needs a more aligned pointer: a bug in the caller's buffer offsets";
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED: return "out of host memory inside cuDNN";
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
        return "out of GPU memory inside cuDNN: lower batch_size or input_size";
    case CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED:
    case CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH:
        return "a cuDNN sub-library (libcudnn_cnn, _ops, _graph) is missing or from another version: reinstall cuDNN 9";
    default: break;
    }
    switch (CUDNN_STATUS_CATEGORY(s)) {
    case 1000: /* uncategorized: NOT_INITIALIZED, LICENSE_ERROR, ... */
        return "cuDNN could not start: check that libcudnn 9 and the driver are installed";
    case CUDNN_STATUS_BAD_PARAM: return "cuDNN rejected a descriptor or pointer: a bug in the caller's shapes";
    case CUDNN_STATUS_NOT_SUPPORTED:
        return "cuDNN has no kernel for this shape/layout/option combination: try train.deterministic=0 or tf32 on";
    case CUDNN_STATUS_EXECUTION_FAILED: return "a cuDNN kernel failed: rerun with VX_CUDA_SYNC=1 and compute-sanitizer";
    default: return "see the cuDNN status above; VX_CUDA_SYNC=1 synchronizes after every call";
    }
}

void vx_cuda_fail(const char *file, int line, const char *what, const char *name, const char *text, const char *hint) {
    errno = 0; /* vx_fatal_at appends strerror(errno) when set: a stale errno would mislead */
    vx_fatal_at(file, line, "%s failed: %s (%s); %s", what, name, text, hint);
}

/* ---- reduction second pass -------------------------------------------------------------------------------- */

/* out[0] = (float)(sum(partials[0..count)) / divisor): thread t sums partials t, t + 256, ... in order, then the
 * block sum combines the threads in a fixed order. */
__global__ void reduce_finalize_kernel(const double *__restrict__ partials, int count, double divisor,
                                       float *__restrict__ out) {
    __shared__ double sh[VX_THREADS / 32];
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += VX_THREADS) s += partials[i];
    s = vx_block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = (float)(s / divisor);
}

void vx_reduce_finalize(const double *partials, int count, double divisor, float *out) {
    reduce_finalize_kernel<<<1, VX_THREADS, 0, vx_cuda_stream()>>>(partials, count, divisor, out);
    LAUNCH_CHECK("reduce_finalize_kernel");
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
        errno = 0;
        vx_fatal("cudaMalloc of %zu bytes failed: %s (%zu bytes in use by voxscale, %zu of %zu free on the GPU); "
                 "lower batch_size or input_size",
                 bytes, cudaGetErrorName(e), g.in_use, free_b, total_b);
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
        errno = 0;
        vx_fatal("cudaHostAlloc of %zu bytes (pinned host memory) failed: %s; lower batch_size or data.prefetch",
                 bytes, cudaGetErrorName(e));
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
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g.compute));
    CUDA_CHECK(cudaStreamSynchronize(g.compute)); /* blocking: src may be reused when this returns */
}
static void cuda_copy_to_host(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g.compute));
    CUDA_CHECK(cudaStreamSynchronize(g.compute));
}
static void cuda_zero(void *ptr, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, g.compute));
}
static void cuda_synchronize(void) {
    CUDA_CHECK(cudaStreamSynchronize(g.compute));
    CUDA_CHECK(cudaStreamSynchronize(g.copy));
}
/* pageable source: cudaMemcpyAsync stages it before returning, so the caller may reuse it at once */
static void cuda_write_async(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g.compute));
}
static void cuda_copy_to_host_async(void *dst_host, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, g.compute));
}

/* copy stream: after `after`, or the compute work enqueued so far (dst may still be read by it), before the compute
 * work enqueued from now on */
static void cuda_upload_async(void *dst_device, const void *src_host, size_t bytes, void *after) {
    if (!bytes) return;
    bind_thread("upload_async");
    if (!after) CUDA_CHECK(cudaEventRecord(g.compute_mark, g.compute));
    CUDA_CHECK(cudaStreamWaitEvent(g.copy, after ? (cudaEvent_t)after : g.compute_mark, 0));
    CUDA_CHECK(cudaMemcpyAsync(dst_device, src_host, bytes, cudaMemcpyHostToDevice, g.copy));
    CUDA_CHECK(cudaEventRecord(g.upload_done, g.copy));
    CUDA_CHECK(cudaStreamWaitEvent(g.compute, g.upload_done, 0));
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
    CUDA_CHECK(cudaEventRecord(g.timer[slot], g.compute));
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
static void cuda_event_record(void *ev) { CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, g.compute)); }
static void cuda_event_wait(void *ev) { CUDA_CHECK(cudaStreamWaitEvent(g.compute, (cudaEvent_t)ev, 0)); }
static void cuda_event_synchronize(void *ev) { CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)ev)); }

/* ---- graphs ----------------------------------------------------------------------------------------------- */

/* Thread-local capture: only the capturing thread is kept from unsafe calls (the loader's threads still allocate
 * and fill pinned buffers). LAUNCH_CHECK does not synchronise while vx_cuda_capturing (VX_CUDA_SYNC would break
 * the capture). */
static void cuda_graph_capture_begin(void) {
    CUDA_CHECK(cudaStreamBeginCapture(g.compute, cudaStreamCaptureModeThreadLocal));
    vx_cuda_capturing = 1;
}

static void *cuda_graph_capture_end(char *why, size_t why_len) {
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(g.compute, &graph);
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

static void cuda_graph_launch(void *graph) { CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, g.compute)); }
static void cuda_graph_destroy(void *graph) {
    if (graph && g.ready) CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

/* ---- ops -------------------------------------------------------------------------------------------------- */

/* each op folder's CUDA table (kernels/<op>/<op>_cuda.cu), registered in ops.def */
#define VX_OP(name, Type) extern "C" const struct Type name##_ops_cuda;
#include "ops.def"
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
#include "ops.def"
#undef VX_OP
};

/* ---- init and shutdown ------------------------------------------------------------------------------------ */

extern "C" void backend_cuda_set_options(const BackendOptions *o) {
    if (o) g_options = *o;
}

extern "C" const Backend *backend_cuda(void) { return g.ready ? &cuda_backend : NULL; }

/* Best effort, errors ignored (see the file comment). */
static void teardown(void) {
    if (g.compute) cudaStreamSynchronize(g.compute);
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
    if (g.cudnn) cudnnDestroy(g.cudnn);
    g.cudnn = NULL;
    if (g.scratch) cudaFree(g.scratch);
    g.scratch = NULL;
    for (int i = 0; i < BACKEND_TIMER_SLOTS; i++) {
        if (g.timer[i]) cudaEventDestroy(g.timer[i]);
        g.timer[i] = NULL;
        g.timer_marked[i] = 0;
    }
    if (g.upload_done) cudaEventDestroy(g.upload_done);
    if (g.compute_mark) cudaEventDestroy(g.compute_mark);
    g.upload_done = g.compute_mark = NULL;
    if (g.copy) cudaStreamDestroy(g.copy);
    if (g.compute) cudaStreamDestroy(g.compute);
    g.copy = g.compute = NULL;
    cudaGetLastError(); /* leave no sticky error behind for a later init */
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
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(reason, reason_len, "CUDA reports %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (n == 0) {
        snprintf(reason, reason_len, "the CUDA driver sees no GPU");
        return 0;
    }
    if (device < 0 || device >= n) {
        snprintf(reason, reason_len, "GPU %d requested, but the CUDA driver sees %d (0..%d)", device, n, n - 1);
        return 0;
    }
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) {
        snprintf(reason, reason_len, "cannot query GPU %d: %s: %s", device, cudaGetErrorName(e), cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (p.major < 8) {
        snprintf(reason, reason_len, "GPU %d (%s) has compute capability %d.%d; this build needs 8.0 (Ampere) or newer",
                 device, p.name, p.major, p.minor);
        return 0;
    }
    const size_t cudnn_major = cudnnGetVersion() / 10000;
    if (cudnn_major != CUDNN_MAJOR) {
        snprintf(reason, reason_len, "cuDNN %zu.x is loaded, but this build was compiled against cuDNN %d.x",
                 cudnn_major, CUDNN_MAJOR);
        return 0;
    }

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

    INIT_TRY(cudaSetDevice(device), "selecting the device");
    INIT_TRY(cudaFree(0), "creating the CUDA context");
    INIT_TRY(cudaStreamCreateWithFlags(&g.compute, cudaStreamNonBlocking), "creating the compute stream");
    INIT_TRY(cudaStreamCreateWithFlags(&g.copy, cudaStreamNonBlocking), "creating the copy stream");
    INIT_TRY(cudaEventCreateWithFlags(&g.upload_done, cudaEventDisableTiming), "creating an event");
    INIT_TRY(cudaEventCreateWithFlags(&g.compute_mark, cudaEventDisableTiming), "creating an event");
    for (int i = 0; i < BACKEND_TIMER_SLOTS; i++) INIT_TRY(cudaEventCreate(&g.timer[i]), "creating a timer event");
    INIT_TRY(cudaMalloc(&g.scratch, VX_SCRATCH_BYTES), "allocating the reduction scratch buffer");
#undef INIT_TRY

    const cudnnStatus_t s = cudnnCreate(&g.cudnn);
    if (s != CUDNN_STATUS_SUCCESS) {
        snprintf(reason, reason_len, "cuDNN failed to initialise: %s", cudnnGetErrorString(s));
        g.cudnn = NULL;
        teardown();
        return 0;
    }
    /* cuDNN 9 loads its sub-libraries (graph, ops, cnn) on first use: check now that they load and match, so a
     * missing libcudnn_cnn is a reason to choose the CPU rather than a failure in the first convolution. */
    const struct {
        cudnnStatus_t (*check)(void);
        const char *lib;
    } sublibs[3] = {{cudnnGraphVersionCheck, "graph"}, {cudnnOpsVersionCheck, "ops"}, {cudnnCnnVersionCheck, "cnn"}};
    for (int i = 0; i < 3; i++) {
        const cudnnStatus_t sv = sublibs[i].check();
        if (sv != CUDNN_STATUS_SUCCESS) {
            snprintf(reason, reason_len, "cuDNN's %s library is missing or does not match (libcudnn_%s.so.%d): %s",
                     sublibs[i].lib, sublibs[i].lib, CUDNN_MAJOR, cudnnGetErrorString(sv));
            teardown();
            return 0;
        }
    }
    const cudnnStatus_t s2 = cudnnSetStream(g.cudnn, g.compute);
    if (s2 != CUDNN_STATUS_SUCCESS) {
        snprintf(reason, reason_len, "cuDNN refused the compute stream: %s", cudnnGetErrorString(s2));
        teardown();
        return 0;
    }
    const char *sync_env = getenv("VX_CUDA_SYNC");
    vx_cuda_sync_launches = sync_env && sync_env[0] && strcmp(sync_env, "0") != 0;
    g.device = device;
    g.ready = 1;
    if (!g.atexit_registered) {
        /* registered after the CUDA runtime's own exit handler, so it runs before the runtime tears down */
        atexit(backend_cuda_shutdown);
        g.atexit_registered = 1;
    }
    return 1;
}

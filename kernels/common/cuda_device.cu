/* cuda_device.cu: the GPU the ops run on (cuda_check.h): the compute stream, the cuDNN handle bound to it, the
 * reduction scratch and the options (BackendOptions), started and stopped by the CUDA backend
 * (backend/backend_cuda.cu); also the error hints of cuda_check.h and the reductions' second pass. Below every op:
 * an op's CUDA file needs this and nothing of the backend's table. vx_cuda_device_stop never exits on an error
 * itself, so it is safe while the process is already exiting because of one. */
#include <string.h>

#include "common/cuda_check.h"
#include "vx_cuda_archs.h"

/* ---- state ------------------------------------------------------------------------------------------------ */

static struct {
    int ready, device;
    cudaStream_t compute;
    cudnnHandle_t cudnn;
    void *scratch;
} g;

static BackendOptions g_options = {.deterministic = 0, .allow_tf32 = 1};
int vx_cuda_sync_launches = 0;
int vx_cuda_capturing = 0;

static void require_ready(const char *what) {
    if (!g.ready) vx_fatal("CUDA backend used (%s) before a successful backend_cuda_init", what);
}

int vx_cuda_device_ready(void) { return g.ready; }
int vx_cuda_device_id(void) { return g.device; }
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

extern "C" void backend_cuda_set_options(const BackendOptions *o) {
    if (o) g_options = *o;
}

/* ---- errors ----------------------------------------------------------------------------------------------- */

const char *vx_cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation: return "out of GPU memory: lower batch_size or input_size";
    case cudaErrorInsufficientDriver: return "the NVIDIA driver is older than this build's CUDA 13: update the driver";
    case cudaErrorNoDevice: return "no GPU is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES";
    case cudaErrorNoKernelImageForDevice:
        return "this build has no code this GPU can run (it has " VX_CUDA_ARCHS "): voxscale needs compute capability "
               "8.0 or newer; rebuild with make CUDA_ARCHS naming this GPU's (80 for an A100 or any 8.x GPU)";
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

/* ---- start and stop --------------------------------------------------------------------------------------- */

/* Best effort, errors ignored (see the file comment). */
void vx_cuda_device_stop(void) {
    if (g.compute) cudaStreamSynchronize(g.compute);
    if (g.cudnn) cudnnDestroy(g.cudnn);
    g.cudnn = NULL;
    if (g.scratch) cudaFree(g.scratch);
    g.scratch = NULL;
    if (g.compute) cudaStreamDestroy(g.compute);
    g.compute = NULL;
    g.ready = 0;
    cudaGetLastError(); /* leave no sticky error behind for a later start */
}

int vx_cuda_device_start(int device, char *reason, size_t reason_len) {
    if (g.ready) return 1;
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

#define START_TRY(call, what)                                                                                  \
    do {                                                                                                       \
        const cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess) {                                                                               \
            snprintf(reason, reason_len, "%s failed on GPU %d: %s: %s", what, device, cudaGetErrorName(e_),     \
                     cudaGetErrorString(e_));                                                                  \
            vx_cuda_device_stop();                                                                             \
            return 0;                                                                                          \
        }                                                                                                      \
    } while (0)

    START_TRY(cudaSetDevice(device), "selecting the device");
    START_TRY(cudaFree(0), "creating the CUDA context");
    START_TRY(cudaStreamCreateWithFlags(&g.compute, cudaStreamNonBlocking), "creating the compute stream");
    START_TRY(cudaMalloc(&g.scratch, VX_SCRATCH_BYTES), "allocating the reduction scratch buffer");
#undef START_TRY
    const cudnnStatus_t s = cudnnCreate(&g.cudnn);
    if (s != CUDNN_STATUS_SUCCESS) {
        snprintf(reason, reason_len, "cuDNN failed to initialise: %s", cudnnGetErrorString(s));
        g.cudnn = NULL;
        vx_cuda_device_stop();
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
            vx_cuda_device_stop();
            return 0;
        }
    }
    const cudnnStatus_t s2 = cudnnSetStream(g.cudnn, g.compute);
    if (s2 != CUDNN_STATUS_SUCCESS) {
        snprintf(reason, reason_len, "cuDNN refused the compute stream: %s", cudnnGetErrorString(s2));
        vx_cuda_device_stop();
        return 0;
    }
    const char *sync_env = getenv("VX_CUDA_SYNC");
    vx_cuda_sync_launches = sync_env && sync_env[0] && strcmp(sync_env, "0") != 0;
    g.device = device;
    g.ready = 1;
    return 1;
}

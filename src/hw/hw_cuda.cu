/* hw_cuda.cu: asks the CUDA runtime which GPUs this process can use. Compiled by nvcc only in CUDA builds.
 * Listing reads device properties only, which creates no CUDA context: a context costs a few hundred MiB on its
 * GPU for the life of the process, and a CPU run, or a run on GPU 0, must not hold one on every GPU of the node.
 * Free memory needs a context, so it is read for the one device the backend started on (hw_cuda_free_bytes). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <cublas_api.h>
#include <cudnn.h>
#include <cudnn_version.h>
#include <cupti_version.h>
#ifdef VX_NCCL
#include <nccl.h>
#endif

extern "C" {
#include "hw/hw.h"
}

extern "C" int hw_cuda_query(HwGpu *gpus, int max, char *reason, size_t reason_len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        snprintf(reason, reason_len, "CUDA reports %s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
        cudaGetLastError(); /* clear the sticky error so later calls report their own */
        return 0;
    }
    if (n == 0) {
        snprintf(reason, reason_len, "the CUDA driver sees no GPU");
        return 0;
    }
    if (n > max) n = max;
    for (int i = 0; i < n; i++) {
        cudaDeviceProp p;
        const cudaError_t e = cudaGetDeviceProperties(&p, i);
        if (e != cudaSuccess) {
            /* the devices are numbered by the driver: a GPU that cannot be described ends the usable list here */
            snprintf(reason, reason_len, "cudaGetDeviceProperties(%d) failed: %s", i, cudaGetErrorName(e));
            cudaGetLastError();
            return i;
        }
        snprintf(gpus[i].name, sizeof gpus[i].name, "%s", p.name);
        gpus[i].total_bytes = p.totalGlobalMem;
        gpus[i].free_bytes = 0;
        gpus[i].free_known = 0;
        gpus[i].sms = p.multiProcessorCount;
        gpus[i].cc_major = p.major;
        gpus[i].cc_minor = p.minor;
        gpus[i].warp_size = p.warpSize;
        gpus[i].max_threads_per_block = p.maxThreadsPerBlock;
        gpus[i].shared_mem_per_block = p.sharedMemPerBlock;
    }
    return n;
}

extern "C" int hw_cuda_free_bytes(int device, size_t *free_bytes) {
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    *free_bytes = free_b;
    return 1;
}

extern "C" void hw_cuda_build_versions(char *out, size_t len) {
#ifdef VX_NCCL
    char nccl[32];
    snprintf(nccl, sizeof nccl, "%d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
    const char *nccl = "none";
#endif
    snprintf(out, len, "CUDA runtime %d.%d, cuDNN %d.%d.%d, NCCL %s, cuBLAS %d.%d.%d, CUPTI API %d", CUDART_VERSION / 1000,
             CUDART_VERSION % 1000 / 10, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, nccl, CUBLAS_VER_MAJOR,
             CUBLAS_VER_MINOR, CUBLAS_VER_PATCH, CUPTI_API_VERSION);
}

extern "C" void hw_cuda_loaded_versions(char *out, size_t len) {
    int driver = 0, runtime = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0; /* (0 too where no driver is installed) */
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    cudaGetLastError();
    const size_t cudnn = cudnnGetVersion();
    char drv[48], nccl[32] = "not linked";
    if (driver > 0) snprintf(drv, sizeof drv, "for CUDA %d.%d", driver / 1000, driver % 1000 / 10);
    else snprintf(drv, sizeof drv, "none found");
#ifdef VX_NCCL
    int v = 0;
    if (ncclGetVersion(&v) == ncclSuccess) snprintf(nccl, sizeof nccl, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
#endif
    snprintf(out, len, "NVIDIA driver: %s; CUDA runtime %d.%d; cuDNN %zu.%zu.%zu; NCCL %s", drv, runtime / 1000,
             runtime % 1000 / 10, cudnn / 10000, cudnn / 100 % 100, cudnn % 100, nccl);
}

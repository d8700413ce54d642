/* hw_cuda.cu: asks the CUDA runtime which GPUs this process can use. Compiled by nvcc only in CUDA builds. */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "hw.h"
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
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        snprintf(gpus[i].name, sizeof gpus[i].name, "%s", p.name);
        gpus[i].total_bytes = p.totalGlobalMem;
        gpus[i].sms = p.multiProcessorCount;
        gpus[i].cc_major = p.major;
        gpus[i].cc_minor = p.minor;
        gpus[i].warp_size = p.warpSize;
        gpus[i].max_threads_per_block = p.maxThreadsPerBlock;
        gpus[i].shared_mem_per_block = p.sharedMemPerBlock;
        size_t free_b = 0, total_b = 0;
        if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) gpus[i].free_bytes = free_b;
    }
    return n;
}

/* bench_cuda.cu: the GPU ceiling that `bench step` measures a CUDA run against: cuBLAS SGEMM at a large square
 * shape, with TF32 tensor cores when the run allows them (the same math cuDNN may use for our convolutions),
 * timed with CUDA events in the same process as the step. Compiled by nvcc only in CUDA builds.
 * cuBLAS is loaded here, with dlopen, the first time a ceiling is measured (libcublas.so.<major> of the headers, found
 * through VX_CUBLAS_LIB, the RUNPATH or the library path), not linked: a binary that trains needs no cuBLAS, and a
 * machine whose cuBLAS is missing or of another major version fails only here, with one line. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "bench/bench.h"
#include "core/util.h"
#include "common/rng.h"
}

#define CK(call)                                                                                                   \
    do {                                                                                                           \
        cudaError_t e_ = (call);                                                                                   \
        if (e_ != cudaSuccess) vx_fatal("%s failed: %s (the GEMM ceiling needs a working GPU)", #call,             \
                                        cudaGetErrorString(e_));                                                   \
    } while (0)
#define CKB(call)                                                                                                  \
    do {                                                                                                           \
        cublasStatus_t s_ = (call);                                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) vx_fatal("%s failed: cuBLAS status %d", #call, (int)s_);                 \
    } while (0)

/* The cuBLAS functions the ceiling calls (cublas_v2.h maps cublasCreate to cublasCreate_v2 and so on) */
static struct {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemm_v2) sgemm;
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static char blas_failure[512];

static void load_cublas(void) {
    char soname[32];
    snprintf(soname, sizeof soname, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    const char *env = getenv("VX_CUBLAS_LIB");
    const char *name = env && env[0] ? env : soname;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(blas_failure, sizeof blas_failure, "cannot load cuBLAS (%s): the GEMM ceiling of bench needs the CUDA "
                 "%d cuBLAS (the toolkit's, or the nvidia-cublas wheel) on the library path, or VX_CUBLAS_LIB=path",
                 e ? e : name, CUBLAS_VER_MAJOR);
        return;
    }
    const struct {
        void **slot;
        const char *sym;
    } syms[] = {{(void **)&blas.create, "cublasCreate_v2"}, {(void **)&blas.destroy, "cublasDestroy_v2"},
                {(void **)&blas.set_math_mode, "cublasSetMathMode"}, {(void **)&blas.sgemm, "cublasSgemm_v2"}};
    for (const auto &s : syms)
        if (!(*s.slot = dlsym(h, s.sym))) {
            snprintf(blas_failure, sizeof blas_failure, "%s has no %s: not a cuBLAS this build can use", name, s.sym);
            blas.create = NULL;
            return;
        }
}

extern "C" double bench_cublas_sgemm_gflops(int n, int allow_tf32) {
    pthread_once(&blas_once, load_cublas);
    if (!blas.create) vx_exit_error(VX_EXIT_FAIL, "%s", blas_failure);
    size_t bytes = (size_t)n * n * sizeof(float);
    float *a, *b, *c;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMalloc(&c, bytes));
    /* Operands of random values in (-1, 1]: on A100/H100 the GEMM rate depends on the data (all-zero operands
     * draw less power and let the clocks stay higher), so zeros would overstate the ceiling. */
    {
        float *host = (float *)vx_malloc(bytes);
        for (size_t i = 0; i < (size_t)n * n; i++) host[i] = 2.0f * vx_uniform01(vx_hash3(0, 0, i)) - 1.0f;
        CK(cudaMemcpy(a, host, bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(b, host, bytes, cudaMemcpyHostToDevice)); /* the same values: A B, not A A^T, so no symmetry */
        free(host);
    }
    cublasHandle_t h;
    CKB(blas.create(&h));
    CKB(blas.set_math_mode(h, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    const float one = 1.0f, zero = 0.0f;
    enum { REPS = 10 };
    float best_ms = 1e30f;
    for (int r = -2; r < REPS; r++) { /* two warm-ups, then the fastest of REPS */
        CK(cudaEventRecord(t0));
        CKB(blas.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
        CK(cudaEventRecord(t1));
        CK(cudaEventSynchronize(t1));
        float ms;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        if (r >= 0 && ms < best_ms) best_ms = ms;
    }
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    CKB(blas.destroy(h));
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(c));
    return 2.0 * n * (double)n * n / (best_ms * 1e-3) * 1e-9;
}

/* The copy ceiling of `bench kernels`: device-to-device cudaMemcpy of `bytes`, fastest of 10 after two warm-ups,
 * as GB/s of bytes read + written (2 x bytes per copy), the way the memory-bound ops count theirs. */
extern "C" double bench_cuda_copy_gbps(size_t bytes) {
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    float best_ms = 1e30f;
    for (int r = -2; r < 10; r++) {
        CK(cudaEventRecord(t0));
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(t1));
        CK(cudaEventSynchronize(t1));
        float ms;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        if (r >= 0 && ms < best_ms) best_ms = ms;
    }
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * (double)bytes / (best_ms * 1e-3) * 1e-9;
}

/* The current GPU's L2 size: `bench kernels` rotates its inputs over more than twice this. */
extern "C" size_t bench_cuda_l2_bytes(void) {
    int dev = 0, l2 = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    return (size_t)l2;
}

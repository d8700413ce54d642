/* cuda_check.h: what the CUDA backend's .cu files share (nvcc only):
 *  - CUDA_CHECK / CUDNN_CHECK / LAUNCH_CHECK: every runtime, cuDNN and kernel-launch result is checked (one body,
 *    VX_CHECK_GEN, which parallel/comm_nccl.cu's NCCL check shares); a failure
 *    is one "voxscale: error at file:line: <call> failed: <error name> (<text>); <hint>" line and exit code 1
 *    (vx_fatal). Kernels run asynchronously, so a fault inside one is reported by a later check; set
 *    VX_CUDA_SYNC=1 in the environment to synchronize after every launch and have the failing kernel named.
 *  - the backend's state: its compute stream (every op is enqueued there), cuDNN handle, options, and the
 *    reduction scratch buffer allocated once at backend_cuda_init (VX_SCRATCH_BYTES). Ops that reduce write
 *    their per-block partial sums there; they all run on the one compute stream, so they never overlap.
 *  - launch geometry and 128-bit access helpers. */
#pragma once
#ifndef __CUDACC__
#error "cuda_check.h is for the .cu files compiled by nvcc"
#endif

#include <cuda_runtime.h>
#include <cudnn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "core/util.h"
}
#include "common/device_options.h"
#include "common/dtype_cuda.cuh"

/* ---- error checks ----------------------------------------------------------------------------------------- */

/* What to try for an error, one short sentence. */
const char *vx_cuda_hint(cudaError_t e);
const char *vx_cudnn_hint(cudnnStatus_t s);
/* Prints the failure through vx_fatal_at (errno cleared first so no stale strerror is appended) and exits 1. */
[[noreturn]] void vx_cuda_fail(const char *file, int line, const char *what, const char *name, const char *text,
                               const char *hint);
/* Synchronize after every launch (VX_CUDA_SYNC=1): read at backend_cuda_init. Not while a graph is being captured
 * (vx_cuda_capturing), where a synchronisation would invalidate the capture. */
extern int vx_cuda_sync_launches;
extern int vx_cuda_capturing;

/* The one body every check shares (ggml's CUDA_CHECK_GEN does the same): VX_CHECK_GEN evaluates `call` once as a
 * T and, when is_ok(result) is false, calls fail(__FILE__, __LINE__, "<the call's text>", result, <any further
 * arguments>), which does not return. A library's check is an is_ok and a fail of its own: CUDA and cuDNN here (exit
 * 1 through vx_cuda_fail), NCCL in parallel/comm_nccl.cu (its in-progress state is accepted there, and a failure ends
 * the rank with exit 3 through comm_fail). The fail functions have distinct names, not overloads: the host
 * emulation of tests/tools/cuda_emu defines cudaError_t and cudnnStatus_t as the same int. */
#define VX_CHECK_GEN(T, call, is_ok, fail, ...)                                                                \
    do {                                                                                                       \
        const T vx_r_ = (call);                                                                                \
        if (!is_ok(vx_r_)) fail(__FILE__, __LINE__, #call, vx_r_, ##__VA_ARGS__);                              \
    } while (0)

static inline bool vx_cuda_ok(cudaError_t e) { return e == cudaSuccess; }
static inline bool vx_cudnn_ok(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }
[[noreturn]] static inline void vx_cuda_check_failed(const char *file, int line, const char *call, cudaError_t e) {
    vx_cuda_fail(file, line, call, cudaGetErrorName(e), cudaGetErrorString(e), vx_cuda_hint(e));
}
[[noreturn]] static inline void vx_cudnn_check_failed(const char *file, int line, const char *call, cudnnStatus_t s) {
    vx_cuda_fail(file, line, call, "cuDNN", cudnnGetErrorString(s), vx_cudnn_hint(s));
}

#define CUDA_CHECK(call) VX_CHECK_GEN(cudaError_t, call, vx_cuda_ok, vx_cuda_check_failed)
#define CUDNN_CHECK(call) VX_CHECK_GEN(cudnnStatus_t, call, vx_cudnn_ok, vx_cudnn_check_failed)

/* After every <<<...>>>: a bad launch configuration is reported here, at its own line, naming the kernel. */
[[noreturn]] static inline void vx_launch_check_failed(const char *file, int line, const char *call, cudaError_t e,
                                                       const char *kernel_name) {
    (void)call; /* always cudaGetLastError(): the kernel's name says more */
    char what[160];
    snprintf(what, sizeof what, "launch of %s", kernel_name);
    vx_cuda_fail(file, line, what, cudaGetErrorName(e), cudaGetErrorString(e), vx_cuda_hint(e));
}
#define LAUNCH_CHECK(kernel_name)                                                                              \
    do {                                                                                                       \
        VX_CHECK_GEN(cudaError_t, cudaGetLastError(), vx_cuda_ok, vx_launch_check_failed, kernel_name);        \
        if (vx_cuda_sync_launches && !vx_cuda_capturing) CUDA_CHECK(cudaStreamSynchronize(vx_cuda_stream())); \
    } while (0)

/* ---- the device (common/cuda_device.cu) ------------------------------------------------------------------- */

/* Starts GPU `device` (checks, context, compute stream, scratch, cuDNN and its sub-libraries): 1, or 0 with a
 * one-line reason. The CUDA backend's init calls it; stop undoes it (best effort, never exits). */
int vx_cuda_device_start(int device, char *reason, size_t reason_len);
void vx_cuda_device_stop(void);
int vx_cuda_device_ready(void);
int vx_cuda_device_id(void);
cudaStream_t vx_cuda_stream(void);   /* the compute stream */
cudnnHandle_t vx_cudnn_handle(void); /* bound to the compute stream */
const BackendOptions *vx_cuda_options(void);

/* The reduction scratch: VX_SCRATCH_BYTES of device memory, 256-byte aligned. */
#define VX_SCRATCH_BYTES (32UL << 20)
void *vx_cuda_scratch(void);

/* Second pass of the fixed-order reductions: out[0] = (float)(sum of partials[0..count) / divisor), summed by
 * one block in a fixed order. count <= VX_RED_MAX_BLOCKS. */
void vx_reduce_finalize(const double *partials, int count, double divisor, float *out);

/* ---- launch geometry -------------------------------------------------------------------------------------- */

#define VX_THREADS 256           /* block size of every own kernel */
#define VX_EW_MAX_BLOCKS 8192u   /* elementwise kernels: grid-stride loops beyond this many blocks */
#define VX_RED_MAX_BLOCKS 1024   /* first pass of a reduction to one value: at most this many partials */
#define VX_GRID_Y_MAX 65535u     /* gridDim.y / gridDim.z limit */

/* Blocks for a grid-stride loop over `items` (items > 0). */
static inline unsigned vx_ew_blocks(size_t items) {
    const size_t b = (items + VX_THREADS - 1) / VX_THREADS;
    return (unsigned)(b < VX_EW_MAX_BLOCKS ? (b ? b : 1) : VX_EW_MAX_BLOCKS);
}

/* Blocks of the first pass of a fixed-order reduction over `items` (items > 0): a function of the count only,
 * so the summation order, and the result's bits, are the same on every run and every GPU. */
static inline int vx_red_blocks(size_t items) {
    const size_t per_block = (size_t)VX_THREADS * 4;
    const size_t b = (items + per_block - 1) / per_block;
    return (int)(b < (size_t)VX_RED_MAX_BLOCKS ? (b ? b : 1) : (size_t)VX_RED_MAX_BLOCKS);
}

static inline int vx_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Vector access (4 elements at once) is used when the element count is a multiple of 4 and every pointer is 16-byte
 * aligned (what a float4 needs; more than the 8 bytes four 16-bit elements need). */
static inline int vx_vec4_ok(size_t count, const void *a, const void *b = NULL, const void *c = NULL,
                             const void *d = NULL) {
    return count % 4 == 0 && vx_aligned16(a) && (!b || vx_aligned16(b)) && (!c || vx_aligned16(c)) &&
           (!d || vx_aligned16(d));
}

/* ---- device helpers --------------------------------------------------------------------------------------- */

/* V elements at vector index i of p, as floats, and back (V = 4: one 128-bit access of floats, one 64-bit access
 * of 16-bit types; p must then be aligned to 4 elements). T is float, __nv_bfloat16 or __half (dtype_cuda.cuh);
 * stores round to nearest even. */
template <int V, typename T> __device__ __forceinline__ void vx_load(const T *__restrict__ p, size_t i, float *v) {
    if constexpr (V == 4 && sizeof(T) == 4) {
        const float4 t = reinterpret_cast<const float4 *>(p)[i];
        v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    } else if constexpr (V == 4) {
        const uint2 t = reinterpret_cast<const uint2 *>(p)[i];
        T e[4];
        memcpy(e, &t, sizeof t);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = vx_f32(e[k]);
    } else {
        v[0] = vx_f32(p[i]);
    }
}
template <int V, typename T> __device__ __forceinline__ void vx_store(T *__restrict__ p, size_t i, const float *v) {
    if constexpr (V == 4 && sizeof(T) == 4) {
        reinterpret_cast<float4 *>(p)[i] = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (V == 4) {
        T e[4];
#pragma unroll
        for (int k = 0; k < 4; k++) e[k] = vx_to<T>(v[k]);
        uint2 t;
        memcpy(&t, e, sizeof t);
        reinterpret_cast<uint2 *>(p)[i] = t;
    } else {
        p[i] = vx_to<T>(v[0]);
    }
}

__device__ __forceinline__ size_t vx_global_thread(void) { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t vx_grid_threads(void) { return (size_t)gridDim.x * blockDim.x; }

/* Sum of v over the block, in a fixed order (warp shuffles, then the warps' sums by warp 0); the result is valid
 * in thread 0. Every thread of the block must call it (blockDim.x == VX_THREADS). sh: VX_THREADS/32 doubles of
 * shared memory, reusable after the call returns. */
__device__ __forceinline__ double vx_block_sum(double v, double *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double r = 0.0;
    if (warp == 0) {
        r = lane < VX_THREADS / 32 ? sh[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) r += __shfl_down_sync(0xffffffffu, r, o);
    }
    __syncthreads(); /* sh may be reused by the caller */
    return r;
}

/* dtype_cuda.cuh: the storage types of dtype.h on the device (nvcc, and the host emulation of tests/tools/cuda_emu):
 *   DT_F32 -> float, DT_BF16 -> __nv_bfloat16, DT_F16 -> __half
 * vx_f32 widens an element to float, vx_to<T> narrows a float to nearest even; every kernel computes in float
 * whatever it stores. VX_DTYPE_SWITCH instantiates a launcher's body once per storage type, as PyTorch's
 * AT_DISPATCH does: the kernels are templates over T and the entry points take the DType. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/dtype.h"

__device__ __forceinline__ float vx_f32(float v) { return v; }
__device__ __forceinline__ float vx_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float vx_f32(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T vx_to(float v);
template <> __device__ __forceinline__ float vx_to<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 vx_to<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half vx_to<__half>(float v) { return __float2half_rn(v); }

/* VX_DTYPE_SWITCH(dt, T, statements): runs statements with T the storage type of dt (a typedef in each case). */
#define VX_DTYPE_SWITCH(dt, T, ...)                                                                            \
    do {                                                                                                       \
        switch (dt) {                                                                                          \
        case DT_F32: {                                                                                         \
            typedef float T;                                                                                   \
            __VA_ARGS__;                                                                                       \
        } break;                                                                                               \
        case DT_BF16: {                                                                                        \
            typedef __nv_bfloat16 T;                                                                           \
            __VA_ARGS__;                                                                                       \
        } break;                                                                                               \
        case DT_F16: {                                                                                         \
            typedef __half T;                                                                                  \
            __VA_ARGS__;                                                                                       \
        } break;                                                                                               \
        default: vx_fatal("unknown dtype %d", (int)(dt));                                                      \
        }                                                                                                      \
    } while (0)

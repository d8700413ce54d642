/* vx_hd.h: VX_HD marks a small inline function that both the host (C) and the device (CUDA) code compile, so that
 * a computation both sides need (the counter-based RNG, the optimizer's per-step decisions) has one definition. */
#pragma once
#if defined(__CUDACC__)
#define VX_HD __host__ __device__ __forceinline__
#else
#define VX_HD static inline
#endif

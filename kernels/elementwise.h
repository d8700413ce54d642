/* elementwise.h: the small vector ops the graph needs: residual add, gradient accumulation, scaling, and the cast
 * between storage types (dtype.h). The CPU versions are the float32 reference; the CUDA ones take the storage type
 * of their activation buffers (`dt`) and compute in float32 whatever it is. */
#pragma once
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = a + b */
void add_forward_cpu(long count, const float *a, const float *b, float *y);
/* dst = beta*dst + src  (beta in {0,1}; with beta 0 dst is overwritten even if it held NaN) */
void accumulate_cpu(long count, const float *src, float *dst, float beta);
/* x *= scale */
void scale_cpu(long count, float *x, float scale);
/* dst[i] = src[i] converted from `from` to `to` (rounded to nearest even when narrowing); src and dst must not
 * overlap unless from == to and src == dst. The CPU converts between any two types (dtype.h). */
void cast_cpu(long count, DType from, const void *src, DType to, void *dst);

/* CUDA (kernels/elementwise_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void add_forward_cuda(DType dt, long count, const void *a, const void *b, void *y);
void accumulate_cuda(DType dt, long count, const void *src, void *dst, float beta);
void scale_cuda(long count, float *x, float scale);
void cast_cuda(long count, DType from, const void *src, DType to, void *dst);

#ifdef __cplusplus
}
#endif

/* elementwise.h: the small vector ops the graph needs: residual add and gradient accumulation. */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* y = a + b */
void add_forward_cpu(long count, const float *a, const float *b, float *y);
/* dst = beta*dst + src  (beta in {0,1}; with beta 0 dst is overwritten even if it held NaN) */
void accumulate_cpu(long count, const float *src, float *dst, float beta);
/* x *= scale */
void scale_cpu(long count, float *x, float scale);

/* CUDA (kernels/elementwise_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void add_forward_cuda(long count, const float *a, const float *b, float *y);
void accumulate_cuda(long count, const float *src, float *dst, float beta);
void scale_cuda(long count, float *x, float scale);

#ifdef __cplusplus
}
#endif

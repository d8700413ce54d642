/* silu.h: SiLU (x * sigmoid(x)) elementwise over `count` floats. Backward reads the forward input x. */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

void silu_forward_cpu(long count, const float *x, float *y);
/* dx = beta*dx + dy * silu'(x) */
void silu_backward_cpu(long count, const float *x, const float *dy, float *dx, float beta);

/* CUDA (kernels/silu_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void silu_forward_cuda(long count, const float *x, float *y);
void silu_backward_cuda(long count, const float *x, const float *dy, float *dx, float beta);

#ifdef __cplusplus
}
#endif

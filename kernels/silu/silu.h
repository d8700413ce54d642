/* silu.h: SiLU (x * sigmoid(x)) elementwise over `count` elements. Backward reads the forward input x. The CPU
 * version is the float32 reference; the CUDA one stores x, y, dy, dx as `dt` (dtype.h) and computes in float32. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

void silu_forward_cpu(long count, const float *x, float *y);
/* dx = beta*dx + dy * silu'(x) */
void silu_backward_cpu(long count, const float *x, const float *dy, float *dx, float beta);

/* CUDA (silu_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void silu_forward_cuda(DType dt, long count, const void *x, void *y);
void silu_backward_cuda(DType dt, long count, const void *x, const void *dy, void *dx, float beta);

/* The op's sub-table (kernels/backend/ops.def): be->silu->... */
enum { SILU_FORWARD, SILU_BACKWARD }; /* its functions, for supports() */
typedef struct SiluOps {
    OpHead head;
    void (*forward)(DType dt, long count, const void *x, void *y);
    void (*backward)(DType dt, long count, const void *x, const void *dy, void *dx, float beta);
} SiluOps;
extern const SiluOps silu_ops_cpu;
extern const SiluOps silu_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

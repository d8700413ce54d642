/* relu.h: y = max(x, 0), and its gradient dx = dy where y > 0 (0 at x == 0, as PyTorch), over `count` values of
 * type dt. backward reads the forward's output y (so the input need not be kept), beta as conv3d.h (0 overwrite,
 * 1 accumulate). The CPU version is the float32 reference; CUDA runs every storage type. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op's sub-table (kernels/backend/ops.def): be->relu->... */
enum { RELU_FORWARD, RELU_BACKWARD }; /* its functions, for supports() */
typedef struct ReluOps {
    OpHead head;
    void (*forward)(DType dt, long count, const void *x, void *y);
    void (*backward)(DType dt, long count, const void *y, const void *dy, void *dx, float beta);
} ReluOps;
extern const ReluOps relu_ops_cpu;
extern const ReluOps relu_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

/* avgpool.h: global average pooling over the spatial axes (PyTorch's AdaptiveAvgPool3d(1) then flatten).
 *   x [n][spatial][c] -> y [n][c] = mean over spatial (a fixed-order sum in double)
 *   backward: dx[n][p][c] = dy[n][c] / spatial (beta as conv3d.h)
 * x, y, dy, dx of type dt. CPU: the float32 reference; CUDA: every storage type. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op's sub-table (kernels/backend/ops.def): be->avgpool->... */
enum { AVGPOOL_FORWARD, AVGPOOL_BACKWARD }; /* its functions, for supports() */
typedef struct AvgPoolOps {
    OpHead head;
    void (*forward)(DType dt, int n, long spatial, int c, const void *x, void *y);
    void (*backward)(DType dt, int n, long spatial, int c, const void *dy, void *dx, float beta);
} AvgPoolOps;
extern const AvgPoolOps avgpool_ops_cpu;
extern const AvgPoolOps avgpool_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

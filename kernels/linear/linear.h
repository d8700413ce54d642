/* linear.h: a fully connected layer, as PyTorch's nn.Linear: y = x w^T + b.
 *   x [n][in], y [n][out] of shape.dtype; w [out][in] of shape.dtype (the low-precision copy in mixed precision, as
 *   the convolutions read); b [out] float32, may be NULL
 *   backward_data: dx = dy w (beta as conv3d.h); backward_filter: dw += / = dy^T x, db = sum over n of dy, both
 *   float32 (the master gradients; beta applies to both), summed in a fixed order (double)
 * The heads it serves are small (n up to a few hundred, in and out up to a few thousand): the CPU runs BLAS, CUDA
 * own kernels (one output per thread, no atomics), so training needs no cuBLAS. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, in, out;
    DType dtype; /* storage of x, w, y, dy, dx */
} LinearShape;

/* The op's sub-table (kernels/backend/ops.def): be->linear->... */
enum { LINEAR_FORWARD, LINEAR_BACKWARD_DATA, LINEAR_BACKWARD_FILTER }; /* its functions, for supports() */
typedef struct LinearOps {
    OpHead head;
    void (*forward)(const LinearShape *s, const void *x, const void *w, const float *b, void *y);
    void (*backward_data)(const LinearShape *s, const void *dy, const void *w, void *dx, float beta);
    void (*backward_filter)(const LinearShape *s, const void *x, const void *dy, float *dw, float *db, float beta);
} LinearOps;
extern const LinearOps linear_ops_cpu;
extern const LinearOps linear_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

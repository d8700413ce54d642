/* softmax.h: softmax over the last axis of a [rows][cols] array, as torch.softmax(x, dim=-1):
 *   forward   y[r][j] = exp(x[r][j] - max_r) / sum_j' exp(x[r][j'] - max_r)
 *   backward  dx[r][j] = [beta*dx +] y[r][j] * (dy[r][j] - sum_j' dy[r][j'] y[r][j'])   (from the forward's output)
 * x, y, dy, dx of shape.dtype; every row's sums are float32 terms summed in double in an order fixed by the shape
 * (the CPU: column order; CUDA: per thread, then the block's fixed tree), so the bits do not depend on the thread
 * count or the run. Attention never calls it (attention.h keeps
 * the scores in tiles with an online softmax); it is the op for a softmax a model wants on its own. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    long rows;
    int cols;
    DType dtype; /* storage of x, y, dy, dx */
} SoftmaxShape;

/* The op's sub-table (kernels/backend/ops.def): be->softmax->... */
enum { SOFTMAX_FORWARD, SOFTMAX_BACKWARD }; /* its functions, for supports() */
typedef struct SoftmaxOps {
    OpHead head;
    void (*forward)(const SoftmaxShape *s, const void *x, void *y);
    void (*backward)(const SoftmaxShape *s, const void *y, const void *dy, void *dx, float beta);
} SoftmaxOps;
extern const SoftmaxOps softmax_ops_cpu;
extern const SoftmaxOps softmax_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

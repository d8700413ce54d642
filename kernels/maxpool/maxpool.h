/* maxpool.h: 3-D max pooling over NDHWC activations with a cubic window, as PyTorch's MaxPool3d (padding counts
 * as -infinity; the first maximum in window order wins a tie, which decides where backward sends the gradient).
 *   x   [n][d][h][w][c]          y [n][od][oh][ow][c], od = (d + 2*pad - k)/stride + 1 (likewise oh, ow)
 *   arg [n][od][oh][ow][c]       int32: the winning offset inside the window (kd*k*k + kh*k + kw), saved by forward
 * backward: dx[i] = sum of dy over the outputs whose winner is i (windows overlap when stride < k: gathered per
 * input, not scattered, so no atomics and a fixed order); beta as conv3d.h. CPU: the float32 reference; CUDA: every
 * storage type. */
#pragma once
#include <stdint.h>

#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, d, h, w, c;
    int k, stride, pad;
    int od, oh, ow;
    DType dtype; /* storage of x, y, dy, dx */
} MaxPoolShape;

/* A float32 shape with its output dims (set .dtype after for another storage type). */
MaxPoolShape maxpool_shape(int n, int d, int h, int w, int c, int k, int stride, int pad);

/* The op's sub-table (kernels/backend/ops.def): be->maxpool->... */
enum { MAXPOOL_FORWARD, MAXPOOL_BACKWARD }; /* its functions, for supports() */
typedef struct MaxPoolOps {
    OpHead head;
    void (*forward)(const MaxPoolShape *s, const void *x, void *y, int32_t *arg);
    void (*backward)(const MaxPoolShape *s, const void *dy, const int32_t *arg, void *dx, float beta);
} MaxPoolOps;
extern const MaxPoolOps maxpool_ops_cpu;
extern const MaxPoolOps maxpool_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

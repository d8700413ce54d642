/* pool_window.h: average pooling over non-overlapping windows, as PyTorch's AvgPool2d/AvgPool3d(kernel_size=k,
 * stride=k) without padding, floor mode (DenseNet's transitions: 2x2 on 2-D films, 2x2x2 on volumes).
 *   x [n][d][h][w][c] -> y [n][od][oh][ow][c], od = d / k[0], oh = h / k[1], ow = w / k[2] (floor)
 *   y = the mean of its window (k[0]*k[1]*k[2] inputs; no padding, so every window is whole)
 *   backward: dx[p] = dy[the window holding p] / (k[0]*k[1]*k[2]); positions in no window (the floor's leftover
 *             rows) get 0; beta as conv3d.h (dx = beta*dx + that)
 * Each output's sum runs over its window in a fixed order, so the bits do not depend on threads or blocks. CPU: the
 * float32 reference; CUDA: every storage type, computed in float32. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, d, h, w, c;
    int k[3];       /* window = stride per axis (d, h, w) */
    int od, oh, ow; /* floor(d / k[0]), ... */
    DType dtype;    /* storage of x, y, dy, dx */
} PoolWindowShape;

/* A float32 shape with its output dims (set .dtype after for another storage type). */
PoolWindowShape pool_window_shape(int n, int d, int h, int w, int c, const int k[3]);

/* The op's sub-table (kernels/backend/ops.def): be->pool_window->... */
enum { POOL_WINDOW_FORWARD, POOL_WINDOW_BACKWARD }; /* its functions, for supports() */
typedef struct PoolWindowOps {
    OpHead head;
    void (*forward)(const PoolWindowShape *s, const void *x, void *y);
    void (*backward)(const PoolWindowShape *s, const void *dy, void *dx, float beta);
} PoolWindowOps;
extern const PoolWindowOps pool_window_ops_cpu;
extern const PoolWindowOps pool_window_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

/* upsample.h: nearest-neighbour x2 upsampling in all three spatial axes, NDHWC.
 *   x [n][d][h][w][c]  ->  y [n][2d][2h][2w][c]
 * Backward sums the 8 output gradients that each input voxel fed (in float32). The CPU version is the float32
 * reference; the CUDA one stores x, y, dy, dx as `dt` (dtype.h). */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

void upsample2x_forward_cpu(int n, int d, int h, int w, int c, const float *x, float *y);
/* dx [n][d][h][w][c] = beta*dx + sum of the 2x2x2 block of dy */
void upsample2x_backward_cpu(int n, int d, int h, int w, int c, const float *dy, float *dx, float beta);

/* CUDA (upsample_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void upsample2x_forward_cuda(DType dt, int n, int d, int h, int w, int c, const void *x, void *y);
void upsample2x_backward_cuda(DType dt, int n, int d, int h, int w, int c, const void *dy, void *dx, float beta);

/* The op's sub-table (kernels/backend/ops.def): be->upsample->... */
enum { UPSAMPLE_FORWARD, UPSAMPLE_BACKWARD }; /* its functions, for supports() */
typedef struct UpsampleOps {
    OpHead head;
    /* nearest 2x in D, H and W; n, d, h, w, c are the input's */
    void (*forward)(DType dt, int n, int d, int h, int w, int c, const void *x, void *y);
    void (*backward)(DType dt, int n, int d, int h, int w, int c, const void *dy, void *dx, float beta);
} UpsampleOps;
extern const UpsampleOps upsample_ops_cpu;
extern const UpsampleOps upsample_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

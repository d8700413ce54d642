/* resample.h: trilinear resampling of NDHWC volumes from one grid to another, forward only.
 *   x [n][in0][in1][in2][c]  ->  y [n][out0][out1][out2][c]
 * torch.nn.functional.interpolate(mode="trilinear", align_corners=False): per axis, output cell o reads source
 * coordinate s = in/out * (o + 0.5) - 0.5 (clamped at 0 below), its lower neighbour i0 = (int)s, the upper
 * i1 = i0 + (i0 < in-1) (the last cell repeats) with weight l1 = s - i0; the 8 neighbours are blended along W, then
 * H, then D. The CPU version is the float32 reference (weights and sums in double, rounded once: model_resample_grid
 * carries position tables with it); the CUDA one stores x and y as `dt` (dtype.h). */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* in/out: the grids (d, h, w) of x and y; deterministic, parallel over output rows */
void resample_trilinear_cpu(int n, const int in[3], const int out[3], int c, const float *x, float *y);

/* CUDA (resample_cuda.cu, CUDA builds only): the same semantics on device pointers, enqueued on the CUDA backend's
 * compute stream (backend.h); weights and sums in float, so within a few float32 ulps of the CPU's. */
void resample_trilinear_cuda(DType dt, int n, const int in[3], const int out[3], int c, const void *x, void *y);

/* The op's sub-table (kernels/backend/ops.def): be->resample->... */
enum { RESAMPLE_FORWARD }; /* its functions, for supports() */
typedef struct ResampleOps {
    OpHead head;
    void (*forward)(DType dt, int n, const int in[3], const int out[3], int c, const void *x, void *y);
} ResampleOps;
extern const ResampleOps resample_ops_cpu;
extern const ResampleOps resample_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

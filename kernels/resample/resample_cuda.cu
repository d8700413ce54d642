/* resample_cuda.cu: trilinear resampling (resample.h) on the GPU, NDHWC.
 *   x [n][in0][in1][in2][c]  ->  y [n][out0][out1][out2][c]
 * Storage type T (dtype_cuda.cuh). A grid-stride loop over the output elements, one element per thread: it finds
 * its 8 source voxels and blends them along W, then H, then D, as resample_trilinear_cpu does. The source
 * coordinate is computed in double, so neighbours and weights are the CPU's to double precision (a float coordinate
 * near 255 is only good to about 2^-17, an error the weights would carry); the weights are then rounded to float and
 * the sums run in float: float32 results are within a few ulps of the CPU's double-then-rounded ones. Every output
 * element has exactly one writer: no races. */
#include "common/cuda_check.h"
#include "resample/resample.h"

/* the two grids, passed by value to every thread */
typedef struct {
    int in[3], out[3], c;
    double scale[3]; /* in/out per axis, computed once on the host */
} ResampleGeom;

/* one axis of PyTorch's align_corners=False index map: lower and upper neighbour, the upper one's weight (double) */
__device__ __forceinline__ void rs_axis(int o, int in, double scale, int *i0, int *i1, double *l1) {
    double s = scale * (o + 0.5) - 0.5;
    if (s < 0) s = 0;
    *i0 = (int)s;
    *i1 = *i0 + (*i0 < in - 1);
    *l1 = s - *i0;
}

template <typename T>
__global__ void resample_trilinear_kernel(ResampleGeom g, size_t total, const T *__restrict__ x, T *__restrict__ y) {
    const size_t in_vol = (size_t)g.in[0] * g.in[1] * g.in[2] * g.c;
    for (size_t e = vx_global_thread(); e < total; e += vx_grid_threads()) {
        size_t t = e;
        const int j = (int)(t % g.c); t /= g.c;
        const int ow = (int)(t % g.out[2]); t /= g.out[2];
        const int oh = (int)(t % g.out[1]); t /= g.out[1];
        const int od = (int)(t % g.out[0]);
        const size_t b = t / g.out[0];
        int d[2], h[2], w[2];
        double ld, lh, lw;
        rs_axis(od, g.in[0], g.scale[0], &d[0], &d[1], &ld);
        rs_axis(oh, g.in[1], g.scale[1], &h[0], &h[1], &lh);
        rs_axis(ow, g.in[2], g.scale[2], &w[0], &w[1], &lw);
        const float wd0 = (float)(1 - ld), wd1 = (float)ld, wh0 = (float)(1 - lh), wh1 = (float)lh;
        const float ww0 = (float)(1 - lw), ww1 = (float)lw;
        const T *src = x + b * in_vol + j;
        float v[8]; /* k = 4*(upper in D) + 2*(upper in H) + (upper in W), as the CPU's */
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = vx_f32(src[(((size_t)d[k >> 2] * g.in[1] + h[(k >> 1) & 1]) * g.in[2] + w[k & 1]) * g.c]);
        const float a0 = wh0 * (ww0 * v[0] + ww1 * v[1]) + wh1 * (ww0 * v[2] + ww1 * v[3]);
        const float a1 = wh0 * (ww0 * v[4] + ww1 * v[5]) + wh1 * (ww0 * v[6] + ww1 * v[7]);
        y[e] = vx_to<T>(wd0 * a0 + wd1 * a1);
    }
}

extern "C" void resample_trilinear_cuda(DType dt, int n, const int in[3], const int out[3], int c, const void *x,
                                        void *y) {
    if (n <= 0 || c <= 0 || out[0] <= 0 || out[1] <= 0 || out[2] <= 0) return;
    if (in[0] <= 0 || in[1] <= 0 || in[2] <= 0)
        vx_fatal("resample_trilinear: an empty input grid %dx%dx%d has nothing to resample to %dx%dx%d", in[0], in[1],
                 in[2], out[0], out[1], out[2]);
    ResampleGeom g;
    for (int a = 0; a < 3; a++) {
        g.in[a] = in[a], g.out[a] = out[a];
        g.scale[a] = (double)in[a] / out[a];
    }
    g.c = c;
    const size_t total = (size_t)n * out[0] * out[1] * out[2] * c;
    const unsigned blocks = vx_ew_blocks(total);
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(dt, T, {
        resample_trilinear_kernel<T><<<blocks, VX_THREADS, 0, st>>>(g, total, (const T *)x, (T *)y);
    });
    LAUNCH_CHECK("resample_trilinear_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const ResampleOps resample_ops_cuda = {{op_supports_all_types}, resample_trilinear_cuda};

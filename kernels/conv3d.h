/* conv3d.h: 3D convolution with cubic kernels, NDHWC activations, KTRSC filters.
 *   x  [n][d][h][w][c_in]           input
 *   wt [c_out][k][k][k][c_in]       filter (the layout cuDNN uses for NDHWC)
 *   b  [c_out]                      bias
 *   y  [n][od][oh][ow][c_out]       output, od = (d + 2*pad - k) / stride + 1 (same for oh, ow)
 * Backward functions take beta in {0, 1}: 0 overwrites the output gradient, 1 adds to it (cuDNN's convention),
 * so a tensor read by two layers, or a weight across accumulation micro-batches, sums its gradients. */
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, d, h, w, c_in;
    int c_out, k, stride, pad;
    int od, oh, ow;
} Conv3dShape;

Conv3dShape conv3d_shape(int n, int d, int h, int w, int c_in, int c_out, int k, int stride, int pad);
long conv3d_input_count(const Conv3dShape *s);  /* n*d*h*w*c_in */
long conv3d_output_count(const Conv3dShape *s); /* n*od*oh*ow*c_out */
long conv3d_weight_count(const Conv3dShape *s); /* c_out*k^3*c_in */
double conv3d_forward_flops(const Conv3dShape *s); /* 2*n*od*oh*ow*c_out*k^3*c_in */

/* CPU (float32, OpenMP + BLAS). workspace must hold conv3d_workspace_bytes_cpu(s) bytes. */
size_t conv3d_workspace_bytes_cpu(const Conv3dShape *s);
void conv3d_forward_cpu(const Conv3dShape *s, const float *x, const float *wt, const float *bias, float *y,
                        void *workspace);
void conv3d_backward_data_cpu(const Conv3dShape *s, const float *dy, const float *wt, float *dx, float beta,
                              void *workspace);
/* dbias may be NULL. beta applies to both dw and dbias. */
void conv3d_backward_filter_cpu(const Conv3dShape *s, const float *x, const float *dy, float *dw, float *dbias,
                                float beta, void *workspace);

/* CUDA (kernels/conv3d_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
size_t conv3d_workspace_bytes_cuda(const Conv3dShape *s);
void conv3d_forward_cuda(const Conv3dShape *s, const float *x, const float *wt, const float *bias, float *y,
                         void *workspace);
void conv3d_backward_data_cuda(const Conv3dShape *s, const float *dy, const float *wt, float *dx, float beta,
                               void *workspace);
void conv3d_backward_filter_cuda(const Conv3dShape *s, const float *x, const float *dy, float *dw, float *dbias,
                                 float beta, void *workspace);
/* Builds the shape's cuDNN descriptors the way the convolutions do, checks that cuDNN accepts them and computes
 * the same output dims, and frees them: needs the cuDNN library, not a GPU (tests/unit/test_cudnn_descriptors.c).
 * 1 with the samples per cuDNN call in *chunk_n (tensors beyond 2^31-1 elements run in chunks), or 0 with a
 * one-line reason in why. A CPU-only build: 0 with "this build has no CUDA". */
int conv3d_cuda_describe(const Conv3dShape *s, int *chunk_n, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

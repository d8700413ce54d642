/* conv3d.h: 3D convolution, NDHWC activations, KTRSC filters; kernel size, stride and padding per axis (order d, h,
 * w: MONAI's ResNet stem is k (7,7,7) stride (1,2,2) pad (3,3,3), a depth-1 volume's convs k (1,3,3) pad (0,1,1)).
 *   x  [n][d][h][w][c_in]           input
 *   wt [c_out][kd][kh][kw][c_in]    filter (the layout cuDNN uses for NDHWC), kd = k[0], kh = k[1], kw = k[2]
 *   b  [c_out]                      bias (float32), may be NULL
 *   r  [n][od][oh][ow][c_out]       residual added to the output (the ResBlock's skip, fused), may be NULL
 *   y  [n][od][oh][ow][c_out]       output = conv(x, wt) + b + r,
 *                                   od = (d + 2*pad[0] - k[0]) / stride[0] + 1 (oh, ow likewise with axes 1, 2)
 * Backward functions take beta in {0, 1}: 0 overwrites the output gradient, 1 adds to it (cuDNN's convention),
 * so a tensor read by two layers, or a weight across accumulation micro-batches, sums its gradients. (The residual's
 * gradient is dy itself: the caller adds it where the skip's gradient lives.)
 * Storage: x, wt, r, y, dy, dx are shape.dtype (dtype.h): DT_F32 on the CPU, the float32 reference; DT_BF16 or DT_F16
 * on CUDA run cuDNN's tensor-core kernels with float32 accumulation (x, wt, y all of that type, the weights being the
 * low-precision copy of the float32 master weights). dw and dbias are always float32, the master gradients: cuDNN
 * computes a low-precision dw into the workspace and one pass adds it to dw in float32 (beta as above).
 * bf16 math (the CPU's train.precision bf16): storage float32 throughout, the convolution's inputs rounded to bf16
 * inside the call (oneDNN's avx512_core_bf16 / AMX kernels), as TF32 is a math mode of float32 on the GPU. */
#pragma once
#include <stddef.h>

#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, d, h, w, c_in;
    int c_out;
    int k[3], stride[3], pad[3]; /* per axis: d, h, w */
    int od, oh, ow;
    DType dtype; /* storage of x, wt, r, y, dy, dx */
    int bf16_math; /* CPU, float32 storage only (train.precision bf16 on a CPU with AVX512-BF16 or AMX): may convolve
                      in bf16 (x, wt and dy rounded to bf16, float32 accumulation, float32 y, dx, dw, dbias), where
                      the table measured that faster (conv3d_cpu_select.c); 0 everywhere else */
} Conv3dShape;

/* A float32 shape (set .dtype after for another storage type): cubic (the same k, stride and pad on every axis),
 * or per axis (k, stride, pad in the order d, h, w). */
Conv3dShape conv3d_shape(int n, int d, int h, int w, int c_in, int c_out, int k, int stride, int pad);
Conv3dShape conv3d_shape_3d(int n, int d, int h, int w, int c_in, int c_out, const int k[3], const int stride[3],
                            const int pad[3]);
long conv3d_taps(const Conv3dShape *s);         /* kd*kh*kw */
long conv3d_input_count(const Conv3dShape *s);  /* n*d*h*w*c_in */
long conv3d_output_count(const Conv3dShape *s); /* n*od*oh*ow*c_out */
long conv3d_weight_count(const Conv3dShape *s); /* c_out*kd*kh*kw*c_in */
double conv3d_forward_flops(const Conv3dShape *s); /* 2*n*od*oh*ow*c_out*kd*kh*kw*c_in */
/* "k3 s2" when every axis has the same size and stride (what labels said before per-axis shapes), else per axis:
 * "k1x3x3 s1x2x2"; padding is not part of it (as before). */
void conv3d_kernel_label(const Conv3dShape *s, char *buf, size_t len);

/* CPU (float32, OpenMP + BLAS). workspace must hold conv3d_workspace_bytes_cpu(s) bytes. */
size_t conv3d_workspace_bytes_cpu(const Conv3dShape *s);
void conv3d_forward_cpu(const Conv3dShape *s, const float *x, const float *wt, const float *bias,
                        const float *residual, float *y, void *workspace);
void conv3d_backward_data_cpu(const Conv3dShape *s, const float *dy, const float *wt, float *dx, float beta,
                              void *workspace);
/* dbias [c] = beta*dbias + the sum of dy [P][c] over its P rows (output positions), in double, in a fixed order:
 * the im2col path's bias gradient, and oneDNN's under bf16 math (from the float32 dy, not its bf16 copy). */
void conv3d_bias_grad_cpu(long P, int c, const float *dy, float *dbias, float beta);
/* dbias may be NULL. beta applies to both dw and dbias. */
void conv3d_backward_filter_cpu(const Conv3dShape *s, const float *x, const float *dy, float *dw, float *dbias,
                                float beta, void *workspace);

/* CUDA (kernels/conv3d_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
size_t conv3d_workspace_bytes_cuda(const Conv3dShape *s);
void conv3d_forward_cuda(const Conv3dShape *s, const void *x, const void *wt, const float *bias, const void *residual,
                         void *y, void *workspace);
void conv3d_backward_data_cuda(const Conv3dShape *s, const void *dy, const void *wt, void *dx, float beta,
                               void *workspace);
void conv3d_backward_filter_cuda(const Conv3dShape *s, const void *x, const void *dy, float *dw, float *dbias,
                                 float beta, void *workspace);
/* Frees conv3d_cudnn_plan.cu's cache of descriptors and algorithm choices (backend_cuda_shutdown calls it). */
void conv3d_cuda_cache_clear(void);
/* Whether every direction the model needs has a cuDNN algorithm under the backend's current options (data_grad 0:
 * the backward-data direction is not needed, as for the conv that reads the data); 0 with the plan's one-line
 * reason otherwise. Plans the shape if it is new (needs a started CUDA backend). The device choice calls it so
 * that a shape cuDNN cannot run makes --device auto choose the CPU, with the reason, instead of exiting later. */
int conv3d_cuda_usable(const Conv3dShape *s, int data_grad, char *why, size_t why_len);

/* The descriptors of one of the ways a shape is described to cuDNN, as read back from cuDNN. */
typedef struct {
    char name[48]; /* "NDHWC" or "single channel as NCDHW" */
    int chunk_n;   /* samples per cuDNN call */
    int x_dims[5], x_strides[5], y_dims[5], y_strides[5]; /* {n, c, d, h, w} */
    int w_dims[5];                                        /* {c_out, c_in, kd, kh, kw} */
    int w_nchw;                                           /* filter format: 1 NCHW, 0 NHWC */
    int x_type, w_type;                                   /* cudnnDataType_t of x and of the filter, read back */
} Conv3dCudnnLayout;
/* How many ways the shape is described (tried in order per direction): 2 when c_in or c_out is 1 (the
 * single-channel tensor as NCDHW first, then plain NDHWC), else 1. */
int conv3d_cuda_layouts(const Conv3dShape *s);
/* Builds the shape's descriptors for layout i < conv3d_cuda_layouts(s) the way the convolutions do, checks that
 * cuDNN accepts them and computes the same output dims, reads them back into *out (may be NULL) and frees them:
 * needs the cuDNN library, not a GPU (tests/unit/test_cudnn_descriptors.c). 0 with a one-line reason in why.
 * A CPU-only build: 0 with "this build has no CUDA". */
int conv3d_cuda_describe_layout(const Conv3dShape *s, int i, Conv3dCudnnLayout *out, char *why, size_t why_len);
/* Every layout of the shape described as above; 1 with the samples per cuDNN call in *chunk_n (tensors beyond
 * 2^31-1 elements run in chunks), or 0 with a one-line reason in why. */
int conv3d_cuda_describe(const Conv3dShape *s, int *chunk_n, char *why, size_t why_len);
/* 1 for the cuDNN versions (cudnnGetVersion(): 91002 is 9.10.2) whose 3-D TF32 kernels are known to be broken,
 * 9.10.2 up to 9.15: the convolutions then keep TF32 off whatever train.tf32 says, and the run says so once. */
int conv3d_cuda_tf32_broken(size_t cudnn_version);

/* The op's sub-table (kernels/backend/ops.def): be->conv3d->... */
enum { CONV3D_FORWARD, CONV3D_BACKWARD_DATA, CONV3D_BACKWARD_FILTER }; /* its functions, for supports() */
typedef struct Conv3dOps {
    OpHead head;
    /* bytes of workspace the three directions need for shape s (the planner sizes one shared buffer) */
    size_t (*workspace_bytes)(const Conv3dShape *s);
    void (*forward)(const Conv3dShape *s, const void *x, const void *wt, const float *bias, const void *residual,
                    void *y, void *workspace);
    void (*backward_data)(const Conv3dShape *s, const void *dy, const void *wt, void *dx, float beta, void *workspace);
    void (*backward_filter)(const Conv3dShape *s, const void *x, const void *dy, float *dw, float *dbias, float beta,
                            void *workspace);
    /* 1 when this backend runs shapes with bf16_math (the CPU on AVX512-BF16 or AMX-BF16), else 0 with a one-line
     * reason in why (what the CPU lacks); NULL where bf16 is a storage type instead (CUDA) */
    int (*bf16_math)(char *why, size_t why_len);
} Conv3dOps;
extern const Conv3dOps conv3d_ops_cpu;
extern const Conv3dOps conv3d_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

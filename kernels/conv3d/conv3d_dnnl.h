/* conv3d_dnnl.h: the CPU convolutions of conv3d.h through oneDNN (Debian's libdnnl, the library PyTorch's CPU
 * convolutions run on): the second candidate beside the im2col + sgemm reference of conv3d_cpu.c, which
 * conv3d_cpu_select.c chooses between per shape and direction by measurement. Same semantics, float32, NDHWC
 * activations and KTRSC weights as the caller holds them (oneDNN's "ndhwc" and "odhwi"); oneDNN picks the weights'
 * layout (blocked), into which they are reordered in the workspace at each call (the model's weights change every
 * step, and the reorder is a pass over the weights alone). With the shape's bf16_math, the primitives compute in bf16
 * (float32 in and out, the inputs converted in the workspace). */
#pragma once
#include <stddef.h>

#include "conv3d/conv3d.h"

/* the three directions, as conv3d.h's CONV3D_FORWARD, CONV3D_BACKWARD_DATA, CONV3D_BACKWARD_FILTER */

/* 1 when oneDNN implements direction `dir` of shape s (the primitive is made and cached: later calls find it);
 * 0 with oneDNN's reason in why otherwise. impl (may be NULL) receives oneDNN's name of the implementation it chose
 * ("brg:avx512_core", "jit:avx512_core", "gemm:jit", ...) and the weights' layout. */
int conv3d_dnnl_usable(const Conv3dShape *s, int dir, char *impl, size_t impl_len, char *why, size_t why_len);
/* Workspace bytes direction `dir` of s needs through oneDNN (its scratchpad, the reordered weights, and the
 * temporaries that make beta = 1 and the weight gradient's layout work); 0 when it is not usable. */
size_t conv3d_dnnl_workspace_bytes(const Conv3dShape *s, int dir);

void conv3d_dnnl_forward(const Conv3dShape *s, const float *x, const float *wt, const float *bias,
                         const float *residual, float *y, void *workspace);
void conv3d_dnnl_backward_data(const Conv3dShape *s, const float *dy, const float *wt, float *dx, float beta,
                               void *workspace);
void conv3d_dnnl_backward_filter(const Conv3dShape *s, const float *x, const float *dy, float *dw, float *dbias,
                                 float beta, void *workspace);

/* "oneDNN 2.6.3" and the instruction set its kernels are generated for ("avx512_core_bf16"). */
const char *conv3d_dnnl_version(void);
const char *conv3d_dnnl_isa(void);
/* Frees every cached primitive (tests; the next call makes them again). */
void conv3d_dnnl_cache_clear(void);

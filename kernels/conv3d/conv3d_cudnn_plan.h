/* conv3d_cudnn_plan.h: a shape's cuDNN plan, shared by conv3d_cudnn_plan.cu (which makes and caches plans) and
 * conv3d_cuda.cu (which runs them). nvcc only. A plan holds, per (shape, options): the batch chunking, the
 * descriptors of each way the shape may be described to cuDNN (its layouts), and per direction the layout it runs
 * with, its candidate algorithms in cuDNN's order of preference, or why it has none. Planning never exits: a
 * direction without a usable algorithm is reported when it is called, or earlier by conv3d_cuda_usable (the fit
 * check of --device auto/cuda). */
#pragma once

#include "conv3d/conv3d.h"
#include "common/cuda_check.h"

#define CONV_MAX_CAND 8 /* candidates kept per direction */

enum { DIR_FWD = 0, DIR_DATA = 1, DIR_FILTER = 2 };
extern const char *const CONV_DIR_NAME[3];

/* How the tensors are described (conv3d_cudnn_plan.cu says why there are two). */
enum { LAYOUT_NDHWC = 0, LAYOUT_C1_NCDHW = 1, CONV_N_LAYOUTS = 2 };

typedef struct {
    int algo; /* cudnnConvolutionFwdAlgo_t / BwdDataAlgo_t / BwdFilterAlgo_t */
    cudnnMathType_t math;
    cudnnDeterminism_t determinism;
    size_t ws;
} ConvCand;

typedef struct {
    int described; /* cuDNN accepted every descriptor below */
    cudnnTensorDescriptor_t xd, yd; /* chunk_n samples */
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd[3]; /* one per direction: each carries its algorithm's math type */
} ConvDesc;

typedef struct {
    Conv3dShape shape; /* key, with the two requested options */
    int deterministic, allow_tf32;
    int tf32;                /* in effect: allow_tf32 unless the loaded cuDNN's 3-D TF32 kernels are known broken */
    int chunk_n;             /* samples per cuDNN call; divides shape.n */
    size_t x_chunk, y_chunk; /* elements of x and y per chunk */
    int n_layouts, order[CONV_N_LAYOUTS]; /* the layouts this shape is tried with, in order */
    ConvDesc desc[CONV_N_LAYOUTS];        /* indexed by LAYOUT_* */
    int layout[3];                        /* per direction: the layout its candidates run with */
    ConvCand cand[3][CONV_MAX_CAND];
    int ncand[3], cur[3];
    char *unusable[3]; /* when ncand[dir] == 0: why, reported on the direction's first call */
    size_t ws_bytes;   /* cuDNN's part of the workspace: max over the directions' first candidates (the workspace
                          conv3d_workspace_bytes_cuda reports adds conv_lp_dw_bytes) */
} ConvPlan;

/* The plan of a shape under the backend's current options, made on first use and cached until
 * conv3d_cuda_cache_clear. Needs a started backend (the cuDNN handle). */
ConvPlan *conv_plan_get(const Conv3dShape *s);

/* Low-precision storage: cuDNN's weight gradient is of the storage type too, so backward-filter computes it into
 * the workspace after cuDNN's own (at offset conv_lp_dw_offset) and adds it to the float32 dw from there. */
static inline size_t conv_lp_dw_offset(const ConvPlan *p) { return (p->ws_bytes + 255) / 256 * 256; }
static inline size_t conv_lp_dw_bytes(const ConvPlan *p) {
    if (p->shape.dtype == DT_F32) return 0;
    const size_t w = (size_t)conv3d_weight_count(&p->shape);
    return conv_lp_dw_offset(p) - p->ws_bytes + (w * dtype_size(p->shape.dtype) + 255) / 256 * 256;
}

/* The descriptors direction dir runs with. */
static inline ConvDesc *conv_desc(ConvPlan *p, int dir) { return &p->desc[p->layout[dir]]; }

void conv_shape_str(const Conv3dShape *s, char *buf, size_t len);

/* VX_CONV_LOG=1: one stderr line per direction when a plan is made, and one when a refused algorithm gives way
 * to the next candidate at run time. */
int conv_log_on(void);
void conv_log_switch(const ConvPlan *p, int dir, int from, int to, cudnnStatus_t why);

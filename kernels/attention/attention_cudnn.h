/* attention_cudnn.h: what attention's three CUDA files share (nvcc only):
 *   attention_cuda.cu          the own SIMT kernels (attention_own_*) and the op table, which asks attention_cudnn.cu
 *                              first whether cuDNN's fused attention takes the call
 *   attention_cudnn_graph.cu   the operation graph of each direction as cuDNN backend descriptors (AttGraph)
 *   attention_cudnn.cu         per (shape, direction) plans: heuristics, execution plan, the first-call check
 *                              against the own kernel, VX_ATTN_CUDA / VX_ATTN_LOG
 * The rules that need no cuDNN (which shapes the graph may take, the comparison's tolerance) are plain C, in
 * attention_cudnn_rules.c, so CPU-only builds test them too. The graph's own types are in attention_cudnn_graph.h:
 * this header stays within what the host emulation (tests/tools/cuda_emu) provides, which compiles
 * attention_cuda.cu with stubs of the three attention_cudnn_* functions that always answer "own". */
#pragma once

#include "attention/attention.h"
#include "common/cuda_check.h"

/* The own kernels' launchers (attention_cuda.cu's attention_own_*), shape already checked. attention_cuda.cu hands
 * them to attention_cudnn.cu for the first call's check as pointers, so the two files do not call each other in a
 * circle (tests/tools/check_layers.py). */
typedef void (*AttOwnForward)(const AttentionShape *s, const void *q, const void *k, const void *v, void *o,
                              float *lse);
typedef void (*AttOwnBackward)(const AttentionShape *s, const void *q, const void *k, const void *v, const void *o,
                               const void *dout, const float *lse, float *delta, void *dq, void *dk, void *dv,
                               float beta);

/* attention_cudnn.cu: 1 when cuDNN's fused attention ran the call (after the first call's check, which runs `own`
 * too), 0 when the own kernel is to run it. May exit 2 under VX_ATTN_CUDA=cudnn (see there). */
int attention_cudnn_forward(const AttentionShape *s, const void *q, const void *k, const void *v, void *o, float *lse,
                            void *workspace, AttOwnForward own);
int attention_cudnn_backward(const AttentionShape *s, const void *q, const void *k, const void *v, const void *o,
                             const void *dout, const float *lse, float *delta, void *dq, void *dk, void *dv,
                             float beta, void *workspace, AttOwnBackward own);
size_t attention_cudnn_workspace_bytes(const AttentionShape *s);

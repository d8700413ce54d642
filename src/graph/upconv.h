/* upconv.h: the autoencoder decoder's nearest x2 upsampling and the 3x3x3 convolution after it (decoder.up.L.upsample)
 * as one node, OP_UPCONV, built with train.fuse: one 2x2x2 convolution at the input's resolution with 8*c_out
 * outputs, one group per phase of the output grid, then a shuffle into the upsampled output
 * (kernels/upconv_phase/upconv_phase.h has the algebra). 3.4x fewer FLOPs than convolving the upsampled volume, and
 * neither the upsampled input nor its gradient exists. The parameters stay the 3x3x3 convolution's (names, shapes,
 * checkpoints, exports unchanged); around the phase convolution, in buffers of their own (plan items):
 *   forward   phase weights (model dtype) and bias (float32) written from the float32 master, the phase convolution
 *             into z [n][d+1][h+1][w+1][8*c_out], z shuffled into the output
 *   backward  dy unshuffled into dz, the phase convolution's filter gradient (float32) folded into the 3x3x3
 *             weights' and bias's (param_beta), its data gradient into dx (dx_beta)
 * Results equal the unfused pair's up to float32 summation order (tests: test_memory_savers, test_pytorch). */
#pragma once
#include "graph/model.h"

/* Node nd (OP_UPCONV) at time i of a timeline of T (model_build's plan_memory): its buffers. */
void upconv_plan(Model *m, Node *nd, int i, int T);
/* Its forward (x, y: its tensors as this pass reads and writes them) and backward (dx NULL when the input has no
 * gradient). Enqueue device work only. */
void upconv_forward(Model *m, const Node *nd, const void *x, void *y, void *ws);
void upconv_backward(Model *m, const Node *nd, const void *x, const void *dy, void *dx, float param_beta, void *ws);

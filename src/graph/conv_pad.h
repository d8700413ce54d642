/* conv_pad.h: the channel rule of 16-bit convolutions. cuDNN's bf16/fp16 NDHWC kernels want channel counts that are
 * multiples of 8; a 3-D convolution with 1, 3 or 4 channels on one side (decoder.conv_out's single output,
 * encoder.mu/logvar's latent outputs, decoder.conv_in's latent inputs) may have no legacy cuDNN algorithm at all,
 * in particular no deterministic weight-gradient one, and then every 16-bit run would fail (issue 20 items 5, 10).
 *
 * The rule, decided once for every convolution as the graph is built: in bf16/fp16 each side of a convolution
 * whose channel count is not a multiple of 8 runs on channels zero-padded to the next multiple (and in float32 too
 * when ModelOptions.pad_all_types asks: the tests' way to check on the CPU that padding changes no result). The
 * node's tensors keep their real channels; around the convolution, in buffers of its own (plan items):
 *   forward   weights [c_out'][k][k][k][c_in'] written from the float32 master (zero rows and columns), the bias
 *             zero-padded to c_out', the input padded to c_in' when the tensor has fewer, the output written padded
 *             and sliced into the real one (then the fused residual added)
 *   backward  the output gradient zero-padded, cuDNN's padded weight and bias gradients sliced into the real ones
 *             (param_beta), the input gradient computed padded and sliced into the real one (dx_beta)
 * Parameters, checkpoints, FLOP counts and the node list stay those of the unpadded model (mirroring
 * model.pad_input_channels, which pads encoder.conv_in's input in the cast node before it and so is left to that
 * key here: with it off conv_in reads its single channel as asked). The zero channels add nothing to any real
 * output or gradient, so results equal the unpadded model's up to summation order. */
#pragma once
#include "graph/model.h"

/* The channel count c is stored with in a convolution of storage type dt: the next multiple of 8 in bf16/fp16 (in
 * every type with all), else c. */
int conv_pad_channels(DType dt, int c, int all);
/* The rule on the shape of a convolution being built (s->dtype set): its c_in (unless input_is_data: conv_in's
 * input, which model.pad_input_channels pads) and c_out. */
void conv_pad_shape(const Model *m, Conv3dShape *s, int input_is_data);
/* Conv node nd at time i of a timeline of T (model_build's plan_memory): its padded buffers, when its shape differs
 * from its parameters or tensors (pad_w >= 0 then); the fields stay -1 otherwise. */
void conv_pad_plan(Model *m, Node *nd, int i, int T);
/* A padded node's forward (x, y: its tensors as this pass reads and writes them; residual: the fused skip or NULL)
 * and backward (x as backward reads it; dx NULL when the input has no gradient: the fused residual's gradient is
 * the caller's, as unpadded). Enqueue device work only. */
void conv_pad_forward(Model *m, const Node *nd, const void *x, void *y, const void *residual, void *ws);
void conv_pad_backward(Model *m, const Node *nd, const void *x, const void *dy, void *dx, float param_beta, void *ws);

/* model_exec_diff.h: vit3d_diffusion's own nodes (OP_QSAMPLE, OP_DRR, OP_TIMESTEP, OP_MODULATE, OP_GATE), its loss
 * (the diffusion regression plus the projection loss) and its per-sample timesteps, which model_exec.c hands to
 * model_exec_diff.c; internal to src/graph. */
#pragma once
#include <stdint.h>

#include "diffusion/diffusion.h"
#include "graph/model.h"

/* x, x1, x2: the node's inputs in[0..2] as this pass reads them (NULL where absent), y its output */
void diff_forward_node(Model *m, const Node *nd, const void *x, const void *x1, const void *x2, void *y, int train);
/* inputs as backward reads them; dx* NULL where an input has no gradient */
void diff_backward_node(Model *m, const Node *nd, const void *x, const void *x1, const void *x2, void *dx, void *dx1,
                        void *dx2, const void *dy);
/* The diffusion loss of the last forward into the loss scalars (diffusion, projection), and its gradient into dpred
 * (NULL: the loss only); grad_scale and loss_scale as loss.h's. */
void diff_loss(Model *m, void *dpred, float grad_scale, const float *loss_scale);
/* The micro-batch's timesteps, drawn per global sample index (a pure function of (seed, index), so a resumed run or
 * another world size draws the same), their alpha, sigma and loss weights, written to the coefficients' plan item. */
void diff_set_first_sample(Model *m, uint64_t first_sample);
/* The same for given timesteps (sampling: every sample at t[b]); n = m->batch entries. */
void diff_set_timesteps(Model *m, const int *t);
/* Both views of every sample of a volume batch vol [n][D][H][W] (backend memory, of type dt) into img
 * [n][2][img][img] (float32, backend memory) with the model's DRR: what OP_DRR and the projection loss render. */
void diff_render_views(const Model *m, const void *vol, DType dt, float *img);
/* The shape of the diffusion ops for model m (its x_t, prediction and data scale). */
DiffusionShape diff_shape_of(const Model *m);

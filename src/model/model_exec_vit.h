/* model_exec_vit.h: the forward and backward of vit3d's nodes (OP_LAYERNORM, OP_GEMM, OP_ATTENTION, OP_POS,
 * OP_UNPATCH), which model_exec.c's node loop hands to model_exec_vit.c; internal to src/model. */
#pragma once
#include "model/model.h"

/* x: the node's input as this pass reads it (the forward's copy, or a checkpointed block's rerun copy), y its output */
void vit_forward_node(Model *m, const Node *nd, const void *x, void *y);
/* x as backward reads it; dx NULL when the input has no gradient; param_beta as model_backward's */
void vit_backward_node(Model *m, const Node *nd, const void *x, void *dx, const void *dy, float param_beta);

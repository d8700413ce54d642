/* model_exec_vit.h: the forward and backward of vit3d's nodes (OP_LAYERNORM, OP_GEMM, OP_ATTENTION, OP_POS,
 * OP_UNPATCH), which model_exec.c's node loop hands to model_exec_vit.c; internal to src/graph. */
#pragma once
#include "graph/model.h"

/* x, x1: the node's inputs in[0], in[1] as this pass reads them (the forward's copy, or a checkpointed block's rerun
 * copy; x1 NULL without in[1]), y its output */
void vit_forward_node(Model *m, const Node *nd, const void *x, const void *x1, void *y);
/* x, x1 as backward reads them; dx, dx1 NULL when that input has no gradient; param_beta as model_backward's */
void vit_backward_node(Model *m, const Node *nd, const void *x, const void *x1, void *dx, void *dx1, const void *dy,
                       float param_beta);

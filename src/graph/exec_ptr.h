/* exec_ptr.h: where the executor finds a node's memory: plan items in the arena, tensors (the forward's copy, the
 * one backward reads, the gradient), parameter views in a flat buffer, and the weights as the ops read them (the
 * low-precision copy in mixed precision). Static inline, so model_exec.c and model_exec_vit.c share them without
 * calling each other; internal to src/graph. */
#pragma once
#include "graph/model.h"

static inline char *exec_item(const Model *m, int item) { return m->arena + m->plan.items[item].offset; }
/* tensor t's first element in plan item `item` (a view's: its first channel in the buffer it views, model.h) */
static inline void *exec_tensor_at(const Model *m, int t, int item) {
    const Tensor *tn = &m->tensors[t];
    return exec_item(m, item) + (size_t)tn->c_at * dtype_size(tn->dtype);
}
static inline void *exec_act(const Model *m, int t) { return exec_tensor_at(m, t, m->tensors[t].act); }
/* the copy backward reads: the same buffer, or the one a checkpointed block's recomputation writes */
static inline void *exec_act_bwd(const Model *m, int t) { return exec_tensor_at(m, t, m->tensors[t].act_bwd); }
static inline void *exec_grad(const Model *m, int t) {
    return m->tensors[t].grad < 0 ? NULL : exec_tensor_at(m, t, m->tensors[t].grad);
}

static inline float *exec_param(const Model *m, float *flat, int view) {
    return view < 0 ? NULL : flat + m->params[view].offset;
}
/* where backward writes a parameter's gradient: its place in the flat layout, or its ZeRO-2 staging slot */
static inline float *exec_param_grad(const Model *m, int view) {
    return view < 0 ? NULL : m->grad + m->params[view].grad_offset;
}
/* a parameter as the ops read it in the activations' type: the low-precision copy in mixed precision */
static inline const void *exec_weight(const Model *m, int view) {
    if (!m->param_lp) return exec_param(m, m->param, view);
    return (const char *)m->param_lp + (size_t)m->params[view].offset * dtype_size(m->dtype);
}

/* model_exec_vit.c: forward and backward of the transformer's nodes (model_exec_vit.h), through the op tables:
 *   OP_LAYERNORM  layernorm over the last axis (gamma, beta: float32 parameters), mean and rstd in `stats`
 *   OP_GEMM       a Linear over rows, y = x W^T + b (gemm.h), optionally GELU (erf, as torch.nn.GELU) fused as the
 *                 epilogue with the pre-activation saved in `aux`; backward: GELU's gradient into the scratch `arg`,
 *                 then dW = dpre^T x (float32, param_beta), db (bias_grad), dx = dpre W
 *   OP_ATTENTION  self-attention over a packed [rows][3*hidden] QKV (q, k, v column blocks of hidden each), or
 *                 across (in[1]): queries [rows][hidden] from in[0], keys and values packed [rows'][2*hidden] in
 *                 in[1]; lse and delta in `stats`; its backward writes the packed gradients (dx_beta[0] for all
 *                 blocks: each input feeds only this node, so both are 0); aux, where planned, what the backend
 *                 saves from the forward for the backward (attention.h's saved_bytes: the CPU's probabilities)
 *   OP_POS        y = x + pos[token] (a learned [tokens][hidden] parameter, broadcast over the batch); dpos is the
 *                 batch's sum of dy (gemm's bias_grad over n rows of tokens*hidden)
 *   OP_UNPATCH    tokens [rows][p^3 c] to the volume (patch.h); backward patchifies the volume's gradient
 * Weights are read in the activations' type (exec_weight), parameter gradients written in float32. */
#include "graph/model_exec_vit.h"

#include "core/util.h"
#include "elementwise/elementwise.h"
#include "gelu/gelu.h"
#include "graph/exec_ptr.h"

static GeluShape gelu_of(const Node *nd) {
    return (GeluShape){.count = (long)nd->gemm.m * nd->gemm.n, .kind = GELU_ERF, .dtype = nd->gemm.dtype};
}

/* where the keys and values start: in the packed QKV after the queries, or in in[1]'s packed KV */
static const char *keys_of(const Node *nd, const void *x, const void *x1) {
    const size_t block = (size_t)nd->att.heads * nd->att.d * dtype_size(nd->att.dtype);
    return x1 ? (const char *)x1 : (const char *)x + block;
}

void vit_forward_node(Model *m, const Node *nd, const void *x, const void *x1, void *y) {
    const Backend *be = m->be;
    switch (nd->kind) {
    case OP_LAYERNORM: {
        float *mean = (float *)exec_item(m, nd->stats), *rstd = mean + nd->ln.rows;
        be->layernorm->forward(&nd->ln, x, exec_param(m, m->param, nd->weight), exec_param(m, m->param, nd->bias), y,
                               mean, rstd);
        break;
    }
    case OP_GEMM:
        be->gemm->matmul(&nd->gemm, x, exec_weight(m, nd->weight), exec_param(m, m->param, nd->bias), y,
                         nd->aux >= 0 ? exec_item(m, nd->aux) : NULL, 0.0f);
        break;
    case OP_ATTENTION: {
        const size_t block = (size_t)nd->att.heads * nd->att.d * dtype_size(nd->att.dtype);
        const char *k = keys_of(nd, x, x1);
        be->attention->forward(&nd->att, x, k, k + block, y, (float *)exec_item(m, nd->stats),
                               nd->aux >= 0 ? exec_item(m, nd->aux) : NULL, exec_item(m, m->workspace_item));
        break;
    }
    case OP_POS: {
        const Tensor *t = &m->tensors[nd->out];
        const long per = t->count / t->dims.n;
        const size_t bytes = (size_t)per * dtype_size(t->dtype);
        be->elementwise->accumulate(t->dtype, t->count, x, y, 0.0f);
        for (int b = 0; b < t->dims.n; b++)
            be->elementwise->accumulate(t->dtype, per, exec_weight(m, nd->weight), (char *)y + b * bytes, 1.0f);
        break;
    }
    case OP_UNPATCH: be->patch->to_volume(&nd->patch, x, y, 0.0f); break;
    default: vx_fatal("vit_forward_node: node %s is not a transformer node", nd->name);
    }
}

void vit_backward_node(Model *m, const Node *nd, const void *x, const void *x1, void *dx, void *dx1, const void *dy,
                       float param_beta) {
    const Backend *be = m->be;
    switch (nd->kind) {
    case OP_LAYERNORM: {
        const float *mean = (const float *)exec_item(m, nd->stats), *rstd = mean + nd->ln.rows;
        be->layernorm->backward(&nd->ln, dy, x, exec_param(m, m->param, nd->weight), mean, rstd, dx,
                                exec_param_grad(m, nd->weight), exec_param_grad(m, nd->bias), nd->dx_beta[0],
                                param_beta);
        break;
    }
    case OP_GEMM: {
        const GemmShape *f = &nd->gemm;
        const void *dpre = dy;
        if (nd->aux >= 0) { /* through GELU first: dpre = dy * gelu'(pre) */
            const GeluShape g = gelu_of(nd);
            be->gelu->backward(&g, exec_item(m, nd->aux), dy, exec_item(m, nd->arg), 0.0f);
            dpre = exec_item(m, nd->arg);
        }
        /* dW [out][in] (+)= dpre^T x: m out, n in, k rows, float32 into the master gradient */
        const GemmShape dw = {.batch = 1, .m = f->n, .n = f->k, .k = f->m, .trans_a = 1, .stride_a = (long)f->m * f->n,
                              .stride_b = (long)f->m * f->k, .stride_c = (long)f->n * f->k, .alpha = 1.0f,
                              .c_f32 = 1, .dtype = f->dtype, .bf16_math = f->bf16_math};
        be->gemm->matmul(&dw, dpre, x, NULL, exec_param_grad(m, nd->weight), NULL, param_beta);
        if (nd->bias >= 0) be->gemm->bias_grad(f->dtype, f->m, f->n, dpre, exec_param_grad(m, nd->bias), param_beta);
        if (dx) { /* dx [rows][in] = dpre W */
            const GemmShape dd = {.batch = 1, .m = f->m, .n = f->k, .k = f->n, .stride_a = (long)f->m * f->n,
                                  .stride_b = (long)f->n * f->k, .stride_c = (long)f->m * f->k, .alpha = 1.0f,
                                  .dtype = f->dtype, .sample_rows = f->sample_rows,
                                  .bf16_math = f->bf16_math};
            be->gemm->matmul(&dd, dpre, exec_weight(m, nd->weight), NULL, dx, NULL, nd->dx_beta[0]);
        }
        break;
    }
    case OP_ATTENTION: {
        const size_t block = (size_t)nd->att.heads * nd->att.d * dtype_size(nd->att.dtype);
        const char *k = keys_of(nd, x, x1);
        char *dk = x1 ? (char *)dx1 : (char *)dx + block;
        VX_CHECK(dx && dk && (!x1 || nd->dx_beta[1] == nd->dx_beta[0]),
                 "attention %s: its inputs need gradients written alike", nd->name);
        float *lse = (float *)exec_item(m, nd->stats), *delta = lse + attention_rows_padded(&nd->att);
        be->attention->backward(&nd->att, x, k, k + block, exec_act_bwd(m, nd->out), dy, lse, delta,
                                nd->aux >= 0 ? exec_item(m, nd->aux) : NULL, dx, dk, dk + block, nd->dx_beta[0],
                                exec_item(m, m->workspace_item));
        break;
    }
    case OP_POS: {
        const Tensor *t = &m->tensors[nd->out];
        if (dx) be->elementwise->accumulate(t->dtype, t->count, dy, dx, nd->dx_beta[0]);
        be->gemm->bias_grad(t->dtype, t->dims.n, (int)(t->count / t->dims.n), dy, exec_param_grad(m, nd->weight),
                            param_beta);
        break;
    }
    case OP_UNPATCH: be->patch->to_tokens(&nd->patch, dy, dx, nd->dx_beta[0]); break;
    default: vx_fatal("vit_backward_node: node %s is not a transformer node", nd->name);
    }
}

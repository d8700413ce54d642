/* attention_cudnn_graph.h: the cuDNN operation graph of attention (attention_cudnn_graph.cu builds it,
 * attention_cudnn.cu plans and runs it). nvcc only, with the real cuDNN headers. */
#pragma once

#include "attention/attention_cudnn.h"

enum { ATT_FWD = 0, ATT_BWD = 1 };

/* the non-virtual tensors' UIDs: what the variant pack binds to pointers */
enum {
    ATT_UID_Q = 1,
    ATT_UID_K,       /* described as K^T: [b, h, d, tk] */
    ATT_UID_V,       /* forward [b, h, tk, d]; backward as V^T [b, h, d, tk] */
    ATT_UID_O,
    ATT_UID_STATS,   /* lse [b, h, tq, 1] float32 */
    ATT_UID_DO,
    ATT_UID_DQ,
    ATT_UID_DK,
    ATT_UID_DV,
    ATT_UID_SCALE,   /* the score scale, by value (host float) */
    ATT_UID_ONE,     /* 1.0f by value (the backward's dropout-free "scale_dropout_inv") */
    ATT_UID_SUM,     /* delta = rowsum(dO * O) [b, h, tq, 1] float32: the caller's delta buffer */
    ATT_UID_DQ_ACC,  /* backward, non-deterministic form: dQ accumulated in float32 [b, h, tq, d] in the workspace */
    ATT_UID_VIRTUAL0 = 100
};

#define ATT_GRAPH_MAX_DESC 128
#define ATT_GRAPH_MAX_OPS 24

typedef struct {
    cudnnBackendDescriptor_t all[ATT_GRAPH_MAX_DESC]; /* every descriptor made (tensors, descs, ops), freed together */
    int n_all;
    cudnnBackendDescriptor_t ops[ATT_GRAPH_MAX_OPS]; /* the operations, in the order cudnn-frontend lowers them */
    int n_ops;
    int64_t next_uid;
    int dq_accum;          /* backward: dQ through the float32 accumulator (else written directly) */
    size_t dq_accum_bytes; /* its bytes at the start of the workspace (0 without it) */
    char why[512];         /* the failing call when att_graph_build returns 0 */
} AttGraph;

/* Builds and finalizes every tensor and operation descriptor of direction dir for shape s (cuDNN's library only: no
 * handle, no GPU): 1, or 0 with g->why (everything made so far is freed). dq_accum picks the backward's form. */
int att_graph_build(AttGraph *g, const AttentionShape *s, int dir, int dq_accum);
void att_graph_free(AttGraph *g);


/* attention.h: scaled dot-product attention, forward and backward, that never holds the [tq][tk] score matrix:
 * keys are visited in tiles with an online softmax (FlashAttention's scheme), so memory is linear in the tokens and
 * 32768 tokens fit where the scores alone would take 4 GiB per head.
 *   per batch entry b and head h, with q_i, k_j, v_j, o_i the head's d-vectors of query i and key j:
 *     s_ij = scale * q_i . k_j          p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij)
 *     o_i  = sum_j p_ij v_j
 *   backward, from dO (the gradient of o) and the forward's lse:
 *     delta_i = dO_i . o_i              ds_ij = p_ij (dO_i . v_j - delta_i)
 *     dq_i = scale sum_j ds_ij k_j      dk_j = scale sum_i ds_ij q_i      dv_j = sum_i p_ij dO_i
 * Self-attention has tq == tk; cross-attention (volume tokens to view tokens) any tq, tk >= 1.
 * Layout, row-major: a tensor is [batch][tokens][ld] elements, head h's vector at columns [h*d, h*d + d) of its
 * token's row, so a Linear's output [batch*tokens][heads*d] is read in place (ld = heads*d), and so is one packed
 * [.. ][3*heads*d] QKV projection (q, k, v = qkv, qkv + heads*d, qkv + 2*heads*d, ld 3*heads*d). dO shares o's ld,
 * dq dk dv their tensor's, so the gradient of a packed QKV is packed too.
 * Storage: q k v o dO dq dk dv of shape.dtype; lse [batch][heads][tq] float32 (written by the forward, read by the
 * backward); delta [batch][heads][tq] float32, the backward's own workspace (the caller's memory, linear in tokens).
 * beta (backward): 0 overwrites dq dk dv without reading them (they may hold NaN), 1 adds to them; for each the
 * sums are formed whole first, then added once.
 * Workspace: both directions take `workspace`, workspace_bytes(s) bytes of the backend's memory (the model plans one
 * buffer shared with the convolutions'); the CPU's backward takes it for dq's per-key-block partials up to 64 MiB
 * (attention_cpu.c; NULL: the separate dq pass), the CUDA backend's own kernels take none, cuDNN's fused attention
 * needs some (attention_cudnn.cu). NULL is allowed where workspace_bytes said 0.
 * Saved: `saved`, saved_bytes(s) bytes the model keeps for the node from its forward to its backward (NULL where
 * that is 0, or where the caller keeps nothing: the backward then recomputes). The CPU keeps the forward's
 * probabilities P there while they are one tile of keys and at most ATT_SAVED_MAX bytes (attention_cpu.c; laid out
 * as its path reads them: [batch][heads][tq][tk], or transposed per block of 64 queries on the tile path), and its
 * backward reads P instead of recomputing S = scale Q K^T and exp(S - lse) per tile.
 * Math in float32 whatever the storage (scores, exponentials, accumulators); a sum's order is fixed by the shape
 * (CPU: jobs of query or key blocks, each product inside a job single-threaded; CUDA: one thread group per row, keys in
 * order), so the bits do not depend on the thread count, and no atomics are used: dk dv are one pass over the
 * queries per key block, dq one pass over the keys per query block (the scores are computed twice in backward, or
 * read from the saved P), or on the CPU within its workspace dq's partials of each key block from the dk dv pass,
 * summed in key-block order. */
#pragma once
#include <math.h>
#include <stddef.h>

#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int batch, heads;
    int tq, tk; /* query and key tokens (tk >= 1) */
    int d;      /* head dim; the CUDA kernels take d <= ATTN_CUDA_MAX_D */
    int ld_q, ld_k, ld_v, ld_o; /* elements between consecutive tokens' rows, each >= heads*d */
    float scale;                /* usually 1/sqrt(d) */
    DType dtype;                /* storage of q k v o dO dq dk dv */
} AttentionShape;

#define ATTN_CUDA_MAX_D 128

/* The op's sub-table (kernels/backend/ops.def): be->attention->... */
enum { ATTENTION_FORWARD, ATTENTION_BACKWARD }; /* its functions, for supports() */
typedef struct AttentionOps {
    OpHead head;
    /* bytes of workspace the two directions need for shape s (the larger; the planner sizes one shared buffer) */
    size_t (*workspace_bytes)(const AttentionShape *s);
    void (*forward)(const AttentionShape *s, const void *q, const void *k, const void *v, void *o, float *lse,
                    void *saved, void *workspace);
    void (*backward)(const AttentionShape *s, const void *q, const void *k, const void *v, const void *o,
                     const void *dout, const float *lse, float *delta, const void *saved, void *dq, void *dk, void *dv,
                     float beta, void *workspace);
    /* which implementation ran the last call of function fn (ATTENTION_FORWARD or _BACKWARD): the CUDA backend's
     * "cudnn" or "own"; NULL where the backend has one (the CPU) */
    const char *(*last_path)(int fn);
    /* bytes the forward saves for the backward for shape s (see Saved above); NULL: none */
    size_t (*saved_bytes)(const AttentionShape *s);
} AttentionOps;
extern const AttentionOps attention_ops_cpu;
extern const AttentionOps attention_ops_cuda; /* CUDA builds only */

/* ---- the CUDA backend's choice between cuDNN's fused attention and the own kernel (attention_cudnn.cu) ------ */

/* "" when direction `backward` of shape s is within what the cuDNN graph is built for and the loaded cuDNN
 * (cudnn_version as cudnnGetVersion() gives it) has no known bug for, else why not, one line (attention_cudnn_rules.c;
 * plain C, no cuDNN needed). The device's compute capability and the engines on offer are asked at planning. */
const char *attention_cudnn_shape_rule(const AttentionShape *s, int backward, size_t cudnn_version);
/* The first call's check: the largest accepted max|cuDNN - own| / max|own| per output, for storage dt. */
double attention_cudnn_tolerance(DType dt);
/* Builds and finalizes every tensor and operation descriptor of the direction's cuDNN graph the way the CUDA
 * backend does (dq_accum: the backward's float32 dQ accumulator form), then frees them: needs the cuDNN library,
 * not a GPU (tests/unit/test_attention_cudnn.c). 1 with the operation count in *n_ops, or 0 with the refused call
 * in why. A CPU-only build: 0 with "this build has no CUDA". */
int attention_cuda_describe(const AttentionShape *s, int backward, int dq_accum, int *n_ops, char *why,
                            size_t why_len);
/* Frees the plans (backend_cuda_shutdown calls it). */
void attention_cuda_cache_clear(void);

/* A packed shape: every tensor's rows exactly heads*d long, scale 1/sqrt(d). */
static inline AttentionShape attention_shape(int batch, int heads, int tq, int tk, int d, DType dt) {
    const int ld = heads * d;
    return (AttentionShape){batch, heads, tq, tk, d, ld, ld, ld, ld, 1.0f / sqrtf((float)d), dt};
}
/* lse's rows (batch*heads*tq) rounded up to a multiple of 4: a delta placed after lse starts 16-byte aligned */
static inline size_t attention_rows_padded(const AttentionShape *s) {
    return ((size_t)s->batch * s->heads * s->tq + 3) / 4 * 4;
}
/* "" when s is valid, else what is wrong (one line; both backends' check) */
static inline const char *attention_shape_error(const AttentionShape *s) {
    if (s->batch < 0 || s->heads < 1 || s->tq < 0 || s->d < 1) return "negative sizes, or no heads or head dim";
    if (s->tk < 1) return "no keys (tk < 1): a softmax over nothing";
    const long row = (long)s->heads * s->d;
    if (s->ld_q < row || s->ld_k < row || s->ld_v < row || s->ld_o < row) return "a row stride below heads*d";
    if (!(s->scale == s->scale)) return "scale is NaN";
    return "";
}

#ifdef __cplusplus
}
#endif

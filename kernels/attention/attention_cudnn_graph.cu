/* attention_cudnn_graph.cu: attention (attention.h) as a cuDNN operation graph, built with cuDNN's backend API
 * directly (no cudnn_frontend here, nothing vendored): the pattern of unmasked, dropout-free scaled dot-product
 * attention that cudnn-frontend's composite SDPA nodes lower to for cuDNN before 9.21 (its "CompositeSDPANode" and
 * "CompositeSDPABackwardNode", softmax as CompositeSoftmaxNode), which cuDNN's fused flash-attention engines
 * recognise. Written from those facts (operation order, tensor shapes and types), not from its code.
 *
 * Our memory, described in place (no copies): a tensor [batch][tokens][ld] with head h at columns [h*d, h*d+d) is
 * cuDNN's [b, h, s, d] with strides {tokens*ld, d, ld, 1}; lse [batch][heads][tq] float32 is [b, h, tq, 1] with
 * strides {h*tq, tq, 1, 1}, and so is the backward's delta. K enters as K^T [b, h, d, tk] (strides {tk*ld, d, 1,
 * ld}: the same memory), as the backend's matmul wants; the backward's V likewise as V^T. Scores and everything per
 * score are virtual float32 tensors [b, h, tq, tk] (packed strides: never in memory); the score scale is a
 * by-value float32 [1,1,1,1] tensor (UID ATT_UID_SCALE). Every tensor claims 16-byte alignment (cudnn-frontend's
 * default), which the caller checks on the pointers and row strides. Compute type float32 for every operation.
 *
 * forward (10 operations):
 *   S  = matmul(Q, K^T)         S2 = S * scale          M  = reduce_max(S2) [b,h,tq,1]
 *   S3 = S2 - M                 E  = exp(S3)            Z  = reduce_add(E) [b,h,tq,1]
 *   LZ = log(Z)                 lse = M + LZ (non-virtual: the Stats output, natural log)
 *   P  = E / Z (virtual, of the storage type: the second matmul's A is of the I/O type)
 *   O  = matmul(P, V)
 * backward (18 operations, or 17 without the accumulator):
 *   T  = dO * O    T2 = reduce_add(T) [b,h,tq,1]    delta = T2 * 1.0 (non-virtual float32: the caller's delta)
 *   S  = matmul(Q, K^T)    S2 = S * scale    S3 = S2 - lse    E = exp(S3)   (E = P, recomputed from the stats)
 *   P^T = reshape(E) [b,h,tk,tq] (storage type)        dV = matmul(P^T, dO)
 *   dP = matmul(dO, V^T)   T3 = dP - delta   T4 = T3 * E   dS = T4 * scale  (float32)
 *   dS^T = reshape(dS) [b,h,tk,tq] (storage type)      dK = matmul(dS^T, Q)
 *   Kr = reshape(K^T) [b,h,tk,d]
 *   dq_accum: dQacc = matmul(dS, Kr) (float32 [b,h,tq,d], packed, at workspace offset 0); dQ = identity(dQacc)
 *   else:     dQ = matmul(dS, Kr)
 * The accumulator form is what cudnn-frontend builds by default from cuDNN 9 on (its kernels add partial dQ tiles
 * with atomics: non-deterministic); the direct form is the one it builds when a deterministic algorithm is asked
 * for. attention_cudnn.cu picks the form from device_options' deterministic and filters engines by their notes too.
 * cuDNN 9.6 and newer need no zeroing of the accumulator (cudnn-frontend stopped doing it there); older cuDNN is
 * left to the own kernel (attention_cudnn_rules.c).
 *
 * Checked here (no GPU): every tensor and operation descriptor finalizes with the installed cuDNN
 * (tests/unit/test_attention_cudnn.c). NOT checked: the operation graph (it needs a handle, so a GPU), whether an
 * engine takes it, and the results; attention_cudnn.cu compares each (shape, direction)'s first result with the
 * own kernel's on the device before trusting it. */
#include <string.h>

#include "attention/attention_cudnn_graph.h"

static cudnnDataType_t io_type(DType t) { return t == DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

/* A backend call inside the builder: a failure is recorded in g->why and the builder returns 0 (never exits). */
#define G_TRY(call)                                                                                            \
    do {                                                                                                       \
        const cudnnStatus_t st_ = (call);                                                                      \
        if (st_ != CUDNN_STATUS_SUCCESS) {                                                                     \
            snprintf(g->why, sizeof g->why, "%s failed: %s", #call, cudnnGetErrorString(st_));                 \
            return NULL;                                                                                       \
        }                                                                                                      \
    } while (0)

static cudnnBackendDescriptor_t make(AttGraph *g, cudnnBackendDescriptorType_t type) {
    if (g->n_all == ATT_GRAPH_MAX_DESC) {
        snprintf(g->why, sizeof g->why, "more than %d descriptors", ATT_GRAPH_MAX_DESC);
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    G_TRY(cudnnBackendCreateDescriptor(type, &d));
    g->all[g->n_all++] = d;
    return d;
}

static cudnnBackendDescriptor_t set_desc(AttGraph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                                         cudnnBackendDescriptor_t v) {
    G_TRY(cudnnBackendSetAttribute(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v));
    return d;
}

/* A tensor [4] of dtype dt; uid 0: a new virtual UID. */
static cudnnBackendDescriptor_t tensor(AttGraph *g, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                                       const int64_t stride[4], bool is_virtual, bool by_value) {
    cudnnBackendDescriptor_t t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!t) return NULL;
    if (uid == 0) uid = g->next_uid++;
    const int64_t align = 16;
    G_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    G_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim));
    G_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride));
    G_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    G_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    G_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual));
    if (by_value) G_TRY(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
    G_TRY(cudnnBackendFinalize(t));
    return t;
}

static cudnnBackendDescriptor_t add_op(AttGraph *g, cudnnBackendDescriptor_t op) {
    if (!op) return NULL;
    G_TRY(cudnnBackendFinalize(op));
    if (g->n_ops == ATT_GRAPH_MAX_OPS) {
        snprintf(g->why, sizeof g->why, "more than %d operations", ATT_GRAPH_MAX_OPS);
        return NULL;
    }
    g->ops[g->n_ops++] = op;
    return op;
}

/* y = mode(x[, b]), float32 math; alpha1 = alpha2 = 1 as cudnn-frontend sets them */
static cudnnBackendDescriptor_t pointwise(AttGraph *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
    if (!x || !y) return NULL;
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    if (!pw) return NULL;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    G_TRY(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    G_TRY(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32));
    G_TRY(cudnnBackendFinalize(pw));
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (!op || !set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw) ||
        !set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x) || (b && !set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b)) ||
        !set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y))
        return NULL;
    const float one = 1.0f;
    G_TRY(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one));
    G_TRY(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one));
    return add_op(g, op);
}

/* y [b,h,tq,1] = reduce(x) over the last axis, float32 */
static cudnnBackendDescriptor_t reduction(AttGraph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t y) {
    if (!x || !y) return NULL;
    cudnnBackendDescriptor_t rd = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    if (!rd) return NULL;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    G_TRY(cudnnBackendSetAttribute(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode));
    G_TRY(cudnnBackendSetAttribute(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32));
    G_TRY(cudnnBackendFinalize(rd));
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    if (!op || !set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd) ||
        !set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x) || !set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y))
        return NULL;
    return add_op(g, op);
}

/* c = a b (batched over b, h), float32 compute */
static cudnnBackendDescriptor_t matmul(AttGraph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                       cudnnBackendDescriptor_t c) {
    if (!a || !b || !c) return NULL;
    cudnnBackendDescriptor_t md = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    if (!md) return NULL;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    G_TRY(cudnnBackendSetAttribute(md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32));
    G_TRY(cudnnBackendFinalize(md));
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    if (!op || !set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a) || !set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b) ||
        !set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c) || !set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, md))
        return NULL;
    return add_op(g, op);
}

/* y: x's elements seen with y's dims and strides (a transpose of a virtual tensor, or of K^T back to K) */
static cudnnBackendDescriptor_t reshape(AttGraph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    if (!x || !y) return NULL;
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    if (!op || !set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x) || !set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y))
        return NULL;
    return add_op(g, op);
}

#undef G_TRY

void att_graph_free(AttGraph *g) {
    for (int i = g->n_all - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(g->all[i]);
    g->n_all = g->n_ops = 0;
}

/* The shapes every graph shares. */
typedef struct {
    int64_t q[4], qs[4];    /* Q (and dQ, and O dO with ld_o) [b,h,tq,d] */
    int64_t o[4], os[4];
    int64_t kt[4], kts[4];  /* K^T [b,h,d,tk] */
    int64_t k[4], ks[4];    /* K (and dK) [b,h,tk,d] */
    int64_t vt[4], vts[4];  /* V^T */
    int64_t v[4], vs[4];    /* V (and dV) */
    int64_t sc[4], scs[4];  /* scores [b,h,tq,tk], packed */
    int64_t tr[4], trs[4];  /* transposed scores [b,h,tk,tq] over the same memory order */
    int64_t row[4], rows[4]; /* per query row [b,h,tq,1] */
    int64_t one[4];         /* [1,1,1,1], strides too */
    int64_t qacc_s[4];      /* packed [b,h,tq,d] */
} Dims;

static void dims_of(const AttentionShape *s, Dims *m) {
    const int64_t B = s->batch, H = s->heads, Q = s->tq, K = s->tk, D = s->d;
    const int64_t lq = s->ld_q, lk = s->ld_k, lv = s->ld_v, lo = s->ld_o;
#define SET4(a, x0, x1, x2, x3) (a[0] = (x0), a[1] = (x1), a[2] = (x2), a[3] = (x3))
    SET4(m->q, B, H, Q, D), SET4(m->qs, Q * lq, D, lq, 1);
    SET4(m->o, B, H, Q, D), SET4(m->os, Q * lo, D, lo, 1);
    SET4(m->kt, B, H, D, K), SET4(m->kts, K * lk, D, 1, lk);
    SET4(m->k, B, H, K, D), SET4(m->ks, K * lk, D, lk, 1);
    SET4(m->vt, B, H, D, K), SET4(m->vts, K * lv, D, 1, lv);
    SET4(m->v, B, H, K, D), SET4(m->vs, K * lv, D, lv, 1);
    SET4(m->sc, B, H, Q, K), SET4(m->scs, H * Q * K, Q * K, K, 1);
    SET4(m->tr, B, H, K, Q), SET4(m->trs, H * Q * K, Q * K, 1, K);
    SET4(m->row, B, H, Q, 1), SET4(m->rows, H * Q, Q, 1, 1);
    SET4(m->one, 1, 1, 1, 1);
    SET4(m->qacc_s, H * Q * D, Q * D, D, 1);
#undef SET4
}

static int build_forward(AttGraph *g, const AttentionShape *s, const Dims *m) {
    const cudnnDataType_t io = io_type(s->dtype), f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t Q = tensor(g, ATT_UID_Q, io, m->q, m->qs, false, false);
    cudnnBackendDescriptor_t KT = tensor(g, ATT_UID_K, io, m->kt, m->kts, false, false);
    cudnnBackendDescriptor_t V = tensor(g, ATT_UID_V, io, m->v, m->vs, false, false);
    cudnnBackendDescriptor_t O = tensor(g, ATT_UID_O, io, m->o, m->os, false, false);
    cudnnBackendDescriptor_t L = tensor(g, ATT_UID_STATS, f32, m->row, m->rows, false, false);
    cudnnBackendDescriptor_t scale = tensor(g, ATT_UID_SCALE, f32, m->one, m->one, false, true);
    cudnnBackendDescriptor_t S = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t S2 = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t M = tensor(g, 0, f32, m->row, m->rows, true, false);
    cudnnBackendDescriptor_t S3 = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t E = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t Z = tensor(g, 0, f32, m->row, m->rows, true, false);
    cudnnBackendDescriptor_t LZ = tensor(g, 0, f32, m->row, m->rows, true, false);
    cudnnBackendDescriptor_t P = tensor(g, 0, io, m->sc, m->scs, true, false);
    return matmul(g, Q, KT, S) && pointwise(g, CUDNN_POINTWISE_MUL, S, scale, S2) &&
           reduction(g, CUDNN_REDUCE_TENSOR_MAX, S2, M) && pointwise(g, CUDNN_POINTWISE_SUB, S2, M, S3) &&
           pointwise(g, CUDNN_POINTWISE_EXP, S3, NULL, E) && reduction(g, CUDNN_REDUCE_TENSOR_ADD, E, Z) &&
           pointwise(g, CUDNN_POINTWISE_LOG, Z, NULL, LZ) && pointwise(g, CUDNN_POINTWISE_ADD, M, LZ, L) &&
           pointwise(g, CUDNN_POINTWISE_DIV, E, Z, P) && matmul(g, P, V, O);
}

static int build_backward(AttGraph *g, const AttentionShape *s, const Dims *m) {
    const cudnnDataType_t io = io_type(s->dtype), f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t Q = tensor(g, ATT_UID_Q, io, m->q, m->qs, false, false);
    cudnnBackendDescriptor_t KT = tensor(g, ATT_UID_K, io, m->kt, m->kts, false, false);
    cudnnBackendDescriptor_t VT = tensor(g, ATT_UID_V, io, m->vt, m->vts, false, false);
    cudnnBackendDescriptor_t O = tensor(g, ATT_UID_O, io, m->o, m->os, false, false);
    cudnnBackendDescriptor_t dO = tensor(g, ATT_UID_DO, io, m->o, m->os, false, false);
    cudnnBackendDescriptor_t L = tensor(g, ATT_UID_STATS, f32, m->row, m->rows, false, false);
    cudnnBackendDescriptor_t dQ = tensor(g, ATT_UID_DQ, io, m->q, m->qs, false, false);
    cudnnBackendDescriptor_t dK = tensor(g, ATT_UID_DK, io, m->k, m->ks, false, false);
    cudnnBackendDescriptor_t dV = tensor(g, ATT_UID_DV, io, m->v, m->vs, false, false);
    cudnnBackendDescriptor_t scale = tensor(g, ATT_UID_SCALE, f32, m->one, m->one, false, true);
    cudnnBackendDescriptor_t one = tensor(g, ATT_UID_ONE, f32, m->one, m->one, false, true);
    cudnnBackendDescriptor_t sum = tensor(g, ATT_UID_SUM, f32, m->row, m->rows, false, false);
    cudnnBackendDescriptor_t T = tensor(g, 0, f32, m->q, m->qacc_s, true, false);
    cudnnBackendDescriptor_t T2 = tensor(g, 0, f32, m->row, m->rows, true, false);
    cudnnBackendDescriptor_t S = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t S2 = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t S3 = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t E = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t PT = tensor(g, 0, io, m->tr, m->trs, true, false);
    cudnnBackendDescriptor_t dP = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t T3 = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t T4 = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t dS = tensor(g, 0, f32, m->sc, m->scs, true, false);
    cudnnBackendDescriptor_t dST = tensor(g, 0, io, m->tr, m->trs, true, false);
    cudnnBackendDescriptor_t Kr = tensor(g, 0, io, m->k, m->ks, true, false);
    const int ok = pointwise(g, CUDNN_POINTWISE_MUL, dO, O, T) && reduction(g, CUDNN_REDUCE_TENSOR_ADD, T, T2) &&
                   pointwise(g, CUDNN_POINTWISE_MUL, T2, one, sum) && matmul(g, Q, KT, S) &&
                   pointwise(g, CUDNN_POINTWISE_MUL, S, scale, S2) && pointwise(g, CUDNN_POINTWISE_SUB, S2, L, S3) &&
                   pointwise(g, CUDNN_POINTWISE_EXP, S3, NULL, E) && reshape(g, E, PT) && matmul(g, PT, dO, dV) &&
                   matmul(g, dO, VT, dP) && pointwise(g, CUDNN_POINTWISE_SUB, dP, sum, T3) &&
                   pointwise(g, CUDNN_POINTWISE_MUL, T3, E, T4) && pointwise(g, CUDNN_POINTWISE_MUL, T4, scale, dS) &&
                   reshape(g, dS, dST) && matmul(g, dST, Q, dK) && reshape(g, KT, Kr);
    if (!ok) return 0;
    if (!g->dq_accum) return matmul(g, dS, Kr, dQ) != NULL;
    cudnnBackendDescriptor_t acc = tensor(g, ATT_UID_DQ_ACC, f32, m->q, m->qacc_s, false, false);
    g->dq_accum_bytes = sizeof(float) * (size_t)s->batch * s->heads * s->tq * s->d;
    return matmul(g, dS, Kr, acc) && pointwise(g, CUDNN_POINTWISE_IDENTITY, acc, NULL, dQ);
}

int att_graph_build(AttGraph *g, const AttentionShape *s, int dir, int dq_accum) {
    memset(g, 0, sizeof *g);
    g->next_uid = ATT_UID_VIRTUAL0;
    g->dq_accum = dir == ATT_BWD && dq_accum;
    Dims m;
    dims_of(s, &m);
    const int ok = dir == ATT_FWD ? build_forward(g, s, &m) : build_backward(g, s, &m);
    if (!ok) {
        char why[sizeof g->why];
        memcpy(why, g->why, sizeof why);
        att_graph_free(g);
        memcpy(g->why, why, sizeof why);
        if (!g->why[0]) snprintf(g->why, sizeof g->why, "a descriptor could not be made");
    }
    return ok;
}

/* ---- attention.h's descriptor check (tests/unit/test_attention_cudnn.c) --------------------------------------- */

extern "C" int attention_cuda_describe(const AttentionShape *s, int backward, int dq_accum, int *n_ops, char *why,
                                       size_t why_len) {
    AttGraph *g = (AttGraph *)vx_calloc(1, sizeof *g);
    const int ok = att_graph_build(g, s, backward ? ATT_BWD : ATT_FWD, dq_accum);
    if (!ok) snprintf(why, why_len, "%s", g->why);
    if (n_ops) *n_ops = ok ? g->n_ops : 0;
    att_graph_free(g);
    free(g);
    return ok;
}

/* attention_spec.c: attention's entries in the op spec table (common/op_spec.h), with float64 references of
 * attention.h written out in full (every score of a row, its max, its sum). A case's shape is an AttentionShape in
 * KernelCase.params. Rows whose columns hold no sampled element (op_check.c's stride, large cases) are skipped; the
 * columns between heads*d and a row stride ld are not the op's and stay unchecked. The backward's o and lse are the
 * float64 forward of the case's q k v (as the forward would leave them), except for cases too large to do that in
 * fill; its delta lives in the case's workspace, ahead of the backend's own (workspace_bytes: cuDNN's). Work: FlashAttention's count, 4 tq tk d per (batch, head) forward
 * (two products) and 10 backward (five).
 * attention_step is the pair as a model calls it: the forward keeping what the backend saves for its backward
 * (saved_bytes: the CPU's probabilities), then the backward reading it. The two rows above pass no saved memory, so
 * their backward recomputes the scores and their forward stores none: neither is the path a model's step runs. Its
 * work is what it computes: 12 tq tk d where the backend saves (the backward's four products), 14 where it does not
 * (five, the scores again), which is also what `bench step` counts for a model's attention on the CPU. */
#include <math.h>
#include <stdlib.h>

#include "attention/attention.h"
#include "common/op_spec.h"
#include "core/util.h"

static const AttentionOps *table(const OpHead *ops) { return (const AttentionOps *)(const void *)ops; }
static AttentionShape shape_of(const KernelCase *k) {
    AttentionShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static AttentionShape typed(KernelCase *k) {
    AttentionShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}
static long count_of(const AttentionShape *s, int tokens, int ld) { return (long)s->batch * tokens * ld; }
static size_t row_at(int b, int tokens, int t, int ld, int h, int d) {
    return ((size_t)b * tokens + t) * (size_t)ld + (size_t)h * d;
}
/* some element of [base, base + n) is a multiple of stride */
static int sampled(size_t base, int n, long stride) { return (base + n - 1) / stride * stride >= base; }
static double pairs(const AttentionShape *s) { return (double)s->batch * s->heads * s->tq * s->tk * s->d; }

/* query i's softmax row against every key, in double: p[j] (probabilities) and the log-sum-exp */
static double softmax_row(const AttentionShape *s, const float *q, const float *k, int b, int h, int i, double *p) {
    const int d = s->d;
    const float *qi = q + row_at(b, s->tq, i, s->ld_q, h, d);
    double m = -INFINITY, sum = 0;
    for (int j = 0; j < s->tk; j++) {
        const float *kj = k + row_at(b, s->tk, j, s->ld_k, h, d);
        double dot = 0;
        for (int c = 0; c < d; c++) dot += (double)qi[c] * kj[c];
        p[j] = s->scale * dot;
        m = p[j] > m ? p[j] : m;
    }
    for (int j = 0; j < s->tk; j++) sum += exp(p[j] - m);
    const double lse = m + log(sum);
    for (int j = 0; j < s->tk; j++) p[j] = exp(p[j] - lse);
    return lse;
}

/* o row i (d values) and its lse from q k v, in double */
static double forward_row(const AttentionShape *s, const float *q, const float *k, const float *v, int b, int h, int i,
                          double *p, double *o) {
    const double lse = softmax_row(s, q, k, b, h, i, p);
    for (int c = 0; c < s->d; c++) o[c] = 0;
    for (int j = 0; j < s->tk; j++) {
        const float *vj = v + row_at(b, s->tk, j, s->ld_v, h, s->d);
        for (int c = 0; c < s->d; c++) o[c] += p[j] * vj[c];
    }
    return lse;
}

/* ---- forward: q k v -> o lse -------------------------------------------------------------------------------- */

static void fwd_setup(KernelCase *k, const OpHead *ops) {
    const AttentionShape s = typed(k);
    op_spec_bufs(k, 5,
                 (long[]){count_of(&s, s.tq, s.ld_q), count_of(&s, s.tk, s.ld_k), count_of(&s, s.tk, s.ld_v),
                          count_of(&s, s.tq, s.ld_o), (long)s.batch * s.heads * s.tq},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT}, 0xF, 0);
    k->flops = 4.0 * pairs(&s);
    k->workspace = table(ops)->workspace_bytes(&s);
}
static void fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const AttentionShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], b[2], b[3], b[4], NULL, ws);
}
static void fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const AttentionShape s = shape_of(k);
    double *p = vx_malloc(sizeof(double) * (size_t)s.tk), *o = vx_malloc(sizeof(double) * (size_t)s.d);
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < s.heads; h++)
            for (int i = 0; i < s.tq; i++) {
                const size_t oi = row_at(b, s.tq, i, s.ld_o, h, s.d), li = ((size_t)b * s.heads + h) * s.tq + i;
                if (!sampled(oi, s.d, stride) && li % stride) continue;
                ref[4][li] = forward_row(&s, in[0], in[1], in[2], b, h, i, p, o);
                for (int c = 0; c < s.d; c++) ref[3][oi + c] = o[c];
            }
    free(p);
    free(o);
}

/* ---- backward: q k v o dO lse -> dq dk dv (beta), delta in the workspace ---------------------------------- */

/* delta's part of the case's workspace, rounded up to 256 bytes so the backend's part after it stays aligned */
static size_t delta_bytes(const AttentionShape *s) {
    const size_t rows = (size_t)s->batch * s->heads * s->tq;
    return (sizeof(float) * (rows > 0 ? rows : 1) + 255) / 256 * 256;
}

/* the backward's nine buffers q k v o dO lse dq dk dv (attention_step's too, where o and lse are its outputs) */
static void backward_bufs(KernelCase *k, const AttentionShape *s, KernelBufRole o_lse) {
    const long nq = count_of(s, s->tq, s->ld_q), nk = count_of(s, s->tk, s->ld_k), nv = count_of(s, s->tk, s->ld_v);
    const long no = count_of(s, s->tq, s->ld_o), rows = (long)s->batch * s->heads * s->tq;
    op_spec_bufs(k, 9, (long[]){nq, nk, nv, no, no, rows, nq, nk, nv},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, o_lse, KB_IN, o_lse, KB_OUT, KB_OUT, KB_OUT}, 0x1DF, 0x1C0);
}

static void bwd_setup(KernelCase *k, const OpHead *ops) {
    const AttentionShape s = typed(k);
    backward_bufs(k, &s, KB_IN);
    k->flops = 10.0 * pairs(&s);
    k->workspace = delta_bytes(&s) + table(ops)->workspace_bytes(&s);
}
static void bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const AttentionShape s = shape_of(k);
    const size_t own = table(ops)->workspace_bytes(&s);
    table(ops)->backward(&s, b[0], b[1], b[2], b[3], b[4], b[5], ws, NULL, b[6], b[7], b[8], k->beta,
                         own ? (char *)ws + delta_bytes(&s) : NULL);
}
static void bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const AttentionShape s = shape_of(k);
    const int d = s.d;
    const float *q = in[0], *kk = in[1], *v = in[2], *o = in[3], *dO = in[4], *lse = in[5];
    double *delta = vx_malloc(sizeof(double) * (size_t)(s.tq > 0 ? s.tq : 1));
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < s.heads; h++) {
            const float *L = lse + ((size_t)b * s.heads + h) * s.tq;
            for (int i = 0; i < s.tq; i++) {
                const size_t oi = row_at(b, s.tq, i, s.ld_o, h, d);
                delta[i] = 0;
                for (int c = 0; c < d; c++) delta[i] += (double)dO[oi + c] * o[oi + c];
            }
            /* p_ij and ds_ij of one (query, key) pair */
#define PAIR(i, j, P, DS)                                                                                   \
    do {                                                                                                    \
        const float *qi_ = q + row_at(b, s.tq, i, s.ld_q, h, d), *kj_ = kk + row_at(b, s.tk, j, s.ld_k, h, d); \
        const float *gi_ = dO + row_at(b, s.tq, i, s.ld_o, h, d), *vj_ = v + row_at(b, s.tk, j, s.ld_v, h, d); \
        double sc_ = 0, dp_ = 0;                                                                            \
        for (int c_ = 0; c_ < d; c_++) sc_ += (double)qi_[c_] * kj_[c_], dp_ += (double)gi_[c_] * vj_[c_];  \
        P = exp(s.scale * sc_ - L[i]);                                                                      \
        DS = P * (dp_ - delta[i]);                                                                          \
    } while (0)
            for (int i = 0; i < s.tq; i++) { /* dq_i = scale sum_j ds_ij k_j */
                const size_t qi = row_at(b, s.tq, i, s.ld_q, h, d);
                if (!sampled(qi, d, stride)) continue;
                for (int c = 0; c < d; c++) ref[6][qi + c] = 0;
                for (int j = 0; j < s.tk; j++) {
                    double P, DS;
                    PAIR(i, j, P, DS);
                    const float *kj = kk + row_at(b, s.tk, j, s.ld_k, h, d);
                    for (int c = 0; c < d; c++) ref[6][qi + c] += s.scale * DS * kj[c];
                }
            }
            for (int j = 0; j < s.tk; j++) { /* dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij dO_i */
                const size_t kj = row_at(b, s.tk, j, s.ld_k, h, d), vj = row_at(b, s.tk, j, s.ld_v, h, d);
                const int want_k = sampled(kj, d, stride), want_v = sampled(vj, d, stride);
                if (!want_k && !want_v) continue;
                for (int c = 0; c < d; c++) ref[7][kj + c] = ref[8][vj + c] = 0;
                for (int i = 0; i < s.tq; i++) {
                    double P, DS;
                    PAIR(i, j, P, DS);
                    const float *qi = q + row_at(b, s.tq, i, s.ld_q, h, d), *gi = dO + row_at(b, s.tq, i, s.ld_o, h, d);
                    for (int c = 0; c < d; c++) ref[7][kj + c] += s.scale * DS * qi[c], ref[8][vj + c] += P * gi[c];
                }
            }
#undef PAIR
        }
    free(delta);
}

/* ---- step: q k v dO -> o lse, then dq dk dv (beta), through the backend's saved memory ---------------------- */

/* the step's buffers keep the backward's numbering (o 3, dO 4, lse 5), so its reference is bwd_ref's; the workspace
 * is delta, the backend's own, then the saved memory, each from a 256-byte boundary */
static size_t saved_of(const OpHead *ops, const AttentionShape *s) {
    return table(ops)->saved_bytes ? table(ops)->saved_bytes(s) : 0;
}
static size_t own_bytes(const OpHead *ops, const AttentionShape *s) {
    return (table(ops)->workspace_bytes(s) + 255) / 256 * 256;
}

static void step_setup(KernelCase *k, const OpHead *ops) {
    const AttentionShape s = typed(k);
    backward_bufs(k, &s, KB_OUT);
    const size_t saved = saved_of(ops, &s);
    k->flops = (saved ? 12.0 : 14.0) * pairs(&s);
    k->workspace = delta_bytes(&s) + own_bytes(ops, &s) + saved;
}
static void step_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const AttentionShape s = shape_of(k);
    char *own = table(ops)->workspace_bytes(&s) ? (char *)ws + delta_bytes(&s) : NULL;
    void *saved = saved_of(ops, &s) ? (char *)ws + delta_bytes(&s) + own_bytes(ops, &s) : NULL;
    table(ops)->forward(&s, b[0], b[1], b[2], b[3], b[5], saved, own);
    table(ops)->backward(&s, b[0], b[1], b[2], b[3], b[4], b[5], ws, saved, b[6], b[7], b[8], k->beta, own);
}
/* o and lse of every row in double (the backward's sums need all of them), then bwd_ref from o and lse as the
 * forward stores them */
static void step_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const AttentionShape s = shape_of(k);
    const long no = count_of(&s, s.tq, s.ld_o), rows = (long)s.batch * s.heads * s.tq;
    float *o = vx_malloc(sizeof(float) * (size_t)(no > 0 ? no : 1));
    float *lse = vx_malloc(sizeof(float) * (size_t)(rows > 0 ? rows : 1));
    double *p = vx_malloc(sizeof(double) * (size_t)s.tk), *orow = vx_malloc(sizeof(double) * (size_t)s.d);
    for (long i = 0; i < no; i++) o[i] = 0.0f;
    for (int b = 0; b < s.batch; b++)
        for (int h = 0; h < s.heads; h++)
            for (int i = 0; i < s.tq; i++) {
                const size_t oi = row_at(b, s.tq, i, s.ld_o, h, s.d), li = ((size_t)b * s.heads + h) * s.tq + i;
                ref[5][li] = forward_row(&s, in[0], in[1], in[2], b, h, i, p, orow);
                lse[li] = (float)ref[5][li];
                for (int c = 0; c < s.d; c++) {
                    ref[3][oi + c] = orow[c];
                    o[oi + c] = dtype_round(s.dtype, (float)orow[c]);
                }
            }
    const float *bin[6] = {in[0], in[1], in[2], o, in[4], lse};
    bwd_ref(k, bin, ref, stride);
    free(o);
    free(lse);
    free(p);
    free(orow);
}

/* q spread so the scores span a few units (the softmax is neither flat nor one-hot at scale 1/sqrt(d)); the
 * backward's o and lse are the forward's of the same (rounded) q k v, computed here as layernorm_spec.c does */
static void att_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    const AttentionShape s = shape_of(k);
    const int fwd = k->nbuf == 5, step = k->nbuf == 9 && k->role[3] == KB_OUT;
    if (fwd || step || (b != 3 && b != 5)) {
        op_spec_uniform_fill(h, count, seed, b);
        if (b == 0)
            for (long i = 0; i < count; i++) h[i] *= 3.0f;
        return;
    }
    /* o (3) and lse (5) of the backward */
    if (pairs(&s) > 2e8) { /* too large to run the reference forward here: any o, and lse of uniform scores */
        op_spec_uniform_fill(h, count, seed, b);
        if (b == 5)
            for (long i = 0; i < count; i++) h[i] = logf((float)s.tk);
        return;
    }
    float *in[3];
    for (int t = 0; t < 3; t++) {
        const long n = count_of(&s, t == 0 ? s.tq : s.tk, t == 0 ? s.ld_q : t == 1 ? s.ld_k : s.ld_v);
        in[t] = vx_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
        att_fill(k, t, in[t], n, seed);
        for (long i = 0; i < n; i++) in[t][i] = dtype_round(k->dtype, in[t][i]); /* what the op reads */
    }
    double *p = vx_malloc(sizeof(double) * (size_t)s.tk), *o = vx_malloc(sizeof(double) * (size_t)s.d);
    for (long i = 0; i < count; i++) h[i] = 0.0f;
    for (int bi = 0; bi < s.batch; bi++)
        for (int hd = 0; hd < s.heads; hd++)
            for (int i = 0; i < s.tq; i++) {
                const double lse = forward_row(&s, in[0], in[1], in[2], bi, hd, i, p, o);
                if (b == 5) h[((size_t)bi * s.heads + hd) * s.tq + i] = (float)lse;
                else
                    for (int c = 0; c < s.d; c++) h[row_at(bi, s.tq, i, s.ld_o, hd, s.d) + c] = (float)o[c];
            }
    for (int t = 0; t < 3; t++) free(in[t]);
    free(p);
    free(o);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp attention_specs[] = {
    {"attention_forward", ATTENTION_FORWARD, 1, 1e-5, fwd_setup, fwd_run, fwd_ref, att_fill},
    {"attention_backward", ATTENTION_BACKWARD, 1, 1e-5, bwd_setup, bwd_run, bwd_ref, att_fill},
    {"attention_step", ATTENTION_BACKWARD, 1, 1e-5, step_setup, step_run, step_ref, att_fill},
};
const int attention_specs_count = sizeof attention_specs / sizeof attention_specs[0];

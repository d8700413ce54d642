/* attention_cpu_tile.c: the CPU attention on register tiles (cpu_tile_gemm), with the scores held transposed.
 *
 * Per job the scores are S^T [keys][ATT_BQ queries] = scale K Q^T: the keys' rows are read in place (broadcast) and
 * only the job's block of Q is transposed (ATT_BQ x d floats, zero-padded to ATT_BQ columns), where S = Q K^T would
 * need all of K transposed for every block of 64 queries. A query is then a column: the softmax's max, exp and sum
 * run down the columns, vectors across queries, with no horizontal reduction; and every later product reads S^T, P^T
 * or dS^T one way or the other through cpu_tile_gemm's two strides, without a copy:
 *   forward   O = P V          (A = P^T read across a row)     S^T = scale K Q^T
 *   backward  dP^T = V dO^T    (dO's block transposed)          dS^T = P^T (dP^T - delta_i), column-wise
 *             dV += P^T dO,  dK += scale dS^T Q  (A = P^T, dS^T by rows)
 *             dQ += scale dS K  (A = dS^T read across a row: per key block's partial, or in the dq pass)
 * Jobs, tiles and orders are attention_cpu.c's (ATT_BQ queries per forward and dq job; ATT_BKB keys per dk dv job,
 * the queries in blocks of ATT_BQ; the dq pass's keys in tiles of ATT_BK), so the bits depend on the shape only.
 * The saved P is these tiles as the forward leaves them: [b][h][query block][tk][ATT_BQ], normalised.
 * Jobs are handed out dynamically: each writes its own outputs from its own sums, so which thread runs it changes no
 * bit. Static and dynamic measured the same on a quiet machine (one process, alternating); on a 2-vCPU VM whose
 * threads run at different speeds, static halves leave the faster one waiting at the end of every call.
 * Padding: a last block of fewer than ATT_BQ queries has zero columns in Q^T and dO^T, so its extra columns of S^T
 * are 0 and of P^T uniform, and dP^T and dS^T there are 0; the products read only the block's real queries. */
#include <math.h>

#include "attention/attention_cpu_parts.h"
#include "common/cpu_tile_gemm.h"
#include "common/cpu_vector_width.h"
#include "common/exp_cpu.h"

int attention_cpu_tile_ok(const AttentionShape *s) {
#if CPU_TILE_W
    return s->d > 0 && s->d % CPU_TILE_W == 0;
#else
    return 0; /* no vectors of ours in this build: the sgemm path */
#endif
}

size_t attention_cpu_tile_saved_floats(const AttentionShape *s) {
    const size_t qb = (size_t)(s->tq + ATT_BQ - 1) / ATT_BQ;
    const size_t f = (size_t)s->batch * (size_t)s->heads * qb * (size_t)s->tk * ATT_BQ;
    return s->tk <= ATT_FWD_BK && f * sizeof(float) <= (size_t)ATT_SAVED_MAX ? f : 0;
}

/* where the saved P's tile of query block q of (b, h) starts at key j0: [b][h][query block][tk][ATT_BQ] */
static inline size_t saved_at(const AttentionShape *s, int b, int h, int q, int j0) {
    const size_t qb = (size_t)(s->tq + ATT_BQ - 1) / ATT_BQ;
    return ((((size_t)b * s->heads + h) * qb + (size_t)q) * s->tk + (size_t)j0) * ATT_BQ;
}

/* ---- column-wise softmax pieces over a tile of kn rows of ATT_BQ ----------------------------------------------- */

/* m[c] = the maximum of m[c] and column c (a NaN score is skipped, as `x > m` is false for it) */
VX_CPU_WIDE static void col_max(const float *S, int kn, float *m) {
    for (int j = 0; j < kn; j++) {
        const float *row = S + (size_t)j * ATT_BQ;
        for (int c = 0; c < ATT_BQ; c++) m[c] = row[c] > m[c] ? row[c] : m[c];
    }
}
/* S = exp(S - m[c]) in place; l[c] = the column sums, in key order */
VX_CPU_WIDE static void col_exp_sum(float *S, int kn, const float *m, float *l) {
    for (int c = 0; c < ATT_BQ; c++) l[c] = 0.0f;
    for (int j = 0; j < kn; j++) {
        float *row = S + (size_t)j * ATT_BQ;
        for (int c = 0; c < ATT_BQ; c++) {
            row[c] = exp_vec(row[c] - m[c]);
            l[c] += row[c];
        }
    }
}
/* S *= f[c] */
VX_CPU_WIDE static void col_scale(float *S, int kn, const float *f) {
    for (int j = 0; j < kn; j++) {
        float *row = S + (size_t)j * ATT_BQ;
        for (int c = 0; c < ATT_BQ; c++) row[c] *= f[c];
    }
}
/* a column vector of ATT_BQ from the first n values of x, zeros after */
static void col_vector(float *dst, const float *x, int n) {
    for (int c = 0; c < ATT_BQ; c++) dst[c] = c < n ? x[c] : 0.0f;
}

/* ---- forward ------------------------------------------------------------------------------------------------- */

/* One job: queries [i0, i0 + qn) of (b, h). QT [d][ATT_BQ], St [ATT_FWD_BK][ATT_BQ] and acc [ATT_BQ][d] are the
 * thread's; Pj the job's saved tile [tk][ATT_BQ] or NULL. */
static void forward_job(const AttentionShape *s, int b, int h, int i0, const float *Q, const float *K, const float *V,
                        float *O, float *lse, float *Pj, float *QT, float *St, float *acc) {
    const int d = s->d, qn = s->tq - i0 < ATT_BQ ? s->tq - i0 : ATT_BQ;
    const float *Kj = K + att_at(b, s->tk, 0, s->ld_k, h, d), *Vj = V + att_at(b, s->tk, 0, s->ld_v, h, d);
    float *Oj = O + att_at(b, s->tq, i0, s->ld_o, h, d), *lj = lse + ((size_t)b * s->heads + h) * s->tq + i0;
    cpu_tile_transpose(qn, d, Q + att_at(b, s->tq, i0, s->ld_q, h, d), s->ld_q, QT, ATT_BQ, ATT_BQ);
    float m[ATT_BQ], l[ATT_BQ], f[ATT_BQ];
    if (s->tk <= ATT_FWD_BK) { /* one tile of keys: S^T, P^T normalised, O = P V straight into o */
        /* S^T, P^T and the product in the thread's tile, which stays in cache; the saved P is a copy of it past the
         * cache (computing in the saved memory itself made the forward ~15% slower: every pass missed) */
        cpu_tile_gemm(s->tk, ATT_BQ, d, s->scale, Kj, s->ld_k, 1, QT, ATT_BQ, St, ATT_BQ, 0);
        for (int c = 0; c < ATT_BQ; c++) m[c] = -INFINITY;
        col_max(St, s->tk, m);
        col_exp_sum(St, s->tk, m, l);
        for (int c = 0; c < ATT_BQ; c++) f[c] = 1.0f / l[c];
        col_scale(St, s->tk, f);
        if (Pj) cpu_tile_copy_stream(Pj, St, (size_t)s->tk * ATT_BQ);
        for (int i = 0; i < qn; i++) lj[i] = m[i] + logf(l[i]);
        cpu_tile_gemm(qn, d, s->tk, 1.0f, St, 1, ATT_BQ, Vj, s->ld_v, Oj, s->ld_o, 0);
        return;
    }
    /* keys in tiles of ATT_FWD_BK, in order, with the online softmax: running max m and sum l per query, the
     * accumulator's rows rescaled by exp(m_old - m_new) */
    for (int j0 = 0; j0 < s->tk; j0 += ATT_FWD_BK) {
        const int kn = s->tk - j0 < ATT_FWD_BK ? s->tk - j0 : ATT_FWD_BK;
        cpu_tile_gemm(kn, ATT_BQ, d, s->scale, Kj + (size_t)j0 * s->ld_k, s->ld_k, 1, QT, ATT_BQ, St, ATT_BQ, 0);
        float mt[ATT_BQ], sum[ATT_BQ];
        for (int c = 0; c < ATT_BQ; c++) mt[c] = j0 == 0 ? -INFINITY : m[c];
        col_max(St, kn, mt);
        col_exp_sum(St, kn, mt, sum);
        for (int c = 0; c < ATT_BQ; c++) {
            const float corr = j0 == 0 ? 0.0f : expf(m[c] - mt[c]);
            if (j0 > 0 && c < qn && corr != 1.0f)
                for (int e = 0; e < d; e++) acc[(size_t)c * d + e] *= corr;
            l[c] = j0 == 0 ? sum[c] : l[c] * corr + sum[c];
            m[c] = mt[c];
        }
        cpu_tile_gemm(qn, d, kn, 1.0f, St, 1, ATT_BQ, Vj + (size_t)j0 * s->ld_v, s->ld_v, acc, d, j0 > 0);
    }
    for (int i = 0; i < qn; i++) {
        const float inv = 1.0f / l[i];
        for (int e = 0; e < d; e++) Oj[(size_t)i * s->ld_o + e] = acc[(size_t)i * d + e] * inv;
        lj[i] = m[i] + logf(l[i]);
    }
}

void attention_cpu_tile_forward(const AttentionShape *s, const float *Q, const float *K, const float *V, float *O,
                                float *lse, float *P) {
    const int qb = (s->tq + ATT_BQ - 1) / ATT_BQ;
    const long jobs = (long)s->batch * s->heads * qb;
#pragma omp parallel if (jobs > 1 && att_work(s) >= ATT_PARALLEL_MIN)
    {
        float *QT = att_job_alloc((size_t)s->d * ATT_BQ), *St = att_job_alloc((size_t)ATT_FWD_BK * ATT_BQ);
        float *acc = s->tk > ATT_FWD_BK ? att_job_alloc((size_t)ATT_BQ * s->d) : NULL; /* the online softmax's */
#pragma omp for schedule(dynamic)
        for (long job = 0; job < jobs; job++) {
            const int b = (int)(job / ((long)s->heads * qb)), h = (int)(job / qb % s->heads), q = (int)(job % qb);
            float *Pj = P ? P + saved_at(s, b, h, q, 0) : NULL;
            forward_job(s, b, h, q * ATT_BQ, Q, K, V, O, lse, Pj, QT, St, acc);
        }
        free(QT);
        free(St);
        free(acc);
    }
}

/* ---- backward ------------------------------------------------------------------------------------------------ */

/* The thread's tiles: Q^T and dO^T of a query block [d][ATT_BQ]; S^T (P^T) and dP^T (dS^T) [ATT_BK][ATT_BQ]; the
 * dk dv job's accumulators [ATT_BKB][d] twice (the dq job's [ATT_BQ][d] is the first). */
typedef struct {
    float *QT, *dOT, *St, *dPt, *acc;
} Tiles;

/* P^T and dS^T of keys [j0, j0 + kn) (rows at Kt, Vt) and the query block whose transposes are in t (QT only where
 * P is recomputed): P^T from the saved tile Pt (rows ATT_BQ apart) or exp(S^T - lse); dS^T into t->dPt. Returns P^T. */
VX_CPU_WIDE static const float *tile_p_ds(const AttentionShape *s, int kn, const float *Kt, const float *Vt,
                                          const float *Pt, const float *lse_c, const float *delta_c, Tiles *t) {
    const int d = s->d;
    if (!Pt) {
        cpu_tile_gemm(kn, ATT_BQ, d, s->scale, Kt, s->ld_k, 1, t->QT, ATT_BQ, t->St, ATT_BQ, 0);
        for (int j = 0; j < kn; j++) {
            float *row = t->St + (size_t)j * ATT_BQ;
            for (int c = 0; c < ATT_BQ; c++) row[c] = exp_vec(row[c] - lse_c[c]);
        }
        Pt = t->St;
    }
    cpu_tile_gemm(kn, ATT_BQ, d, 1.0f, Vt, s->ld_v, 1, t->dOT, ATT_BQ, t->dPt, ATT_BQ, 0);
    for (int j = 0; j < kn; j++) {
        float *row = t->dPt + (size_t)j * ATT_BQ;
        const float *p = Pt + (size_t)j * ATT_BQ;
        for (int c = 0; c < ATT_BQ; c++) row[c] = p[c] * (row[c] - delta_c[c]);
    }
    return Pt;
}

/* one dk dv job: keys [j0, j0 + kn) of (b, h) against every query block, in order; with part, each block's share of
 * dq (scale dS K, its own slot: no sum here) */
static void dkdv_job(const AttentionShape *s, int b, int h, int kblk, const float *Q, const float *K, const float *V,
                     const float *dO, const float *lse, const float *delta, const float *P, float *part, float *dK,
                     float *dV, float beta, Tiles *t) {
    const int d = s->d, j0 = kblk * ATT_BKB, kn = s->tk - j0 < ATT_BKB ? s->tk - j0 : ATT_BKB;
    const int qb = (s->tq + ATT_BQ - 1) / ATT_BQ, kb = (s->tk + ATT_BKB - 1) / ATT_BKB;
    const size_t bh = (size_t)b * s->heads + h;
    const float *Kb = K + att_at(b, s->tk, j0, s->ld_k, h, d), *Vb = V + att_at(b, s->tk, j0, s->ld_v, h, d);
    float *dk = t->acc, *dv = t->acc + (size_t)ATT_BKB * d;
    if (s->tq == 0) memset(t->acc, 0, sizeof(float) * (size_t)2 * ATT_BKB * d); /* no query: dk = dv = 0 */
    for (int q = 0; q < qb; q++) {
        const int i0 = q * ATT_BQ, qn = s->tq - i0 < ATT_BQ ? s->tq - i0 : ATT_BQ;
        const float *Qt = Q + att_at(b, s->tq, i0, s->ld_q, h, d), *dOt = dO + att_at(b, s->tq, i0, s->ld_o, h, d);
        float lse_c[ATT_BQ], delta_c[ATT_BQ];
        col_vector(lse_c, lse + bh * s->tq + i0, qn);
        col_vector(delta_c, delta + bh * s->tq + i0, qn);
        cpu_tile_transpose(qn, d, dOt, s->ld_o, t->dOT, ATT_BQ, ATT_BQ);
        if (!P) cpu_tile_transpose(qn, d, Qt, s->ld_q, t->QT, ATT_BQ, ATT_BQ);
        const float *Pt = tile_p_ds(s, kn, Kb, Vb, P ? P + saved_at(s, b, h, q, j0) : NULL, lse_c, delta_c, t);
        cpu_tile_gemm(kn, d, qn, 1.0f, Pt, ATT_BQ, 1, dOt, s->ld_o, dv, d, q > 0);
        cpu_tile_gemm(kn, d, qn, s->scale, t->dPt, ATT_BQ, 1, Qt, s->ld_q, dk, d, q > 0);
        if (part)
            cpu_tile_gemm(qn, d, kn, s->scale, t->dPt, 1, ATT_BQ, Kb, s->ld_k,
                          part + ((bh * kb + kblk) * s->tq + i0) * d, d, 0);
    }
    att_store_grad(kn, d, dk, dK + att_at(b, s->tk, j0, s->ld_k, h, d), s->ld_k, beta);
    att_store_grad(kn, d, dv, dV + att_at(b, s->tk, j0, s->ld_v, h, d), s->ld_v, beta);
}

/* one dq job: queries [i0, i0 + qn) of (b, h) against every key tile of ATT_BK, in order */
static void dq_job(const AttentionShape *s, int b, int h, int q, const float *Q, const float *K, const float *V,
                   const float *dO, const float *lse, const float *delta, const float *P, float *dQ, float beta,
                   Tiles *t) {
    const int d = s->d, i0 = q * ATT_BQ, qn = s->tq - i0 < ATT_BQ ? s->tq - i0 : ATT_BQ;
    const size_t bh = (size_t)b * s->heads + h;
    float lse_c[ATT_BQ], delta_c[ATT_BQ];
    col_vector(lse_c, lse + bh * s->tq + i0, qn);
    col_vector(delta_c, delta + bh * s->tq + i0, qn);
    cpu_tile_transpose(qn, d, dO + att_at(b, s->tq, i0, s->ld_o, h, d), s->ld_o, t->dOT, ATT_BQ, ATT_BQ);
    if (!P) cpu_tile_transpose(qn, d, Q + att_at(b, s->tq, i0, s->ld_q, h, d), s->ld_q, t->QT, ATT_BQ, ATT_BQ);
    for (int j0 = 0; j0 < s->tk; j0 += ATT_BK) { /* the first key tile's product sets acc */
        const int kn = s->tk - j0 < ATT_BK ? s->tk - j0 : ATT_BK;
        const float *Kt = K + att_at(b, s->tk, j0, s->ld_k, h, d), *Vt = V + att_at(b, s->tk, j0, s->ld_v, h, d);
        tile_p_ds(s, kn, Kt, Vt, P ? P + saved_at(s, b, h, q, j0) : NULL, lse_c, delta_c, t);
        cpu_tile_gemm(qn, d, kn, s->scale, t->dPt, 1, ATT_BQ, Kt, s->ld_k, t->acc, d, j0 > 0);
    }
    att_store_grad(qn, d, t->acc, dQ + att_at(b, s->tq, i0, s->ld_q, h, d), s->ld_q, beta);
}

void attention_cpu_tile_backward(const AttentionShape *s, const float *Q, const float *K, const float *V,
                                 const float *dO, const float *lse, const float *delta, const float *P, float *part,
                                 float *dQ, float *dK, float *dV, float beta) {
    const int B = s->batch, H = s->heads, qb = (s->tq + ATT_BQ - 1) / ATT_BQ, kb = (s->tk + ATT_BKB - 1) / ATT_BKB;
    const long kjobs = (long)B * H * kb, qjobs = part ? 0 : (long)B * H * qb;
    const int tile_keys = ATT_BK > ATT_BKB ? ATT_BK : ATT_BKB;
#pragma omp parallel if (kjobs + qjobs > 2 && att_work(s) >= ATT_PARALLEL_MIN)
    {
        Tiles t = {att_job_alloc((size_t)s->d * ATT_BQ), att_job_alloc((size_t)s->d * ATT_BQ),
                   att_job_alloc((size_t)tile_keys * ATT_BQ), att_job_alloc((size_t)tile_keys * ATT_BQ),
                   att_job_alloc((size_t)2 * ATT_BKB * s->d)};
#pragma omp for schedule(dynamic)
        for (long job = 0; job < kjobs; job++)
            dkdv_job(s, (int)(job / ((long)H * kb)), (int)(job / kb % H), (int)(job % kb), Q, K, V, dO, lse, delta, P,
                     part, dK, dV, beta, &t);
#pragma omp for schedule(dynamic)
        for (long job = 0; job < qjobs; job++)
            dq_job(s, (int)(job / ((long)H * qb)), (int)(job / qb % H), (int)(job % qb), Q, K, V, dO, lse, delta, P,
                   dQ, beta, &t);
        free(t.QT);
        free(t.dOT);
        free(t.St);
        free(t.dPt);
        free(t.acc);
    }
}

/* attention_cpu.c: float32 CPU attention (attention.h), tiled so no [tq][tk] matrix exists. Two paths, chosen by
 * shape alone (so forward and backward agree, and the saved P is the layout its backward reads):
 *   the tile path  (attention_cpu_tile.c) where the build has vectors of ours (CPU_TILE_W: AVX-512 16 floats, AVX2
 *                  8) and d is a multiple of them: scores held transposed, products on cpu_tile_gemm's register
 *                  tiles. vit3d-diffusion-64's heads (d 64) run here.
 *   the sgemm path (this file) for every other shape (d 4, 8, 40 ...; the x86-64-v2 build): per job a tile of at
 *                  most ATT_BQ x ATT_BK scores, cpu_sgemm (OpenBLAS or oneDNN, whichever has kernels of this CPU's
 *                  width; single-threaded inside each OpenMP job, as gemm_cpu.c) reading q k v in place through
 *                  their row strides.
 * The sgemm path:
 *   forward   jobs (b, h, block of ATT_BQ queries). Up to ATT_FWD_BK keys (vit3d-diffusion-64's 512 tokens): one
 *             S = scale Q K^T, the row softmax in place, o = P V; lse = max + log sum. Longer: keys in tiles of
 *             ATT_FWD_BK, in order, with the online softmax (running max m and sum l per row, the accumulator
 *             rescaled by exp(m_old - m_new)), acc += P V; at the end o = acc / l, lse = m + log l.
 *   backward  delta_i = dO_i . o_i (double, per row; both paths); then jobs (b, h, block of ATT_BKB keys) over query
 *             tiles of 2 ATT_BQ: P = exp(S - lse), dV += P^T dO, dS = P (dO V^T - delta), dK += scale dS^T Q; then
 *             jobs (b, h, block of ATT_BQ queries) over key tiles: dQ += scale dS K. No two jobs write one element.
 *             Up to ATT_DQ_PARTIAL_MAX, the dk dv jobs write each key block's dq partial scale dS K from the dS they
 *             have, summed after in key-block order (the workspace; both paths), and the dq pass, which recomputes
 *             S and dP, is not run.
 *   saved     where the caller keeps saved_bytes(s) for the node (P of one key tile, up to ATT_SAVED_MAX): the
 *             forward's S is computed in place there and normalised into P, which the backward reads instead of
 *             recomputing S and exp(S - lse) per tile: four products per tile instead of five.
 * Memory: per thread the tiles (ATT_BQ*ATT_BK scores twice, a block's accumulators), whatever the token count. The
 * jobs and tiles depend on the shape only, so the bits do not depend on the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attention_cpu_parts.h"
#include "common/cpu_gemm.h"
#include "common/cpu_op.h"
#include "common/exp_cpu.h"

/* floats of dq partials (one [tq][d] per key block of ATT_BKB per (b, h)) up to which backward computes dq in the
 * dk dv jobs' pass, from the dS it has there, and sums the partials after, in key-block order: five products per
 * tile instead of seven (the dq pass recomputes S and dP); larger shapes (the partials grow with tk * tq) keep the
 * separate dq pass. 64 MiB: vit3d-diffusion-64's 512-token self-attention takes 6 MiB. */
#define ATT_DQ_PARTIAL_MAX (16L << 20)

/* floats of P [batch][heads][tq][tk] the sgemm path's forward saves for shape s: one key tile and at most
 * ATT_SAVED_MAX, else 0 */
static size_t sgemm_saved_floats(const AttentionShape *s) {
    const size_t f = (size_t)s->batch * (size_t)s->heads * (size_t)s->tq * (size_t)s->tk;
    return s->tk <= ATT_FWD_BK && f * sizeof(float) <= (size_t)ATT_SAVED_MAX ? f : 0;
}
/* the saved P of whichever path runs shape s */
static size_t saved_floats(const AttentionShape *s) {
    return attention_cpu_tile_ok(s) ? attention_cpu_tile_saved_floats(s) : sgemm_saved_floats(s);
}

static void check(const AttentionShape *s, const char *fn) {
    cpu_need_f32(s->dtype, fn);
    const char *bad = attention_shape_error(s);
    if (*bad)
        vx_fatal("attention: %s (batch %d, heads %d, tq %d, tk %d, d %d)", bad, s->batch, s->heads, s->tq, s->tk,
                 s->d);
}

/* ---- forward ------------------------------------------------------------------------------------------------ */

/* Lane-wise row reductions: ATT_LANES independent partial maxima / sums, which the compiler turns into vector
 * registers without -ffast-math (a single running sum is an ordered reduction it must keep scalar, and that made
 * the softmax between the forward's two products a third of its time). The order is fixed by n alone. */
#define ATT_LANES 16
/* The maximum in GCC's vector types: gcc 12 keeps a lane array of `x > m ? x : m` scalar (no reduction pattern for
 * it without -ffinite-math-only), 16 loads and compares an iteration. Lanes compare as the scalar tail does, so a
 * NaN score is skipped either way, and a maximum does not depend on the order it is taken in. */
typedef float att_f32x16 __attribute__((vector_size(64)));
typedef int32_t att_i32x16 __attribute__((vector_size(64)));
static inline float row_max(const float *x, int n, float m0) {
    att_f32x16 m = (att_f32x16){0} + m0;
    int j = 0;
    for (; j + ATT_LANES <= n; j += ATT_LANES) {
        att_f32x16 v;
        memcpy(&v, x + j, sizeof v);
        const att_i32x16 gt = v > m;
        m = (att_f32x16)(((att_i32x16)v & gt) | ((att_i32x16)m & ~gt));
    }
    float r = m[0];
    for (int l = 1; l < ATT_LANES; l++) r = m[l] > r ? m[l] : r;
    for (; j < n; j++) r = x[j] > r ? x[j] : r;
    return r;
}
/* x = exp(x - mx) in place; returns the sum of the new x */
static inline float row_exp_sum(float *x, int n, float mx) {
    float s[ATT_LANES] = {0};
    int j = 0;
    for (; j + ATT_LANES <= n; j += ATT_LANES)
        for (int l = 0; l < ATT_LANES; l++) {
            x[j + l] = exp_vec(x[j + l] - mx);
            s[l] += x[j + l];
        }
    for (; j < n; j++) {
        x[j] = exp_vec(x[j] - mx);
        s[0] += x[j];
    }
    float r = 0.0f;
    for (int l = 0; l < ATT_LANES; l++) r += s[l];
    return r;
}

/* One forward job, keys in one tile (tk <= ATT_FWD_BK): S = scale Q K^T, P = softmax(S) row by row (normalised in
 * place, rows ld apart: the thread's tile, or the saved P), O = P V straight into o: no accumulator, no rescaling. */
static void forward_one_tile(const AttentionShape *s, const float *Q, const float *K, const float *V, float *O,
                             float *lse_rows, int rows, float *S, int ld) {
    const int d = s->d, kn = s->tk;
    cpu_sgemm(0, 1, rows, kn, d, s->scale, Q, s->ld_q, K, s->ld_k, 0.0f, S, ld);
    for (int r = 0; r < rows; r++) {
        float *sr = S + (size_t)r * ld;
        const float mt = row_max(sr, kn, -INFINITY), l = row_exp_sum(sr, kn, mt), inv = 1.0f / l;
        for (int j = 0; j < kn; j++) sr[j] *= inv;
        lse_rows[r] = mt + logf(l);
    }
    /* beta 0: both sgemms write C without reading it, NaN included (test_backend_ops fills outputs with NaN) */
    cpu_sgemm(0, 0, rows, d, kn, 1.0f, S, ld, V, s->ld_v, 0.0f, O, s->ld_o);
}

/* One forward job over key tiles of ATT_FWD_BK, in order, with the online softmax (running max m and sum l per
 * row, the accumulator rescaled by exp(m_old - m_new)); o = acc / l at the end. */
static void forward_tiled(const AttentionShape *s, const float *Q, const float *K, const float *V, float *O,
                          float *lse_rows, int rows, float *S, float *acc) {
    const int d = s->d;
    float m[ATT_BQ], l[ATT_BQ];
    for (int j0 = 0; j0 < s->tk; j0 += ATT_FWD_BK) {
        const int kn = s->tk - j0 < ATT_FWD_BK ? s->tk - j0 : ATT_FWD_BK;
        cpu_sgemm(0, 1, rows, kn, d, s->scale, Q, s->ld_q, K + (size_t)j0 * s->ld_k, s->ld_k, 0.0f, S, ATT_FWD_BK);
        for (int r = 0; r < rows; r++) {
            float *sr = S + (size_t)r * ATT_FWD_BK;
            if (j0 == 0) {
                m[r] = row_max(sr, kn, -INFINITY);
                l[r] = row_exp_sum(sr, kn, m[r]);
                continue;
            }
            const float mt = row_max(sr, kn, m[r]), sum = row_exp_sum(sr, kn, mt), corr = expf(m[r] - mt);
            l[r] = l[r] * corr + sum, m[r] = mt;
            if (corr != 1.0f)
                for (int c = 0; c < d; c++) acc[(size_t)r * d + c] *= corr;
        }
        cpu_sgemm(0, 0, rows, d, kn, 1.0f, S, ATT_FWD_BK, V + (size_t)j0 * s->ld_v, s->ld_v, j0 == 0 ? 0.0f : 1.0f,
                  acc, d);
    }
    for (int r = 0; r < rows; r++) {
        float *o = O + (size_t)r * s->ld_o;
        const float inv = 1.0f / l[r];
        for (int c = 0; c < d; c++) o[c] = acc[(size_t)r * d + c] * inv;
        lse_rows[r] = m[r] + logf(l[r]);
    }
}

static void cpu_forward(const AttentionShape *s, const void *qv, const void *kv, const void *vv, void *ov,
                        float *lse, void *saved, void *workspace) {
    check(s, "attention_forward");
    float *P = saved && saved_floats(s) ? saved : NULL; /* the memory for P, where the caller keeps it and it fits */
    if (attention_cpu_tile_ok(s)) {
        attention_cpu_tile_forward(s, qv, kv, vv, ov, lse, P);
        return;
    }
    const int d = s->d, qb = (s->tq + ATT_BQ - 1) / ATT_BQ, one_tile = s->tk <= ATT_FWD_BK;
    const long jobs = (long)s->batch * s->heads * qb;
    const float *Q = qv, *K = kv, *V = vv;
    float *O = ov;
    const int blas = cpu_gemm_serial_begin();
#pragma omp parallel if (jobs > 1 && att_work(s) >= ATT_PARALLEL_MIN)
    {
        float *S = att_job_alloc((size_t)ATT_BQ * ATT_FWD_BK);
        float *acc = one_tile ? NULL : att_job_alloc((size_t)ATT_BQ * d);
#pragma omp for schedule(static)
        for (long job = 0; job < jobs; job++) {
            const int b = (int)(job / ((long)s->heads * qb)), h = (int)(job / qb % s->heads);
            const int i0 = (int)(job % qb) * ATT_BQ, rows = s->tq - i0 < ATT_BQ ? s->tq - i0 : ATT_BQ;
            const float *Qj = Q + att_at(b, s->tq, i0, s->ld_q, h, d), *Kj = K + att_at(b, s->tk, 0, s->ld_k, h, d),
                        *Vj = V + att_at(b, s->tk, 0, s->ld_v, h, d);
            float *Oj = O + att_at(b, s->tq, i0, s->ld_o, h, d), *lj = lse + ((size_t)b * s->heads + h) * s->tq + i0;
            if (P) forward_one_tile(s, Qj, Kj, Vj, Oj, lj, rows, P + (((size_t)b * s->heads + h) * s->tq + i0) * s->tk,
                                    s->tk);
            else if (one_tile) forward_one_tile(s, Qj, Kj, Vj, Oj, lj, rows, S, ATT_FWD_BK);
            else forward_tiled(s, Qj, Kj, Vj, Oj, lj, rows, S, acc);
        }
        free(S);
        free(acc);
    }
    cpu_gemm_serial_end(blas);
}

/* ---- backward ----------------------------------------------------------------------------------------------- */

/* The tile's probabilities and score gradients, in place: P = exp(S - lse_i) into S, dS = P (dP - delta_i) into dP
 * (rows of ld floats; rows r are queries i0 + r of the (b, h) rows of lse and delta) */
static void tile_ds(int rows, int kn, int ld, float *S, float *dP, const float *lse, const float *delta) {
    for (int r = 0; r < rows; r++) {
        float *sr = S + (size_t)r * ld, *pr = dP + (size_t)r * ld;
        const float l = lse[r], dl = delta[r];
        for (int j = 0; j < kn; j++) {
            sr[j] = exp_vec(sr[j] - l);
            pr[j] = sr[j] * (pr[j] - dl);
        }
    }
}

/* dS = P (dP - delta_i) into dP from the forward's saved P (rows ldp apart) */
static void tile_ds_saved(int rows, int kn, int ld, float *dP, const float *P, int ldp, const float *delta) {
    for (int r = 0; r < rows; r++) {
        float *pr = dP + (size_t)r * ld;
        const float *sr = P + (size_t)r * ldp, dl = delta[r];
        for (int j = 0; j < kn; j++) pr[j] = sr[j] * (pr[j] - dl);
    }
}

/* floats of the fused backward's dq partials for shape s, 0 where it keeps the separate dq pass */
static size_t dq_partial_floats(const AttentionShape *s) {
    const size_t kb = (size_t)(s->tk + ATT_BKB - 1) / ATT_BKB;
    const size_t f = (size_t)s->batch * (size_t)s->heads * kb * (size_t)s->tq * (size_t)s->d;
    return f <= (size_t)ATT_DQ_PARTIAL_MAX ? f : 0;
}

/* dQ rows = beta*dQ + the sum of their key blocks' partials part [b][h][kb][tq][d], in key-block order */
static void sum_dq_partials(const AttentionShape *s, float *part, float *dQ, float beta) {
    const int d = s->d, kb = (s->tk + ATT_BKB - 1) / ATT_BKB;
    const long rows_all = (long)s->batch * s->heads * s->tq;
#pragma omp parallel for schedule(static) if (rows_all * d * kb >= (1L << 18))
    for (long row = 0; row < rows_all; row++) {
        const long bh = row / s->tq;
        const int i = (int)(row % s->tq), b = (int)(bh / s->heads), h = (int)(bh % s->heads);
        float *acc = part + ((size_t)bh * kb * s->tq + (size_t)i) * d; /* (summed into key block 0's) */
        for (int k = 1; k < kb; k++) {
            const float *q = acc + (size_t)k * s->tq * d;
            for (int c = 0; c < d; c++) acc[c] += q[c];
        }
        att_store_grad(1, d, acc, dQ + att_at(b, s->tq, i, s->ld_q, h, d), s->ld_q, beta);
    }
}

static void cpu_backward(const AttentionShape *s, const void *qv, const void *kv, const void *vv, const void *ov,
                         const void *dov, const float *lse, float *delta, const void *saved, void *dqv, void *dkv,
                         void *dvv, float beta, void *workspace) {
    check(s, "attention_backward");
    const int d = s->d, B = s->batch, H = s->heads;
    const float *Q = qv, *K = kv, *V = vv, *O = ov, *dO = dov;
    float *dQ = dqv, *dK = dkv, *dV = dvv;
    const long rows_all = (long)B * H * s->tq;
#pragma omp parallel for schedule(static) if (rows_all * d >= 16384)
    for (long row = 0; row < rows_all; row++) {
        const int b = (int)(row / ((long)H * s->tq)), h = (int)(row / s->tq % H), i = (int)(row % s->tq);
        const float *o = O + att_at(b, s->tq, i, s->ld_o, h, d), *g = dO + att_at(b, s->tq, i, s->ld_o, h, d);
        double acc = 0.0;
        for (int c = 0; c < d; c++) acc += (double)g[c] * o[c];
        delta[row] = (float)acc;
    }
    float *part = workspace && dq_partial_floats(s) ? workspace : NULL; /* the fused dq (ATT_DQ_PARTIAL_MAX) */
    const float *Psaved = saved && saved_floats(s) ? saved : NULL; /* the forward's P, in its path's layout */
    if (attention_cpu_tile_ok(s)) {
        attention_cpu_tile_backward(s, Q, K, V, dO, lse, delta, Psaved, part, dQ, dK, dV, beta);
        if (part) sum_dq_partials(s, part, dQ, beta);
        return;
    }
    const int kb = (s->tk + ATT_BKB - 1) / ATT_BKB, qb = (s->tq + ATT_BQ - 1) / ATT_BQ, QT = 2 * ATT_BQ;
    const long kjobs = (long)B * H * kb, qjobs = part ? 0 : (long)B * H * qb;
    const int blas = cpu_gemm_serial_begin();
#pragma omp parallel if (kjobs + qjobs > 2 && att_work(s) >= ATT_PARALLEL_MIN)
    {
        float *S = att_job_alloc((size_t)QT * ATT_BK), *dP = att_job_alloc((size_t)QT * ATT_BK);
        float *acc = att_job_alloc((size_t)2 * ATT_BKB * d), *acc2 = acc + (size_t)ATT_BKB * d;
        /* dk, dv: key block [j0, j0 + kn) against every query tile, in order */
#pragma omp for schedule(static)
        for (long job = 0; job < kjobs; job++) {
            const int b = (int)(job / ((long)H * kb)), h = (int)(job / kb % H);
            const int j0 = (int)(job % kb) * ATT_BKB, kn = s->tk - j0 < ATT_BKB ? s->tk - j0 : ATT_BKB;
            const float *Kb = K + att_at(b, s->tk, j0, s->ld_k, h, d), *Vb = V + att_at(b, s->tk, j0, s->ld_v, h, d);
            const size_t lrow = ((size_t)b * H + h) * s->tq;
            if (s->tq == 0) memset(acc, 0, sizeof(float) * (size_t)2 * ATT_BKB * d); /* no query: dk = dv = 0 */
            for (int i0 = 0; i0 < s->tq; i0 += QT) { /* acc: dk, acc2: dv; the first tile's products set them */
                const int qn = s->tq - i0 < QT ? s->tq - i0 : QT;
                const float first = i0 == 0 ? 0.0f : 1.0f;
                const float *Qt = Q + att_at(b, s->tq, i0, s->ld_q, h, d);
                const float *dOt = dO + att_at(b, s->tq, i0, s->ld_o, h, d);
                /* P: the saved tile, or S recomputed and exponentiated in place */
                const float *Pt = Psaved ? Psaved + (lrow + (size_t)i0) * s->tk + j0 : S;
                const int ldp = Psaved ? s->tk : ATT_BK;
                if (!Psaved) cpu_sgemm(0, 1, qn, kn, d, s->scale, Qt, s->ld_q, Kb, s->ld_k, 0.0f, S, ATT_BK);
                cpu_sgemm(0, 1, qn, kn, d, 1.0f, dOt, s->ld_o, Vb, s->ld_v, 0.0f, dP, ATT_BK);
                if (Psaved) tile_ds_saved(qn, kn, ATT_BK, dP, Pt, ldp, delta + lrow + i0);
                else tile_ds(qn, kn, ATT_BK, S, dP, lse + lrow + i0, delta + lrow + i0);
                cpu_sgemm(1, 0, kn, d, qn, 1.0f, Pt, ldp, dOt, s->ld_o, first, acc2, d);
                cpu_sgemm(1, 0, kn, d, qn, s->scale, dP, ATT_BK, Qt, s->ld_q, first, acc, d);
                if (part) { /* this key block's share of dq for the tile's queries: scale dS K (beta 0) */
                    float *pt = part + (((size_t)b * H + h) * kb + (size_t)(job % kb)) * s->tq * d + (size_t)i0 * d;
                    cpu_sgemm(0, 0, qn, d, kn, s->scale, dP, ATT_BK, Kb, s->ld_k, 0.0f, pt, d);
                }
            }
            att_store_grad(kn, d, acc, dK + att_at(b, s->tk, j0, s->ld_k, h, d), s->ld_k, beta);
            att_store_grad(kn, d, acc2, dV + att_at(b, s->tk, j0, s->ld_v, h, d), s->ld_v, beta);
        }
        /* dq: query block [i0, i0 + qn) against every key tile, in order */
#pragma omp for schedule(static)
        for (long job = 0; job < qjobs; job++) {
            const int b = (int)(job / ((long)H * qb)), h = (int)(job / qb % H);
            const int i0 = (int)(job % qb) * ATT_BQ, qn = s->tq - i0 < ATT_BQ ? s->tq - i0 : ATT_BQ;
            const float *Qb = Q + att_at(b, s->tq, i0, s->ld_q, h, d);
            const float *dOb = dO + att_at(b, s->tq, i0, s->ld_o, h, d);
            const size_t lrow = ((size_t)b * H + h) * s->tq + i0;
            for (int j0 = 0; j0 < s->tk; j0 += ATT_BK) { /* the first key tile's product sets acc */
                const int kn = s->tk - j0 < ATT_BK ? s->tk - j0 : ATT_BK;
                const float *Kt = K + att_at(b, s->tk, j0, s->ld_k, h, d);
                const float *Vt = V + att_at(b, s->tk, j0, s->ld_v, h, d);
                if (!Psaved) cpu_sgemm(0, 1, qn, kn, d, s->scale, Qb, s->ld_q, Kt, s->ld_k, 0.0f, S, ATT_BK);
                cpu_sgemm(0, 1, qn, kn, d, 1.0f, dOb, s->ld_o, Vt, s->ld_v, 0.0f, dP, ATT_BK);
                if (Psaved) tile_ds_saved(qn, kn, ATT_BK, dP, Psaved + lrow * s->tk + j0, s->tk, delta + lrow);
                else tile_ds(qn, kn, ATT_BK, S, dP, lse + lrow, delta + lrow);
                cpu_sgemm(0, 0, qn, d, kn, s->scale, dP, ATT_BK, Kt, s->ld_k, j0 == 0 ? 0.0f : 1.0f, acc, d);
            }
            att_store_grad(qn, d, acc, dQ + att_at(b, s->tq, i0, s->ld_q, h, d), s->ld_q, beta);
        }
        free(S);
        free(dP);
        free(acc);
    }
    cpu_gemm_serial_end(blas);
    if (part) sum_dq_partials(s, part, dQ, beta);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

/* the fused backward's dq partials (each job mallocs its tiles) */
static size_t cpu_workspace_bytes(const AttentionShape *s) { return dq_partial_floats(s) * sizeof(float); }
/* the forward's probabilities, where they fit */
static size_t cpu_saved_bytes(const AttentionShape *s) { return saved_floats(s) * sizeof(float); }

const AttentionOps attention_ops_cpu = {{op_supports_f32}, cpu_workspace_bytes, cpu_forward, cpu_backward, NULL,
                                        cpu_saved_bytes};

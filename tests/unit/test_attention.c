/* test_attention.c: cmocka tests of the CPU attention (kernels/attention/attention_cpu.c) beyond the op cases'
 * float64 comparison (tests/unit/op_cases.c):
 *   - its gradients against central finite differences of a float64 forward written here (plain loops, the scores
 *     materialised), for the objective L = sum(r * o), self and cross, packed QKV rows;
 *   - the tiled forward against a naive materialised float32 version (full [tq][tk] scores through sgemm, softmax,
 *     sgemm), at more tokens than one tile;
 *   - bit-identical outputs and gradients for 1 and 2 OpenMP threads.
 * `test_attention --bench T [d heads]` times the tiled forward and backward against the naive forward on one batch
 * entry (same BLAS, same threads) and prints the figures; it asserts nothing (timing is not a unit test).
 * `test_attention --dump DIR` writes two cases' inputs and outputs (DIR/<case>.shape, DIR/<case>.<tensor>.f32) for
 * tests/integration/test_attention_torch.py, which checks them against PyTorch in float64.
 * `test_attention --dump DIR cuda bf16|f16` does the same on the CUDA backend in that storage type (the inputs written
 * as the rounded values the op read, the outputs converted to float32), through whatever path VX_ATTN_CUDA picks
 * (cuDNN's fused attention or the own kernel); exit 77 with "skipped: ..." when no GPU is usable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention/attention.h"
#include "backend/backend.h"
#include "common/cpu_gemm.h"
#include "common/rng.h"

static float *rnd(long n, unsigned seed, float amp) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (long i = 0; i < n; i++) p[i] = amp * (2.0f * vx_uniform01(vx_hash3(seed, 7, (uint64_t)i)) - 1.0f);
    return p;
}
static long elems(const AttentionShape *s, int tokens, int ld) { return (long)s->batch * tokens * ld; }
static size_t at(int b, int tokens, int t, int ld, int h, int d) { return ((size_t)b * tokens + t) * ld + (size_t)h * d; }

/* L = sum r * o, o from a float64 forward with the scores materialised (inputs as doubles) */
static double loss64(const AttentionShape *s, const double *q, const double *k, const double *v, const float *r) {
    double L = 0;
    double *sc = malloc(sizeof(double) * (size_t)s->tk);
    for (int b = 0; b < s->batch; b++)
        for (int h = 0; h < s->heads; h++)
            for (int i = 0; i < s->tq; i++) {
                double m = -INFINITY, sum = 0;
                for (int j = 0; j < s->tk; j++) {
                    double dot = 0;
                    for (int c = 0; c < s->d; c++)
                        dot += q[at(b, s->tq, i, s->ld_q, h, s->d) + c] * k[at(b, s->tk, j, s->ld_k, h, s->d) + c];
                    sc[j] = s->scale * dot;
                    m = sc[j] > m ? sc[j] : m;
                }
                for (int j = 0; j < s->tk; j++) sum += exp(sc[j] - m);
                for (int c = 0; c < s->d; c++) {
                    double o = 0;
                    for (int j = 0; j < s->tk; j++) o += exp(sc[j] - m) / sum * v[at(b, s->tk, j, s->ld_v, h, s->d) + c];
                    L += r[at(b, s->tq, i, s->ld_o, h, s->d) + c] * o;
                }
            }
    free(sc);
    return L;
}

static double *widen(const float *x, long n) {
    double *p = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (long i = 0; i < n; i++) p[i] = x[i];
    return p;
}

/* 1: backward gets the workspace its shape asks for (the fused dq: attention_cpu.c's ATT_DQ_PARTIAL_MAX), as a
 * model's plan gives it; 0: NULL (the separate dq pass) */
static int with_workspace;
/* 1: the forward saves P (saved_bytes(s), as a model's plan gives it) and the backward reads it; 0: NULL (the
 * backward recomputes S and exp(S - lse) per tile). `saved_p` holds it from cpu_forward to cpu_backward. */
static int with_saved;
static void *saved_p;

static void cpu_forward(const AttentionShape *s, const float *q, const float *k, const float *v, float *o,
                        float *lse) {
    free(saved_p);
    saved_p = NULL;
    const size_t bytes = with_saved ? attention_ops_cpu.saved_bytes(s) : 0;
    if (with_saved) assert_true(bytes > 0);
    if (bytes) saved_p = malloc(bytes);
    attention_ops_cpu.forward(s, q, k, v, o, lse, saved_p, NULL);
}

static void cpu_backward(const AttentionShape *s, const float *q, const float *k, const float *v, const float *o,
                         const float *dout, const float *lse, float *delta, float *dq, float *dk, float *dv) {
    const size_t bytes = with_workspace ? attention_ops_cpu.workspace_bytes(s) : 0;
    void *ws = bytes ? malloc(bytes) : NULL;
    if (with_workspace) assert_true(bytes > 0);
    attention_ops_cpu.backward(s, q, k, v, o, dout, lse, delta, with_saved ? saved_p : NULL, dq, dk, dv, 0.0f, ws);
    free(ws);
}

/* every gradient element of q, k, v (the head columns only) against central differences of loss64 */
static void check_fd(AttentionShape s) {
    const long nq = elems(&s, s.tq, s.ld_q), nk = elems(&s, s.tk, s.ld_k), nv = elems(&s, s.tk, s.ld_v);
    const long no = elems(&s, s.tq, s.ld_o);
    float *q = rnd(nq, 1, 1.5f), *k = rnd(nk, 2, 1.0f), *v = rnd(nv, 3, 1.0f), *r = rnd(no, 4, 1.0f);
    float *o = rnd(no, 5, 0.0f), *lse = rnd((long)s.batch * s.heads * s.tq, 6, 0.0f);
    float *delta = rnd((long)s.batch * s.heads * s.tq, 7, 0.0f);
    float *g[3] = {rnd(nq, 8, 0.0f), rnd(nk, 9, 0.0f), rnd(nv, 10, 0.0f)};
    cpu_forward(&s, q, k, v, o, lse);
    cpu_backward(&s, q, k, v, o, r, lse, delta, g[0], g[1], g[2]);
    double *x[3] = {widen(q, nq), widen(k, nk), widen(v, nv)};
    const long n[3] = {nq, nk, nv};
    const int ld[3] = {s.ld_q, s.ld_k, s.ld_v};
    const double eps = 1e-4;
    for (int t = 0; t < 3; t++) {
        double worst = 0, scale = 0;
        for (long i = 0; i < n[t]; i++) {
            if (i % ld[t] >= s.heads * s.d) continue; /* not a head column: no gradient written */
            const double keep = x[t][i];
            x[t][i] = keep + eps;
            const double lp = loss64(&s, x[0], x[1], x[2], r);
            x[t][i] = keep - eps;
            const double lm = loss64(&s, x[0], x[1], x[2], r);
            x[t][i] = keep;
            const double fd = (lp - lm) / (2 * eps), e = fabs(fd - g[t][i]);
            worst = e > worst ? e : worst;
            scale = fabs(fd) > scale ? fabs(fd) : scale;
        }
        if (!(worst <= 1e-4 * scale)) fail_msg("gradient %d: max |fd - analytic| %.3g of max |fd| %.3g", t, worst, scale);
    }
    for (int t = 0; t < 3; t++) free(x[t]), free(g[t]);
    free(q), free(k), free(v), free(r), free(o), free(lse), free(delta);
}

static void test_fd_self(void **state) { check_fd(attention_shape(2, 2, 7, 7, 8, DT_F32)); }
static void test_fd_cross(void **state) {
    AttentionShape s = attention_shape(1, 3, 5, 9, 4, DT_F32);
    s.scale = 1.0f; /* peaked scores */
    check_fd(s);
}
static void test_fd_packed(void **state) {
    AttentionShape s = attention_shape(2, 2, 6, 6, 4, DT_F32);
    s.ld_q = s.ld_k = s.ld_v = 3 * s.heads * s.d;
    check_fd(s);
}
/* the fused dq: the same shapes, and one of three key blocks (128, 128, 2 keys) whose partials are summed */
static void test_fd_fused(void **state) {
    with_workspace = 1;
    test_fd_self(state);
    test_fd_cross(state);
    test_fd_packed(state);
    AttentionShape s = attention_shape(1, 2, 3, 258, 4, DT_F32);
    s.ld_q = s.ld_k = s.ld_v = 3 * s.heads * s.d;
    check_fd(s);
    with_workspace = 0;
}
/* the forward's saved P read by the backward: the same shapes, with the separate dq pass and with the fused dq */
static void test_fd_saved(void **state) {
    with_saved = 1;
    for (with_workspace = 0; with_workspace <= 1; with_workspace++) {
        test_fd_self(state);
        test_fd_cross(state);
        test_fd_packed(state);
    }
    with_saved = with_workspace = 0;
}

/* The register-tile path (attention_cpu_tile.c: d a multiple of the build's vector width, 16 on AVX-512 and 8 on
 * AVX2; the shapes above, d 4 and 8, keep the cpu_sgemm path there) in all four modes (saved P or not, fused dq or
 * not), at the shapes above with d 16. Several blocks of queries and keys, with partial last ones, are checked
 * against float64 by test_backend_ops (70 x 70, 7 x 100, 1000 x 1000 tokens) and between the modes below (300 x 300):
 * differences here would take ~10 s a mode at 65 x 129 tokens. */
static void test_fd_tile(void **state) {
    for (int mode = 0; mode < 4; mode++) {
        with_workspace = mode & 1, with_saved = mode >> 1;
        check_fd(attention_shape(2, 2, 7, 7, 16, DT_F32));
        AttentionShape s = attention_shape(1, 3, 5, 9, 16, DT_F32);
        s.scale = 1.0f;
        check_fd(s);
        s = attention_shape(2, 2, 6, 6, 16, DT_F32);
        s.ld_q = s.ld_k = s.ld_v = 3 * s.heads * s.d;
        check_fd(s);
    }
    with_saved = with_workspace = 0;
}

/* the naive materialised forward in float32: S = scale Q K^T [tq][tk] per (b, h), row softmax, O = P V */
static void naive_forward(const AttentionShape *s, const float *q, const float *k, const float *v, float *o,
                          float *lse) {
    float *S = malloc(sizeof(float) * (size_t)s->tq * s->tk);
    for (int b = 0; b < s->batch; b++)
        for (int h = 0; h < s->heads; h++) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->tq, s->tk, s->d, s->scale,
                        q + at(b, s->tq, 0, s->ld_q, h, s->d), s->ld_q, k + at(b, s->tk, 0, s->ld_k, h, s->d),
                        s->ld_k, 0.0f, S, s->tk);
#pragma omp parallel for schedule(static)
            for (int i = 0; i < s->tq; i++) {
                float *row = S + (size_t)i * s->tk, m = row[0], sum = 0;
                for (int j = 1; j < s->tk; j++) m = row[j] > m ? row[j] : m;
                for (int j = 0; j < s->tk; j++) sum += row[j] = expf(row[j] - m);
                for (int j = 0; j < s->tk; j++) row[j] /= sum;
                if (lse) lse[((size_t)b * s->heads + h) * s->tq + i] = m + logf(sum);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->tq, s->d, s->tk, 1.0f, S, s->tk,
                        v + at(b, s->tk, 0, s->ld_v, h, s->d), s->ld_v, 0.0f, o + at(b, s->tq, 0, s->ld_o, h, s->d),
                        s->ld_o);
        }
    free(S);
}

/* o and lse against the naive forward: keys in one forward tile (530), and in three (2500: two full tiles of
 * ATT_FWD_BK and a part, through the online softmax's rescaling) */
static void against_naive(const AttentionShape s) {
    const long nq = elems(&s, s.tq, s.ld_q), nk = elems(&s, s.tk, s.ld_k), rows = (long)s.batch * s.heads * s.tq;
    float *q = rnd(nq, 1, 3.0f), *k = rnd(nk, 2, 1.0f), *v = rnd(nk, 3, 1.0f);
    float *o = rnd(nq, 4, 0.0f), *o2 = rnd(nq, 5, 0.0f), *lse = rnd(rows, 6, 0.0f), *lse2 = rnd(rows, 7, 0.0f);
    attention_ops_cpu.forward(&s, q, k, v, o, lse, NULL, NULL);
    naive_forward(&s, q, k, v, o2, lse2);
    double worst = 0, worst_lse = 0;
    for (long i = 0; i < nq; i++) worst = fabs(o[i] - o2[i]) > worst ? fabs(o[i] - o2[i]) : worst;
    for (long i = 0; i < rows; i++)
        worst_lse = fabs(lse[i] - lse2[i]) > worst_lse ? fabs(lse[i] - lse2[i]) : worst_lse;
    assert_true(worst < 2e-6);
    assert_true(worst_lse < 2e-5);
    free(q), free(k), free(v), free(o), free(o2), free(lse), free(lse2);
}
static void test_against_naive(void **state) {
    (void)state;
    against_naive(attention_shape(1, 3, 700, 530, 64, DT_F32));
    against_naive(attention_shape(1, 2, 90, 2500, 32, DT_F32));
}

/* forward and backward outputs with `threads` OpenMP threads, into one buffer */
static float *run_all(const AttentionShape *s, int threads, long *count) {
    const long nq = elems(s, s->tq, s->ld_q), nk = elems(s, s->tk, s->ld_k), rows = (long)s->batch * s->heads * s->tq;
    float *q = rnd(nq, 1, 3.0f), *k = rnd(nk, 2, 1.0f), *v = rnd(nk, 3, 1.0f), *dout = rnd(nq, 4, 1.0f);
    float *delta = rnd(rows, 5, 0.0f);
    *count = 2 * nq + 2 * nk + rows;
    float *out = rnd(*count, 6, 0.0f);
    float *o = out, *dq = o + nq, *dk = dq + nq, *dv = dk + nk, *lse = dv + nk;
    omp_set_num_threads(threads);
    cpu_forward(s, q, k, v, o, lse);
    cpu_backward(s, q, k, v, o, dout, lse, delta, dq, dk, dv);
    omp_set_num_threads(2);
    free(q), free(k), free(v), free(dout), free(delta);
    return out;
}

static void threads_agree(const AttentionShape s) {
    for (int mode = 0; mode < 4; mode++) {
        with_workspace = mode & 1, with_saved = (mode >> 1) && attention_ops_cpu.saved_bytes(&s);
        long n1, n2;
        float *a = run_all(&s, 1, &n1), *b = run_all(&s, 2, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(a, b, sizeof(float) * (size_t)n1);
        free(a), free(b);
    }
    with_workspace = with_saved = 0;
}
static void test_threads(void **state) {
    (void)state;
    threads_agree(attention_shape(2, 3, 300, 300, 32, DT_F32));
    threads_agree(attention_shape(1, 2, 70, 1100, 16, DT_F32)); /* two forward tiles */
}

/* the backward from the forward's saved P and from S recomputed: the same outputs to float rounding (P's two
 * roundings differ), at 300 keys (three key blocks of the dk dv jobs, two tiles of the dq pass), either dq path */
static void test_saved_is_the_recompute(void **state) {
    (void)state;
    const AttentionShape s = attention_shape(2, 3, 300, 300, 32, DT_F32);
    for (with_workspace = 0; with_workspace <= 1; with_workspace++) {
        long n1, n2;
        with_saved = 0;
        float *a = run_all(&s, 2, &n1);
        with_saved = 1;
        float *b = run_all(&s, 2, &n2);
        with_saved = 0;
        assert_int_equal(n1, n2);
        double worst = 0, mag = 0;
        for (long i = 0; i < n1; i++) worst = fmax(worst, fabs(a[i] - b[i])), mag = fmax(mag, fabs(a[i]));
        assert_true(mag > 0 && worst <= 1e-5 * mag);
        free(a), free(b);
    }
    with_workspace = 0;
}

/* the fused dq and the separate pass: the same gradients but for the order of dq's sums (dk, dv the same bits) */
static void test_fused_dq_is_the_dq_pass(void **state) {
    const AttentionShape s = attention_shape(2, 3, 300, 300, 32, DT_F32);
    const long nq = elems(&s, s.tq, s.ld_q), nk = elems(&s, s.tk, s.ld_k);
    long n1, n2;
    with_workspace = 0;
    float *a = run_all(&s, 2, &n1);
    with_workspace = 1;
    float *b = run_all(&s, 2, &n2);
    with_workspace = 0;
    double worst = 0, mag = 0;
    for (long i = nq; i < 2 * nq; i++) worst = fmax(worst, fabs(a[i] - b[i])), mag = fmax(mag, fabs(a[i]));
    assert_true(mag > 0 && worst <= 1e-5 * mag);
    assert_memory_equal(a + 2 * nq, b + 2 * nq, sizeof(float) * (size_t)(2 * nk)); /* dk, dv */
    free(a), free(b);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* --bench T [d heads]: seconds per call, best of 3, and GFLOP/s at FlashAttention's count (4 tq tk d forward) */
static int bench(int T, int d, int heads) {
    const AttentionShape s = attention_shape(1, heads, T, T, d, DT_F32);
    const long n = elems(&s, T, s.ld_q), rows = (long)heads * T;
    float *q = rnd(n, 1, 3.0f), *k = rnd(n, 2, 1.0f), *v = rnd(n, 3, 1.0f), *o = rnd(n, 4, 0.0f);
    float *lse = rnd(rows, 5, 0.0f), *delta = rnd(rows, 6, 0.0f), *g = rnd(3 * n, 7, 0.0f);
    const double fw = 4.0 * heads * (double)T * T * d;
    double best[6] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
    const size_t ws_bytes = attention_ops_cpu.workspace_bytes(&s), p_bytes = attention_ops_cpu.saved_bytes(&s);
    void *ws = ws_bytes ? malloc(ws_bytes) : NULL, *P = p_bytes ? malloc(p_bytes) : NULL;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        attention_ops_cpu.forward(&s, q, k, v, o, lse, NULL, NULL);
        double t1 = now();
        attention_ops_cpu.backward(&s, q, k, v, o, o, lse, delta, NULL, g, g + n, g + 2 * n, 0.0f, NULL);
        double t2 = now();
        if (ws) attention_ops_cpu.backward(&s, q, k, v, o, o, lse, delta, NULL, g, g + n, g + 2 * n, 0.0f, ws);
        const double t3 = now();
        best[0] = t1 - t0 < best[0] ? t1 - t0 : best[0];
        best[1] = t2 - t1 < best[1] ? t2 - t1 : best[1];
        best[3] = t3 - t2 < best[3] ? t3 - t2 : best[3];
        if (P) { /* as a model runs it: the forward saves P, the backward reads it (with the workspace) */
            t0 = now();
            attention_ops_cpu.forward(&s, q, k, v, o, lse, P, NULL);
            t1 = now();
            attention_ops_cpu.backward(&s, q, k, v, o, o, lse, delta, P, g, g + n, g + 2 * n, 0.0f, ws);
            t2 = now();
            best[4] = t1 - t0 < best[4] ? t1 - t0 : best[4];
            best[5] = t2 - t1 < best[5] ? t2 - t1 : best[5];
        }
        if ((double)T * T * 4 <= 2e9) { /* the naive one's score matrix must fit */
            t0 = now();
            naive_forward(&s, q, k, v, o, NULL);
            t1 = now();
            best[2] = t1 - t0 < best[2] ? t1 - t0 : best[2];
        }
    }
    { /* the ceiling in the same run: sgemm 2048^3, the GEMM the kernel calls (cpu_sgemm), same threads */
        const int m = 2048;
        float *a = rnd((long)m * m, 8, 1.0f), *c = rnd((long)m * m, 9, 0.0f);
        double t0 = now(), best_g = 1e30;
        for (int rep = 0; rep < 3; rep++, t0 = now()) {
            cpu_sgemm(0, 0, m, m, m, 1.0f, a, m, a, m, 0.0f, c, m);
            best_g = now() - t0 < best_g ? now() - t0 : best_g;
        }
        printf("ceiling: %s 2048^3 %.1f GFLOP/s\n", cpu_gemm_kernels(), 2.0 * m * m * m / best_g * 1e-9);
        free(a), free(c);
    }
    printf("attention T %d d %d heads %d, %d threads: tiled forward %.3f s (%.1f GFLOP/s), backward %.3f s "
           "(%.1f GFLOP/s at 2.5x forward's work); naive materialised forward %s",
           T, d, heads, omp_get_max_threads(), best[0], fw / best[0] * 1e-9, best[1], 2.5 * fw / best[1] * 1e-9,
           best[2] < 1e29 ? "" : "not run (scores too large)\n");
    if (best[2] < 1e29) printf("%.3f s (%.1f GFLOP/s)\n", best[2], fw / best[2] * 1e-9);
    if (ws) printf("backward with its workspace (dq from the dk dv pass): %.3f s (%.1f GFLOP/s at 2.5x forward's work)\n",
                   best[3], 2.5 * fw / best[3] * 1e-9);
    if (P)
        printf("with the forward's P saved (%.1f MiB): forward %.3f s (%.1f GFLOP/s), backward %.3f s (%.1f GFLOP/s at "
               "2.5x forward's work)\n", p_bytes / 1048576.0, best[4], fw / best[4] * 1e-9, best[5],
               2.5 * fw / best[5] * 1e-9);
    free(ws), free(P);
    free(q), free(k), free(v), free(o), free(lse), free(delta), free(g);
    return 0;
}

static void write_f32(const char *dir, const char *name, const char *what, const float *x, long n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s.f32", dir, name, what);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof(float), (size_t)n, f) != (size_t)n || fclose(f) != 0) {
        fprintf(stderr, "test_attention: cannot write %s\n", path);
        exit(2);
    }
}

/* The CUDA backend's forward and backward of s (storage s.dtype) on host float32 buffers: inputs rounded to the
 * storage type in place (what the op reads), outputs back as float32. */
static void run_cuda(const Backend *be, const AttentionShape *s, float *const in[4], float *const out[5],
                     const long n[9]) {
    const size_t es = dtype_size(s->dtype), rows = (size_t)s->batch * s->heads * s->tq;
    void *dev[9];
    for (int i = 0; i < 9; i++) {
        const int f32 = i == 5; /* lse */
        const size_t bytes = (size_t)(n[i] > 0 ? n[i] : 1) * (f32 ? sizeof(float) : es);
        dev[i] = be->alloc(bytes);
        if (i < 4) { /* q k v dout */
            void *h = malloc(bytes);
            dtype_convert((size_t)n[i], DT_F32, in[i], s->dtype, h);
            dtype_convert((size_t)n[i], s->dtype, h, DT_F32, in[i]);
            be->copy_to_device(dev[i], h, bytes);
            free(h);
        }
    }
    const size_t ws_bytes = be->attention->workspace_bytes(s);
    void *delta = be->alloc(sizeof(float) * (rows ? rows : 1)), *ws = ws_bytes ? be->alloc(ws_bytes) : NULL;
    /* dev: q k v dout o lse dq dk dv */
    be->attention->forward(s, dev[0], dev[1], dev[2], dev[4], dev[5], NULL, ws);
    be->attention->backward(s, dev[0], dev[1], dev[2], dev[4], dev[3], dev[5], delta, NULL, dev[6], dev[7], dev[8],
                            0.0f, ws);
    be->synchronize();
    for (int i = 4; i < 9; i++) {
        const int f32 = i == 5;
        const size_t bytes = (size_t)(n[i] > 0 ? n[i] : 1) * (f32 ? sizeof(float) : es);
        void *h = malloc(bytes);
        be->copy_to_host(h, dev[i], bytes);
        dtype_convert((size_t)n[i], f32 ? DT_F32 : s->dtype, h, DT_F32, out[i - 4]);
        free(h);
    }
}

/* one case's inputs (q k v dout) and the op's outputs (o lse dq dk dv), and its shape as text; be NULL: the CPU */
static void dump_case(const char *dir, const char *name, AttentionShape s, const Backend *be) {
    const long nq = elems(&s, s.tq, s.ld_q), nk = elems(&s, s.tk, s.ld_k), nv = elems(&s, s.tk, s.ld_v);
    const long no = elems(&s, s.tq, s.ld_o), rows = (long)s.batch * s.heads * s.tq;
    float *q = rnd(nq, 11, 2.0f), *k = rnd(nk, 12, 1.0f), *v = rnd(nv, 13, 1.0f), *dout = rnd(no, 14, 1.0f);
    float *o = rnd(no, 15, 0.0f), *lse = rnd(rows, 16, 0.0f), *delta = rnd(rows, 17, 0.0f);
    float *dq = rnd(nq, 18, 0.0f), *dk = rnd(nk, 19, 0.0f), *dv = rnd(nv, 20, 0.0f);
    if (be) {
        run_cuda(be, &s, (float *const[4]){q, k, v, dout}, (float *const[5]){o, lse, dq, dk, dv},
                 (const long[9]){nq, nk, nv, no, no, rows, nq, nk, nv});
    } else {
        attention_ops_cpu.forward(&s, q, k, v, o, lse, NULL, NULL);
        attention_ops_cpu.backward(&s, q, k, v, o, dout, lse, delta, NULL, dq, dk, dv, 0.0f, NULL);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s.shape", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) exit(2);
    fprintf(f, "%d %d %d %d %d %d %d %d %d %.9g\n", s.batch, s.heads, s.tq, s.tk, s.d, s.ld_q, s.ld_k, s.ld_v,
            s.ld_o, (double)s.scale);
    fclose(f);
    const struct { const char *what; const float *x; long n; } out[] = {
        {"q", q, nq}, {"k", k, nk}, {"v", v, nv}, {"dout", dout, no}, {"o", o, no},
        {"lse", lse, rows}, {"dq", dq, nq}, {"dk", dk, nk}, {"dv", dv, nv}};
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) write_f32(dir, name, out[i].what, out[i].x, out[i].n);
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(delta), free(dq), free(dk), free(dv);
}

/* the cases; on the GPU with head dims that are multiples of 8 and 16-byte rows (what cuDNN's graph takes) */
static int dump(const char *dir, const char *device, const char *type) {
    const Backend *be = NULL;
    DType dt = DT_F32;
    if (device) {
        if (strcmp(device, "cuda") != 0 || !type || (strcmp(type, "bf16") != 0 && strcmp(type, "f16") != 0)) {
            fprintf(stderr, "test_attention: --dump DIR [cuda bf16|f16]\n");
            return 2;
        }
        dt = strcmp(type, "bf16") == 0 ? DT_BF16 : DT_F16;
        char why[256];
        if (!backend_cuda_init(0, why, sizeof why)) {
            printf("skipped: no CUDA device (%s)\n", why);
            return 77;
        }
        be = backend_cuda();
    }
    AttentionShape packed = attention_shape(2, 3, 37, 37, 16, dt);
    packed.ld_q = packed.ld_k = packed.ld_v = 3 * packed.heads * packed.d; /* rows of a packed QKV */
    dump_case(dir, "self_packed", packed, be);
    dump_case(dir, "cross", attention_shape(1, 2, 20, 300, 32, dt), be); /* more keys than a CPU tile */
    AttentionShape peaked = attention_shape(1, 1, 70, 70, 64, dt);
    peaked.scale = 1.0f;
    dump_case(dir, "peaked", peaked, be);
    if (be) backend_cuda_shutdown();
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--dump") == 0) return dump(argv[2], argc > 3 ? argv[3] : NULL, argc > 4 ? argv[4] : NULL);
    if (argc > 2 && strcmp(argv[1], "--bench") == 0)
        return bench(atoi(argv[2]), argc > 3 ? atoi(argv[3]) : 64, argc > 4 ? atoi(argv[4]) : 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_self),      cmocka_unit_test(test_fd_cross), cmocka_unit_test(test_fd_packed),
        cmocka_unit_test(test_fd_fused),     cmocka_unit_test(test_fd_saved),
        cmocka_unit_test(test_fd_tile),     cmocka_unit_test(test_fused_dq_is_the_dq_pass),
        cmocka_unit_test(test_saved_is_the_recompute),
        cmocka_unit_test(test_against_naive), cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

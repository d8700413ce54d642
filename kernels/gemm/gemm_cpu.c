/* gemm_cpu.c: the float32 CPU batched GEMM with epilogues and the bias gradient (gemm.h), through cpu_sgemm
 * (OpenBLAS, or oneDNN's sgemm where OpenBLAS's kernels are older than the CPU: cpu_gemm.h).
 * matmul: the work is cut into jobs of (batch entry, ~GEMM_ROWS rows of C, ~GEMM_COLS columns of C; job_size),
 * each one single-threaded sgemm on one OpenMP thread (OpenBLAS switched to one thread for the call,
 * cpu_gemm_serial_begin; oneDNN's runs on the calling thread inside a parallel region) followed by its epilogue
 * on the same block; the jobs depend on the shape only and each output element's sum over k is one sgemm's, so
 * the bits do not depend on the thread count. With sample_rows the rows of C are cut per sample first (jobs start
 * at each sample's first row), so they do not depend on the sample's slot either.
 * Why 256 x 512: each job's sgemm packs its panel of B (k x GEMM_COLS) again; with 64-row jobs (the first choice)
 * that packing cost as much as the product: 1024x1536x384 (x W^T, a ViT's MLP) ran at 160 GFLOP/s against 466 for
 * 256-row jobs and 461 for one 2-thread sgemm (2-core AVX-512 EPYC, OpenBLAS 0.3.21). Column panels keep enough jobs
 * for many cores when m is small. bias_grad: jobs of columns; per column, partials in double per fixed chunk of
 * GEMM_ROWS rows, added in order.
 * bf16 math (GemmShape.bf16_math): A and B are rounded to bf16 once per call, into a buffer of the calling thread,
 * and the same jobs run cpu_gemm_bf16 (oneDNN's bf16 matmul, one thread a job) in place of sgemm, into a tile of the
 * thread's where an epilogue follows; the epilogues are unchanged. Products thinner than 16 in any dimension stay
 * float32 (gemm_bf16_pays). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_gemm.h"
#include "common/cpu_gemm_bf16.h"
#include "common/cpu_op.h"
#include "common/cpu_vector_width.h"
#include "gelu/gelu_math.h"
#include "gemm/gemm.h"

#define GEMM_ROWS 256L
#define GEMM_COLS 512L
/* multiply-adds below which a product runs on the calling thread: a parallel region costs more than such a product,
 * and on a shared machine it waits for a core (the jobs, and so the bits, are the same either way) */
#define GEMM_PARALLEL_MIN (1L << 20)

/* rows (or columns) per job along an extent of n: at most about `most` each, in an even number of parts when more
 * than one (so two, four, ... threads get the same number), each a multiple of 16 but the last. A function of the
 * shape alone, so the bits do not depend on the thread count. Why: 256-row jobs cut qkv's weight gradient (1152
 * rows of C) into 4 x 256 + 128 and proj's (384) into 256 + 128, so one of two threads had twice the other's work. */
static long job_size(long n, long most) {
    long parts = (n + most - 1) / most;
    if (parts > 1 && parts % 2) parts++;
    const long size = (n + parts - 1) / parts;
    return (size + 15) / 16 * 16;
}

/* GELU over one row with `kind` a constant where these are inlined (0 tanh, 1 erf), so GCC vectorises one formula.
 * Why: with kind read at run time the loops computed both formulas under masks; the same bits either way (no
 * reassociation). */
static inline __attribute__((always_inline)) void gelu_row(int kind, int n, float *restrict c, float *restrict aux) {
    if (aux)
        for (int j = 0; j < n; j++) {
            aux[j] = c[j];
            c[j] = gelu_value(kind, c[j]);
        }
    else
        for (int j = 0; j < n; j++) c[j] = gelu_value(kind, c[j]);
}
/* the same with the bias added in the same pass (the same bits as adding it first: pre = c + bias, then GELU) */
static inline __attribute__((always_inline)) void bias_gelu_row(int kind, int n, float *restrict c,
                                                                float *restrict aux, const float *restrict bias) {
    if (aux)
        for (int j = 0; j < n; j++) {
            const float pre = c[j] + bias[j];
            aux[j] = pre;
            c[j] = gelu_value(kind, pre);
        }
    else
        for (int j = 0; j < n; j++) c[j] = gelu_value(kind, c[j] + bias[j]);
}
static inline __attribute__((always_inline)) void dgelu_row(int kind, int n, float *restrict c,
                                                            const float *restrict aux) {
    for (int j = 0; j < n; j++) c[j] *= gelu_grad(kind, aux[j]);
}

/* pre = C (alpha AB + beta C from sgemm) + bias; aux = pre; C = epilogue(pre) on a block of `rows` rows of n
 * columns (c, aux and bias at the block's first column; c's rows ldc apart, aux's s->n) */
VX_CPU_WIDE static void epilogue(const GemmShape *s, long rows, int n, const float *bias, float *c, long ldc,
                                 float *aux) {
    const int ld = s->n, e = s->epilogue;
    for (long r = 0; r < rows; r++) {
        float *cr = c + r * ldc, *ar = aux ? aux + r * ld : NULL;
        if (e == GEMM_EPI_DGELU_TANH) dgelu_row(0, n, cr, ar);
        if (e == GEMM_EPI_DGELU_ERF) dgelu_row(1, n, cr, ar);
        if (e == GEMM_EPI_DGELU_TANH || e == GEMM_EPI_DGELU_ERF) continue;
        if (bias && e == GEMM_EPI_GELU_TANH) bias_gelu_row(0, n, cr, ar, bias);
        else if (bias && e == GEMM_EPI_GELU_ERF) bias_gelu_row(1, n, cr, ar, bias);
        else if (bias)
            for (int j = 0; j < n; j++) cr[j] += bias[j];
        else if (e == GEMM_EPI_GELU_TANH) gelu_row(0, n, cr, ar);
        else if (e == GEMM_EPI_GELU_ERF) gelu_row(1, n, cr, ar);
    }
}

/* *buf grown to at least `bytes` (its contents not kept): the calling thread's buffers below, which grow to the
 * largest call's and are kept (a step calls the same shapes again; freed never, as the thread's other caches) */
static void *thread_buffer(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        *cap = bytes;
        *buf = vx_malloc(bytes);
    }
    return *buf;
}

/* A and B rounded to bf16, in one buffer of the calling thread */
static void bf16_inputs(const GemmShape *s, const float *a, const float *b, const uint16_t **a16,
                        const uint16_t **b16) {
    static _Thread_local void *buf;
    static _Thread_local size_t cap;
    const long na = gemm_span(s, s->stride_a, (long)s->m * s->k);
    const long nb = gemm_span(s, s->stride_b, (long)s->k * s->n);
    uint16_t *both = thread_buffer(&buf, &cap, sizeof(uint16_t) * (size_t)(na + nb));
    cpu_round_to_bf16(a, both, na);
    cpu_round_to_bf16(b, both + na, nb);
    *a16 = both;
    *b16 = both + na;
}

/* A float32 tile of `floats` for the calling thread's job */
static float *job_tile(long floats) {
    static _Thread_local void *buf;
    static _Thread_local size_t cap;
    return thread_buffer(&buf, &cap, sizeof(float) * (size_t)floats);
}

/* Whether a product with bf16_math runs in bf16: where each of m, n and k is at least BF16_MIN_DIM (an AMX tile's 16
 * rows). Why: a thinner product, the adaLN modulation's 2 rows (batch 2) x 2304 x 384 and its gradients, does little
 * arithmetic per element it rounds, and in bf16 it ran slower than in float32 (428 against 280 us forward, 385 against
 * 294 for dX; vit3d-diffusion-64's adaLN layers 11.5 ms a step in bf16, 4.6 in float32, 2-core AMX Xeon). Such
 * products are computed in float32, as without bf16 math. */
#define BF16_MIN_DIM 16
static int gemm_bf16_pays(const GemmShape *s) {
    return s->bf16_math && s->m >= BF16_MIN_DIM && s->n >= BF16_MIN_DIM && s->k >= BF16_MIN_DIM;
}

static void cpu_matmul(const GemmShape *s, const void *av, const void *bv, const float *bias, void *cv, void *auxv,
                       float beta) {
    cpu_need_f32(s->dtype, "gemm_matmul");
    const char *bad = gemm_shape_error(s);
    if (*bad) vx_fatal("gemm: %s (batch %d, m %d, n %d, k %d)", bad, s->batch, s->m, s->n, s->k);
    const int dgelu = s->epilogue == GEMM_EPI_DGELU_TANH || s->epilogue == GEMM_EPI_DGELU_ERF;
    if (dgelu && (!auxv || beta != 0.0f || bias)) vx_fatal("gemm: the DGELU epilogue needs aux, beta 0 and no bias");
    if (!s->m || !s->n) return;
    /* rows of C in blocks of `block` (a sample's rows, or all m): jobs of `rows_per` rows start at each block's
     * first, times panels of `cols_per` columns (job_size: even counts of about-equal jobs) */
    const long block = s->sample_rows > 0 && !s->trans_a && s->m % s->sample_rows == 0 ? s->sample_rows : s->m;
    const long rows_per = job_size(block, GEMM_ROWS), cols_per = job_size(s->n, GEMM_COLS);
    const long per_block = (block + rows_per - 1) / rows_per, chunks = s->m / block * per_block;
    const long panels = (s->n + cols_per - 1) / cols_per, jobs = (long)s->batch * chunks * panels;
    const int lda = s->trans_a ? s->m : s->k, ldb = s->trans_b ? s->k : s->n;
    const uint16_t *a16 = NULL, *b16 = NULL;
    if (gemm_bf16_pays(s)) bf16_inputs(s, av, bv, &a16, &b16);
    /* bf16 products with a second pass (bias, GELU, DGELU) and beta 0 go through a tile of the thread's: oneDNN's
     * bf16 matmul left its C out of cache, so the epilogue read it back from memory; with the tile the MLP's first
     * GEMM with its GELU and aux (1024x1536x384, 256x512 jobs) took 1.50-1.64 ms against 2.05-2.13 (2-core AMX
     * Xeon). Not float32: sgemm leaves C in cache, and the tile's copy made that 4.5 against 4.0 ms. */
    const int tiled = a16 && beta == 0.0f && (bias || s->epilogue != GEMM_EPI_NONE);
    const int saved = cpu_gemm_serial_begin();
#pragma omp parallel for schedule(static) if (jobs > 1 && (double)s->batch * s->m * s->n * s->k >= GEMM_PARALLEL_MIN)
    for (long job = 0; job < jobs; job++) {
        const long rj = job / panels, col0 = job % panels * cols_per;
        const long i = rj / chunks, blk = rj % chunks / per_block, in_blk = (rj % chunks % per_block) * rows_per;
        const long r0 = blk * block + in_blk, rows = in_blk + rows_per <= block ? rows_per : block - in_blk;
        const int cols = (int)(col0 + cols_per <= s->n ? cols_per : s->n - col0);
        float *c = (float *)cv + i * s->stride_c + r0 * s->n + col0;
        float *aux = auxv ? (float *)auxv + i * s->stride_c + r0 * s->n + col0 : NULL;
        if (beta == 0.0f && s->k == 0) /* C may hold NaN; sgemm's beta 0 overwrites it without reading it */
            for (long r = 0; r < rows; r++) memset(c + r * s->n, 0, sizeof(float) * (size_t)cols);
        const long a_at = i * s->stride_a + (s->trans_a ? r0 : r0 * s->k);
        const long b_at = i * s->stride_b + (s->trans_b ? col0 * s->k : col0);
        if (tiled) { /* the product into the thread's tile, the epilogue from there into C */
            float *t = job_tile(rows * cols);
            cpu_gemm_bf16(s->trans_a, s->trans_b, (int)rows, cols, s->k, s->alpha, a16 + a_at, lda, b16 + b_at, ldb,
                          0.0f, t, cols);
            epilogue(s, rows, cols, bias ? bias + col0 : NULL, t, cols, aux);
            for (long r = 0; r < rows; r++) memcpy(c + r * s->n, t + r * cols, sizeof(float) * (size_t)cols);
            continue;
        }
        if (s->k > 0 && a16)
            cpu_gemm_bf16(s->trans_a, s->trans_b, (int)rows, cols, s->k, s->alpha, a16 + a_at, lda, b16 + b_at, ldb,
                          beta, c, s->n);
        else if (s->k > 0)
            cpu_sgemm(s->trans_a, s->trans_b, (int)rows, cols, s->k, s->alpha, (const float *)av + a_at, lda,
                      (const float *)bv + b_at, ldb, beta, c, s->n);
        else if (beta != 0.0f && beta != 1.0f)
            for (long r = 0; r < rows; r++)
                for (int e = 0; e < cols; e++) c[r * s->n + e] *= beta;
        if (bias || s->epilogue != GEMM_EPI_NONE) epilogue(s, rows, cols, bias ? bias + col0 : NULL, c, s->n, aux);
    }
    cpu_gemm_serial_end(saved);
}

/* Columns per bias_grad job where the rows make fewer chunks than threads: one block a thread, a multiple of 16, at
 * least 256 (long runs of each row), at most BIAS_COLS_MAX. Each column's sums run in the same order whatever the
 * block, so this may follow the thread count. */
#define BIAS_COLS_MAX 2048
static int bias_cols_per_job(int cols) {
    const int want = (cols + omp_get_max_threads() - 1) / omp_get_max_threads();
    const int w = (want + 15) / 16 * 16;
    return w < 256 ? 256 : w > BIAS_COLS_MAX ? BIAS_COLS_MAX : w;
}

/* rows [r0, r1) of dy's columns [j0, j0 + n) summed into part[0..n) in double, from 0.0 */
static void bias_chunk_sum(const float *dy, int cols, long r0, long r1, int j0, int n, double *part) {
    for (int j = 0; j < n; j++) part[j] = 0.0;
    for (long r = r0; r < r1; r++) {
        const float *row = dy + r * cols + j0;
        for (int j = 0; j < n; j++) part[j] += row[j];
    }
}

/* Per column: a partial in double per chunk of GEMM_ROWS rows (from 0.0), the partials added in chunk order (from
 * 0.0): the bits of the shape alone. Jobs are (chunk, block of columns); the blocks split the columns only where the
 * chunks are fewer than the threads. Why: the positional embeddings' gradients are 2 rows of 196608 columns, one
 * chunk, which ran on one thread through a 1.5 MiB calloc'd partial: 7.6 ms in `bench kernels`, 0.19-0.34 ms in
 * column blocks (2-core AVX-512 Xeon); the Linears' 1024-row gradients stay a chunk a job, contiguous rows. */
static void cpu_bias_grad(DType dt, long rows, int cols, const void *dyv, float *db, float beta) {
    cpu_need_f32(dt, "gemm_bias_grad");
    if (rows < 0 || cols < 1) vx_fatal("gemm: bias_grad of %ld rows of %d columns", rows, cols);
    const float *dy = dyv;
    const long chunks = rows > 0 ? (rows + GEMM_ROWS - 1) / GEMM_ROWS : 1;
    if (chunks == 1) { /* the partial is the total: per block of columns, straight into db */
        const int per_job = bias_cols_per_job(cols), jobs = (cols + per_job - 1) / per_job;
#pragma omp parallel for schedule(static) if (jobs > 1 && rows * cols >= 16384)
        for (int job = 0; job < jobs; job++) {
            const int j0 = job * per_job, n = cols - j0 < per_job ? cols - j0 : per_job;
            double part[BIAS_COLS_MAX];
            bias_chunk_sum(dy, cols, 0, rows, j0, n, part);
            for (int j = 0; j < n; j++) { /* 0.0 + part: the chunk-order sum of one chunk, -0.0 included */
                const float t = (float)(0.0 + part[j]);
                db[j0 + j] = beta != 0.0f ? beta * db[j0 + j] + t : t;
            }
        }
        return;
    }
    const int per_job = chunks >= omp_get_max_threads() ? cols : bias_cols_per_job(cols);
    const long blocks = (cols + per_job - 1) / per_job, jobs = chunks * blocks;
    double *part = malloc(sizeof(double) * (size_t)chunks * (size_t)cols);
    if (!part) vx_fatal("gemm: out of memory for %ld partial sums of %d columns", chunks, cols);
#pragma omp parallel for schedule(static) if (rows * cols >= 16384)
    for (long job = 0; job < jobs; job++) {
        const long ch = job / blocks, r1 = (ch + 1) * GEMM_ROWS < rows ? (ch + 1) * GEMM_ROWS : rows;
        const int j0 = (int)(job % blocks) * per_job, n = cols - j0 < per_job ? cols - j0 : per_job;
        bias_chunk_sum(dy, cols, ch * GEMM_ROWS, r1, j0, n, part + ch * cols + j0);
    }
    for (int j = 0; j < cols; j++) {
        double acc = 0.0;
        for (long ch = 0; ch < chunks; ch++) acc += part[ch * cols + j];
        db[j] = beta != 0.0f ? beta * db[j] + (float)acc : (float)acc;
    }
    free(part);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

const GemmOps gemm_ops_cpu = {{op_supports_f32}, cpu_matmul, cpu_bias_grad, cpu_gemm_bf16_chosen};

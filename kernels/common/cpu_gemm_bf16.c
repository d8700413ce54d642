/* cpu_gemm_bf16.c: bf16 products on float32 storage through oneDNN's matmul primitive (cpu_gemm_bf16.h).
 * Each product shape's primitive is made once and kept (a short list under a mutex: a transformer has a few dozen
 * job shapes); each thread executes on its own stream. A primitive is made and run with OpenMP's team set to one
 * thread on the calling thread, so oneDNN blocks it for one thread wherever it is called: the sum over k, and so the
 * bits, are the shape's alone, whatever the machine's thread count (the float32 GEMM's rule, gemm.h). */
#include "common/cpu_gemm_bf16.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_isa.h"
#include "common/dtype.h"
#include "core/util.h"

int cpu_gemm_bf16_chosen(char *why, size_t why_len) {
    const char *e = getenv("VX_GEMM_BF16");
    if (e && *e && strcmp(e, "on") != 0 && strcmp(e, "off") != 0 && strcmp(e, "auto") != 0)
        vx_usage_error("VX_GEMM_BF16 must be on, off or auto, not \"%s\"", e);
    if (!cpu_isa_bf16_runs(why, why_len)) return 0;
    if (e && strcmp(e, "off") == 0) {
        if (why) snprintf(why, why_len, "VX_GEMM_BF16=off");
        return 0;
    }
    if (e && strcmp(e, "on") == 0) return 1;
    if (cpu_isa_amx_runs()) return 1;
    if (why)
        snprintf(why, why_len, "without AMX, AVX512-BF16's dot products were measured slower than float32 FMAs "
                               "(0.5-0.7x; VX_GEMM_BF16=on runs them)");
    return 0;
}

void cpu_round_to_bf16(const float *x, uint16_t *y, long n) {
#pragma omp parallel for schedule(static) if (n >= (1L << 16) && !omp_in_parallel())
    for (long i = 0; i < n; i++) y[i] = dtype_f32_to_bf16(x[i]);
}

typedef struct Prim {
    int ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    dnnl_primitive_t p;
    dnnl_memory_desc_t a, b, c, scratch;
    size_t scratch_bytes;
    struct Prim *next;
} Prim;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Prim *prims;
static dnnl_engine_t engine;
static _Thread_local dnnl_stream_t stream;
static _Thread_local void *scratch; /* the thread's scratchpad, grown to its largest primitive's */
static _Thread_local size_t scratch_cap;

#define DNNL_OK(call, what)                                                                                            \
    do {                                                                                                               \
        if ((call) != dnnl_success) vx_fatal("oneDNN's bf16 matmul: %s failed (m %d n %d k %d)", what, m, n, k);       \
    } while (0)

/* a row-major [rows][cols] matrix with leading dimension ld, stored transposed where t */
static void matrix_md(dnnl_memory_desc_t *md, int rows, int cols, int ld, int t, dnnl_data_type_t dt, int m, int n,
                      int k) {
    dnnl_dims_t dims = {rows, cols}, strides = {t ? 1 : ld, t ? ld : 1};
    DNNL_OK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides), "a memory descriptor");
}

static Prim *make(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc, float alpha, float beta) {
    Prim *q = vx_calloc(1, sizeof *q);
    *q = (Prim){.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = alpha,
                .beta = beta};
    if (!engine) DNNL_OK(dnnl_engine_create(&engine, dnnl_cpu, 0), "the CPU engine");
    matrix_md(&q->a, m, k, lda, ta, dnnl_bf16, m, n, k);
    matrix_md(&q->b, k, n, ldb, tb, dnnl_bf16, m, n, k);
    matrix_md(&q->c, m, n, ldc, 0, dnnl_f32, m, n, k);
    dnnl_matmul_desc_t d;
    DNNL_OK(dnnl_matmul_desc_init(&d, &q->a, &q->b, NULL, &q->c), "the matmul descriptor");
    dnnl_primitive_attr_t attr;
    DNNL_OK(dnnl_primitive_attr_create(&attr), "its attributes");
    /* the scratchpad (B's packed copy) ours, one per thread: threads run primitives at once, and oneDNN's own
     * scratchpad, shared, gave wrong products when two jobs ran together */
    DNNL_OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "the scratchpad mode");
    if (alpha != 1.0f) DNNL_OK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "alpha");
    dnnl_post_ops_t po = NULL;
    if (beta != 0.0f) {
        DNNL_OK(dnnl_post_ops_create(&po), "post-ops");
        DNNL_OK(dnnl_post_ops_append_sum(po, beta), "beta");
        DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po), "beta");
    }
    dnnl_primitive_desc_t pd;
    DNNL_OK(dnnl_primitive_desc_create(&pd, &d, attr, engine, NULL), "the primitive descriptor");
    DNNL_OK(dnnl_primitive_create(&q->p, pd), "the primitive");
    q->scratch = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    q->scratch_bytes = dnnl_memory_desc_get_size(&q->scratch);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    if (po) dnnl_post_ops_destroy(po);
    return q;
}

static Prim *find(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc, float alpha, float beta) {
    pthread_mutex_lock(&lock);
    Prim *q = prims;
    while (q && !(q->ta == ta && q->tb == tb && q->m == m && q->n == n && q->k == k && q->lda == lda &&
                  q->ldb == ldb && q->ldc == ldc && q->alpha == alpha && q->beta == beta))
        q = q->next;
    if (!q) {
        q = make(ta, tb, m, n, k, lda, ldb, ldc, alpha, beta);
        q->next = prims;
        prims = q;
    }
    pthread_mutex_unlock(&lock);
    return q;
}

void cpu_gemm_bf16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *A, int lda, const uint16_t *B,
                   int ldb, float beta, float *C, int ldc) {
    if (m <= 0 || n <= 0) return;
    const int team = omp_get_max_threads(); /* one thread for oneDNN, here and when it blocks the primitive */
    if (team != 1) omp_set_num_threads(1);
    const Prim *q = find(ta, tb, m, n, k, lda, ldb, ldc, alpha, beta);
    if (!stream) DNNL_OK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "a stream");
    if (q->scratch_bytes > scratch_cap) {
        free(scratch);
        scratch_cap = q->scratch_bytes;
        scratch = vx_malloc(scratch_cap);
    }
    dnnl_memory_t ma, mb, mc, ms;
    DNNL_OK(dnnl_memory_create(&ma, &q->a, engine, (void *)A), "A's memory");
    DNNL_OK(dnnl_memory_create(&mb, &q->b, engine, (void *)B), "B's memory");
    DNNL_OK(dnnl_memory_create(&mc, &q->c, engine, C), "C's memory");
    DNNL_OK(dnnl_memory_create(&ms, &q->scratch, engine, scratch), "the scratchpad's memory");
    const dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}};
    DNNL_OK(dnnl_primitive_execute(q->p, stream, 4, args), "execute");
    DNNL_OK(dnnl_stream_wait(stream), "wait");
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    dnnl_memory_destroy(ms);
    if (team != 1) omp_set_num_threads(team);
}

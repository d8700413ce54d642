/* gemm_lt.cu: gemm.h's matmul through cuBLASLt (gemm_lt.h), for gemm_cuda.cu. cuBLASLt is loaded with dlopen the
 * first time a GEMM runs (libcublasLt.so.<major of the headers>, or VX_CUBLASLT_LIB), not linked, as bench_cuda.cu
 * loads cuBLAS: a machine without it still trains, on the own kernel, and says so once on stderr. VX_GEMM_OWN=1 keeps
 * cuBLASLt off (the own kernel's GPU check).
 * Row-major C [m][n] = op(A) op(B) is column-major C^T [n][m] = op(B)^T op(A)^T: cuBLASLt gets B's memory as its A and
 * A's as its B, with the shape (n, m, k); a bias per column of C is then cuBLASLt's bias per row of D, as it wants.
 * Compute in float32 (TF32 for float32 storage when the backend's allow_tf32 is on, as cuDNN's convolutions), scale
 * float32, bias float32; the workspace is the backend's reduction scratch (ops never overlap on the one stream). The
 * algorithm is cuBLASLt's first heuristic answer for the matrices' actual alignments (gemm_lt_alignment), cached per
 * (shape, types, epilogue, pointer alignments) so a shape keeps its algorithm, and its bits, for the whole run. Nothing here has run on a GPU yet (none was available). */
#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "common/cuda_check.h"
#include "gemm/gemm_lt.h"

static struct {
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmul) matmul;
    cublasLtHandle_t handle;
    int ready;
} lt;
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;

static void lt_load(void) {
    const char *own = getenv("VX_GEMM_OWN");
    if (own && own[0] && strcmp(own, "0") != 0) return;
    char soname[40];
    snprintf(soname, sizeof soname, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
    const char *env = getenv("VX_CUBLASLT_LIB");
    const char *name = env && env[0] ? env : soname;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        fprintf(stderr, "voxscale: warning: gemm: cannot load cuBLASLt (%s): the own GEMM kernel runs instead, much "
                        "slower; put the CUDA %d cuBLAS on the library path or set VX_CUBLASLT_LIB\n",
                e ? e : name, CUBLAS_VER_MAJOR);
        return;
    }
    const struct {
        void **slot;
        const char *sym;
    } syms[] = {{(void **)&lt.create, "cublasLtCreate"},
                {(void **)&lt.desc_create, "cublasLtMatmulDescCreate"},
                {(void **)&lt.desc_destroy, "cublasLtMatmulDescDestroy"},
                {(void **)&lt.desc_set, "cublasLtMatmulDescSetAttribute"},
                {(void **)&lt.layout_create, "cublasLtMatrixLayoutCreate"},
                {(void **)&lt.layout_destroy, "cublasLtMatrixLayoutDestroy"},
                {(void **)&lt.layout_set, "cublasLtMatrixLayoutSetAttribute"},
                {(void **)&lt.pref_create, "cublasLtMatmulPreferenceCreate"},
                {(void **)&lt.pref_destroy, "cublasLtMatmulPreferenceDestroy"},
                {(void **)&lt.pref_set, "cublasLtMatmulPreferenceSetAttribute"},
                {(void **)&lt.heuristic, "cublasLtMatmulAlgoGetHeuristic"},
                {(void **)&lt.matmul, "cublasLtMatmul"}};
    for (const auto &s : syms)
        if (!(*s.slot = dlsym(h, s.sym))) {
            fprintf(stderr, "voxscale: warning: gemm: %s has no %s: the own GEMM kernel runs instead\n", name, s.sym);
            return;
        }
    if (lt.create(&lt.handle) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "voxscale: warning: gemm: cublasLtCreate failed: the own GEMM kernel runs instead\n");
        return;
    }
    lt.ready = 1;
}

/* ---- the algorithm cache ---------------------------------------------------------------------------------- */

typedef struct {
    GemmShape s;
    int epi, has_bias, has_beta, tf32;
    uint32_t align[5]; /* gemm_lt_alignment of a, b, c, aux (when cuBLASLt writes or reads it) and the bias */
    int ok; /* 0: cuBLASLt had no algorithm: the own kernel runs */
    cublasLtMatmulAlgo_t algo;
} LtEntry;
#define LT_CACHE 128
static LtEntry cache[LT_CACHE];
static int cache_n;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static int same_key(const LtEntry *e, const LtEntry *k) {
    return memcmp(&e->s, &k->s, sizeof k->s) == 0 && e->epi == k->epi && e->has_bias == k->has_bias &&
           e->has_beta == k->has_beta && memcmp(e->align, k->align, sizeof k->align) == 0 && e->tf32 == k->tf32;
}

static cudaDataType_t cuda_type(DType t) {
    return t == DT_BF16 ? CUDA_R_16BF : t == DT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

#define LT_OK(call) ((call) == CUBLAS_STATUS_SUCCESS)

int gemm_lt_matmul(const GemmShape *s, const void *a, const void *b, const float *bias, void *c, void *aux, float beta,
                   int *pending) {
    pthread_once(&lt_once, lt_load);
    *pending = 0;
    if (!lt.ready) return 0;
    const int erf = s->epilogue == GEMM_EPI_GELU_ERF || s->epilogue == GEMM_EPI_DGELU_ERF;
    /* the erf forms: cuBLASLt's plain product (with beta, without bias), then gemm_cuda.cu's epilogue kernel */
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const float *lt_bias = erf ? NULL : bias;
    if (s->epilogue == GEMM_EPI_GELU_TANH)
        epi = aux ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                  : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
    else if (s->epilogue == GEMM_EPI_DGELU_TANH) epi = CUBLASLT_EPILOGUE_DGELU;
    else if (lt_bias) epi = CUBLASLT_EPILOGUE_BIAS;
    const int uses_aux = epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX ||
                         epi == CUBLASLT_EPILOGUE_DGELU;
    /* cuBLASLt's GELU auxiliary matrix wants its leading dimension and batch stride divisible by 8 */
    if (uses_aux && (s->n % 8 != 0 || (s->batch > 1 && s->stride_c % 8 != 0))) return 0;

    const int tf32 = s->dtype == DT_F32 && vx_cuda_options()->allow_tf32;
    LtEntry key = {};
    key.s = *s;
    key.epi = (int)epi, key.has_bias = lt_bias != NULL, key.has_beta = beta != 0.0f;
    key.tf32 = tf32;
    key.align[0] = gemm_lt_alignment(a), key.align[1] = gemm_lt_alignment(b), key.align[2] = gemm_lt_alignment(c);
    key.align[3] = gemm_lt_alignment(uses_aux ? aux : NULL), key.align[4] = gemm_lt_alignment(lt_bias);

    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cudaDataType_t tin = cuda_type(s->dtype), tout = s->c_f32 ? CUDA_R_32F : tin;
    /* cuBLASLt's A: our B (n x k after its op); its B: our A (k x m after its op); D: n x m, ld n */
    const cublasOperation_t op_lta = s->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_ltb = s->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const uint64_t a_rows = s->trans_b ? s->k : s->n, a_cols = s->trans_b ? s->n : s->k;
    const uint64_t b_rows = s->trans_a ? s->m : s->k, b_cols = s->trans_a ? s->k : s->m;
    const int64_t batch = s->batch, sa = s->stride_b, sb = s->stride_a, sc = s->stride_c, aux_ld = s->n;
    const int32_t bias_type = CUDA_R_32F;
    int ran = 0;
    if (!LT_OK(lt.desc_create(&desc, compute, CUDA_R_32F)) ||
        !LT_OK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_lta, sizeof op_lta)) ||
        !LT_OK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_ltb, sizeof op_ltb)) ||
        !LT_OK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)))
        goto done;
    if (lt_bias && (!LT_OK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &lt_bias, sizeof lt_bias)) ||
                    !LT_OK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type))))
        goto done;
    if (uses_aux && (!LT_OK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux)) ||
                     !LT_OK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld)) ||
                     !LT_OK(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &sc, sizeof sc))))
        goto done;
    if (!LT_OK(lt.layout_create(&la, tin, a_rows, a_cols, (int64_t)a_rows)) ||
        !LT_OK(lt.layout_create(&lb, tin, b_rows, b_cols, (int64_t)b_rows)) ||
        !LT_OK(lt.layout_create(&lc, tout, (uint64_t)s->n, (uint64_t)s->m, (int64_t)s->n)))
        goto done;
    if (batch > 1 && (!LT_OK(lt.layout_set(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &s->batch, sizeof s->batch)) ||
                      !LT_OK(lt.layout_set(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa)) ||
                      !LT_OK(lt.layout_set(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &s->batch, sizeof s->batch)) ||
                      !LT_OK(lt.layout_set(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb)) ||
                      !LT_OK(lt.layout_set(lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &s->batch, sizeof s->batch)) ||
                      !LT_OK(lt.layout_set(lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof sc))))
        goto done;
    {
        pthread_mutex_lock(&cache_lock);
        int found = -1;
        for (int i = 0; i < cache_n; i++)
            if (same_key(&cache[i], &key)) found = i;
        pthread_mutex_unlock(&cache_lock);
        if (found < 0) {
            const uint64_t ws = VX_SCRATCH_BYTES;
            /* the matrices' alignments (the heuristic sees no pointer of theirs and assumes 256 bytes otherwise);
             * cuBLASLt's A is our B, its B our A, C and D our C. The bias and aux pointers it reads from desc. */
            const uint32_t al_a = key.align[1], al_b = key.align[0], al_c = key.align[2];
            cublasLtMatmulHeuristicResult_t res = {};
            int count = 0;
            key.ok = LT_OK(lt.pref_create(&pref)) &&
                     LT_OK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) &&
                     LT_OK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a)) &&
                     LT_OK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b)) &&
                     LT_OK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c)) &&
                     LT_OK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c)) &&
                     LT_OK(lt.heuristic(lt.handle, desc, la, lb, lc, lc, pref, 1, &res, &count)) && count > 0 &&
                     res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= ws;
            if (key.ok) key.algo = res.algo;
            pthread_mutex_lock(&cache_lock);
            const int stored = cache_n < LT_CACHE;
            if (stored) cache[cache_n++] = key;
            pthread_mutex_unlock(&cache_lock);
            /* said once per shape: the own kernel is SIMT float32, far slower, and a 16-bit output with a float32
             * bias is outside what cuBLASLt's header promises (its bias type is the output's), so a first GPU run
             * should see which products fell back */
            if (!key.ok && stored)
                fprintf(stderr, "voxscale: warning: gemm: cuBLASLt offers no algorithm for batch %d, m %d, n %d, k %d, "
                                "%s%s%s, epilogue %u, alignments %u/%u/%u: the own GEMM kernel runs it, much slower\n",
                        s->batch, s->m, s->n, s->k, dtype_name(s->dtype), s->c_f32 ? " (float32 C)" : "",
                        lt_bias ? " with a float32 bias" : "", (unsigned)epi, key.align[0], key.align[1], key.align[2]);
        } else {
            key.ok = cache[found].ok, key.algo = cache[found].algo;
        }
        if (!key.ok) goto done;
        const float alpha = s->alpha;
        const cublasStatus_t st = lt.matmul(lt.handle, desc, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &key.algo,
                                            vx_cuda_scratch(), VX_SCRATCH_BYTES, vx_cuda_stream());
        if (st != CUBLAS_STATUS_SUCCESS)
            vx_fatal("gemm: cublasLtMatmul failed (status %d) for batch %d, m %d, n %d, k %d, %s", (int)st, s->batch,
                     s->m, s->n, s->k, dtype_name(s->dtype));
        ran = 1;
        *pending = erf || (bias && !lt_bias);
    }
done:
    if (pref) lt.pref_destroy(pref);
    if (lc) lt.layout_destroy(lc);
    if (lb) lt.layout_destroy(lb);
    if (la) lt.layout_destroy(la);
    if (desc) lt.desc_destroy(desc);
    return ran;
}

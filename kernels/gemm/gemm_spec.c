/* gemm_spec.c: the batched GEMM's entries in the op spec table (common/op_spec.h), with float64 references of
 * gemm.h: the product (with bias when KernelCase.dims[0] is 1, beta 0 or 1), the GELU epilogue with its aux output,
 * the DGELU epilogue, and the bias gradient (rows m, columns n of the shape). A case's shape is a GemmShape in
 * KernelCase.params. Large products are checked at every stride-th element of C (op_check.c). */
#include <math.h>

#include "common/op_spec.h"
#include "gemm/gemm.h"

static const GemmOps *table(const OpHead *ops) { return (const GemmOps *)(const void *)ops; }
static GemmShape shape_of(const KernelCase *k) {
    GemmShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
/* The case's shape in its storage type and math: bf16 math where the shape (a model's node, bench kernels) or the
 * case (the op tests' bf16 variant) asks it; the case then says it, for the tolerance (op_check.c). */
static GemmShape typed(KernelCase *k) {
    GemmShape s = shape_of(k);
    s.dtype = k->dtype;
    s.bf16_math = s.bf16_math || k->bf16_math;
    k->bf16_math = s.bf16_math;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}
static long count_a(const GemmShape *s) { return gemm_span(s, s->stride_a, (long)s->m * s->k); }
static long count_b(const GemmShape *s) { return gemm_span(s, s->stride_b, (long)s->k * s->n); }
static long count_c(const GemmShape *s) { return gemm_span(s, s->stride_c, (long)s->m * s->n); }

/* alpha * op(A) op(B) at element (i, r, j), in double */
static double product(const GemmShape *s, const float *a, const float *b, long i, long r, long j) {
    const float *A = a + i * s->stride_a, *B = b + i * s->stride_b;
    double acc = 0;
    for (long kk = 0; kk < s->k; kk++) {
        const double av = s->trans_a ? A[kk * s->m + r] : A[r * s->k + kk];
        const double bv = s->trans_b ? B[j * s->k + kk] : B[kk * s->n + j];
        acc += av * bv;
    }
    return s->alpha * acc;
}
static double gelu64(int kind, double x) {
    if (kind == 0) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}
static double gelu64_grad(int kind, double x) {
    if (kind == 0) {
        const double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), t = tanh(u);
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
    }
    return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
}

/* Calls f(i, r, j, o) for every element o of C at a multiple of stride (o = i*stride_c + r*n + j). */
#define FOR_SAMPLED_C(s, stride, body)                                                                          \
    for (long i_ = 0; i_ < (s).batch; i_++)                                                                     \
        for (long r_ = 0; r_ < (s).m; r_++)                                                                     \
            for (long j_ = 0; j_ < (s).n; j_++) {                                                               \
                const long o_ = i_ * (s).stride_c + r_ * (s).n + j_;                                            \
                if (o_ % (stride) != 0) continue;                                                               \
                body;                                                                                           \
            }

/* ---- gemm: a b bias -> c (beta) ----------------------------------------------------------------------------- */

static void mm_setup(KernelCase *k, const OpHead *ops) {
    const GemmShape s = typed(k);
    op_spec_bufs(k, 4, (long[]){count_a(&s), count_b(&s), s.n, count_c(&s)},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT}, s.c_f32 ? 0x3 : 0xB, 0x8);
    k->flops = 2.0 * s.batch * s.m * s.n * s.k;
}
static void mm_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const GemmShape s = shape_of(k);
    table(ops)->matmul(&s, b[0], b[1], k->dims[0] ? b[2] : NULL, b[3], NULL, k->beta);
}
static void mm_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GemmShape s = shape_of(k);
    FOR_SAMPLED_C(s, stride, ref[3][o_] = product(&s, in[0], in[1], i_, r_, j_) + (k->dims[0] ? in[2][j_] : 0.0));
}

/* ---- gemm_gelu: a b bias -> c aux (beta 0) ------------------------------------------------------------------ */

static void gelu_setup(KernelCase *k, const OpHead *ops) {
    const GemmShape s = typed(k);
    op_spec_bufs(k, 5, (long[]){count_a(&s), count_b(&s), s.n, count_c(&s), count_c(&s)},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT}, 0x1B, 0);
    k->flops = 2.0 * s.batch * s.m * s.n * s.k;
}
static void gelu_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const GemmShape s = shape_of(k);
    table(ops)->matmul(&s, b[0], b[1], k->dims[0] ? b[2] : NULL, b[3], b[4], 0.0f);
}
static void gelu_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GemmShape s = shape_of(k);
    const int kind = s.epilogue == GEMM_EPI_GELU_TANH ? 0 : 1;
    FOR_SAMPLED_C(s, stride, {
        const double pre = product(&s, in[0], in[1], i_, r_, j_) + (k->dims[0] ? in[2][j_] : 0.0);
        ref[4][o_] = pre;
        ref[3][o_] = gelu64(kind, pre);
    });
}

/* ---- gemm_dgelu: a b aux -> c (beta 0) ---------------------------------------------------------------------- */

static void dgelu_setup(KernelCase *k, const OpHead *ops) {
    const GemmShape s = typed(k);
    op_spec_bufs(k, 4, (long[]){count_a(&s), count_b(&s), count_c(&s), count_c(&s)},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT}, 0xF, 0);
    k->flops = 2.0 * s.batch * s.m * s.n * s.k;
}
static void dgelu_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const GemmShape s = shape_of(k);
    table(ops)->matmul(&s, b[0], b[1], NULL, b[3], b[2], 0.0f);
}
static void dgelu_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GemmShape s = shape_of(k);
    const int kind = s.epilogue == GEMM_EPI_DGELU_TANH ? 0 : 1;
    FOR_SAMPLED_C(s, stride, ref[3][o_] = product(&s, in[0], in[1], i_, r_, j_) * gelu64_grad(kind, in[2][o_]));
}
/* the pre-activations aux spread over [-4, 4], GELU's bend and both tails */
static void dgelu_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    op_spec_uniform_fill(h, count, seed, b);
    if (b == 2)
        for (long i = 0; i < count; i++) h[i] *= 4.0f;
}

/* ---- gemm_bias_grad: dy [m][n] -> db [n] (beta) ------------------------------------------------------------ */

static void bgrad_setup(KernelCase *k, const OpHead *ops) {
    const GemmShape s = typed(k);
    op_spec_bufs(k, 2, (long[]){(long)s.m * s.n, s.n}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x1, 0x2);
}
static void bgrad_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const GemmShape s = shape_of(k);
    table(ops)->bias_grad(s.dtype, s.m, s.n, b[0], b[1], k->beta);
}
static void bgrad_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GemmShape s = shape_of(k);
    for (int j = 0; j < s.n; j++) ref[1][j] = 0;
    for (long r = 0; r < s.m; r++)
        for (int j = 0; j < s.n; j++) ref[1][j] += in[0][r * s.n + j];
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp gemm_specs[] = {
    {"gemm", GEMM_MATMUL, 1, 1e-5, mm_setup, mm_run, mm_ref, NULL},
    {"gemm_gelu", GEMM_MATMUL, 1, 1e-5, gelu_setup, gelu_run, gelu_ref, NULL},
    {"gemm_dgelu", GEMM_MATMUL, 1, 1e-5, dgelu_setup, dgelu_run, dgelu_ref, dgelu_fill},
    {"gemm_bias_grad", GEMM_BIAS_GRAD, 0, 1e-6, bgrad_setup, bgrad_run, bgrad_ref, NULL},
};
const int gemm_specs_count = sizeof gemm_specs / sizeof gemm_specs[0];

/* gemm.h: batched matrix products with the epilogues a transformer's layers want, row-major throughout:
 *   for each batch index i < batch:  pre = alpha * op(A_i) op(B_i) [+ beta * C_i] [+ bias (per column)]
 *     op(A_i) [m][k]: A_i stored [m][k] (trans_a 0) or [k][m] (trans_a 1), at a + i*stride_a
 *     op(B_i) [k][n]: B_i stored [k][n] (trans_b 0) or [n][k] (trans_b 1), at b + i*stride_b
 *     C_i [m][n] at c + i*stride_c; a stride 0 shares one matrix across the batch (a weight)
 *   epilogue  GEMM_EPI_NONE        C = pre
 *             GEMM_EPI_GELU_*      C = gelu(pre) (gelu.h's tanh or erf form); aux = pre when aux is not NULL (what
 *                                  the backward's DGELU reads): the MLP's first Linear and its GELU in one pass
 *             GEMM_EPI_DGELU_*     C = (alpha * op(A) op(B)) * gelu'(aux): the MLP's backward, dH = dY W2 times
 *                                  GELU's derivative at the saved pre-activation, in one pass (beta 0, no bias)
 *   beta 0 overwrites C without reading it (C may hold NaN); GELU epilogues take beta 0 or 1 (then pre includes C).
 *   bias_grad: db[j] = [beta*db +] sum_r dy[r][j] over rows r (the bias gradient of a Linear whose output gradient is
 *   dy [rows][cols]), in double over fixed chunks of rows added in order.
 * Storage: A, B, C and aux of shape.dtype, except C in float32 when c_f32 (a weight gradient into the float32 master
 * gradient: dW = dY^T X with trans_a 1, beta 1 to accumulate); bias, db float32. Every product accumulates in float32
 * (CPU: BLAS sgemm; GPU: cuBLASLt with float32 compute, or the own tiled kernel), each output element's sum over k in
 * a fixed order: results do not depend on the thread count, and a rerun is bit-identical.
 * A transformer Linear y = x W^T + b over rows = tokens: matmul(m rows, n out, k in, trans_b 1, bias, sample_rows =
 * tokens per sample, so a sample's rows are the same bits in any slot of any batch); its backward
 * dX = dY W (trans 0 0) and dW += dY^T X (trans_a 1, c_f32, beta 1), db from bias_grad. */
#pragma once
#include <stddef.h>

#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GEMM_EPI_NONE = 0,
    GEMM_EPI_GELU_TANH = 1,
    GEMM_EPI_GELU_ERF = 2,
    GEMM_EPI_DGELU_TANH = 3,
    GEMM_EPI_DGELU_ERF = 4,
} GemmEpilogue;

typedef struct {
    int batch, m, n, k;
    int trans_a, trans_b;
    long stride_a, stride_b, stride_c; /* elements between batch entries; 0: the same matrix for all */
    float alpha;
    int epilogue; /* GemmEpilogue */
    int c_f32;    /* C float32 (epilogue NONE only) */
    DType dtype;  /* A, B, aux, and C unless c_f32 */
    /* Rows of A and C that belong to one sample (trans_a 0; 0: rows not tied to samples). The CPU cuts its jobs at
     * every sample's first row, so a sample's rows meet the BLAS kernel at the same places whatever the sample's slot
     * in the batch: BLAS kernels round a row by its place in their register blocks (OpenBLAS's Haswell sgemm by its
     * place among 12), and a row straddling another place in another slot would give other bits. The GPU's kernels
     * compute every row of a call alike and ignore it. */
    int sample_rows;
    /* The CPU's bf16 math (float32 storage, train.precision bf16 where GemmOps.bf16_math says it pays): A and B are
     * rounded to bf16 and the products summed in float32 (common/cpu_gemm_bf16.h); C, aux, bias and the epilogues as
     * in float32; on the CPU a product under 16 in m, n or k stays float32 (it rounds more than it computes). The GPU
     * computes in its storage type and ignores it. */
    int bf16_math;
} GemmShape;

/* The op's sub-table (kernels/backend/ops.def): be->gemm->... */
enum { GEMM_MATMUL, GEMM_BIAS_GRAD }; /* its functions, for supports() */
typedef struct GemmOps {
    OpHead head;
    void (*matmul)(const GemmShape *s, const void *a, const void *b, const float *bias, void *c, void *aux, float beta);
    void (*bias_grad)(DType dt, long rows, int cols, const void *dy, float *db, float beta);
    /* 1 when a model with bf16 math should set its products' bf16_math here, else 0 with why (one line); NULL where
     * bf16 is a storage type (CUDA) */
    int (*bf16_math)(char *why, size_t why_len);
} GemmOps;
extern const GemmOps gemm_ops_cpu;
extern const GemmOps gemm_ops_cuda; /* CUDA builds only */

/* elements of one operand the batch spans: (batch - 1) strides of `stride` and one matrix of `size` (0 for batch 0) */
static inline long gemm_span(const GemmShape *s, long stride, long size) {
    return s->batch > 0 ? (s->batch - 1) * stride + size : 0;
}

/* "" when s is a valid shape, else what is wrong (the CPU's and CUDA's check, one line) */
static inline const char *gemm_shape_error(const GemmShape *s) {
    if (s->batch < 0 || s->m < 0 || s->n < 0 || s->k < 0) return "negative sizes";
    if (s->stride_a < 0 || s->stride_b < 0 || s->stride_c < 0) return "negative strides";
    if (s->batch > 1 && s->stride_c < (long)s->m * s->n) return "batch entries of C overlap (stride_c < m*n)";
    if (s->epilogue < GEMM_EPI_NONE || s->epilogue > GEMM_EPI_DGELU_ERF) return "unknown epilogue";
    if (s->c_f32 && s->epilogue != GEMM_EPI_NONE) return "a float32 C takes no GELU epilogue";
    if (s->bf16_math && s->dtype != DT_F32) return "bf16 math is for float32 storage";
    return "";
}

#ifdef __cplusplus
}
#endif

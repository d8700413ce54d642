/* layernorm.h: LayerNorm over the last axis of [rows][c], as torch.nn.LayerNorm(c, eps, elementwise_affine):
 *   forward   mean[r] = sum_j x / c, var = sum_j (x - mean)^2 / c (biased, two passes in double),
 *             rstd[r] = 1/sqrt(var + eps); y = (x - mean)*rstd [*gamma[j] + beta[j]]
 *   backward  xhat = (x - mean)*rstd, g = dy [*gamma[j]]; per row a = sum_j g, b = sum_j g*xhat (double);
 *             dx = [beta_dx*dx +] rstd*(g - a/c - xhat*b/c)
 *             affine: dgamma[j] = [beta_param*dgamma +] sum_r dy*xhat, dbeta[j] = [beta_param*dbeta +] sum_r dy
 *   x, y, dy, dx   [rows][c] of shape.dtype
 *   gamma, beta    [c] float32 parameters, dgamma dbeta their float32 gradients; all NULL when affine is 0 (adaLN's
 *                  norms: the modulation (adaln.h) is their affine part)
 *   mean, rstd     [rows] float32, written by the forward for the backward
 * Every sum runs in double in an order fixed by the shape: a row's in column order (CPU) or per lane then a
 * butterfly (CUDA, one warp per row); dgamma/dbeta over fixed chunks of rows, the chunks' partials added in order. So
 * results do not depend on the thread count, and a rerun is bit-identical. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    long rows;
    int c;
    float eps;
    int affine;  /* 1: gamma and beta (and their gradients); 0: none */
    DType dtype; /* storage of x, y, dy, dx */
} LayerNormShape;

/* The op's sub-table (kernels/backend/ops.def): be->layernorm->... */
enum { LAYERNORM_FORWARD, LAYERNORM_BACKWARD }; /* its functions, for supports() */
typedef struct LayerNormOps {
    OpHead head;
    void (*forward)(const LayerNormShape *s, const void *x, const float *gamma, const float *beta, void *y,
                    float *mean, float *rstd);
    void (*backward)(const LayerNormShape *s, const void *dy, const void *x, const float *gamma, const float *mean,
                     const float *rstd, void *dx, float *dgamma, float *dbeta, float beta_dx, float beta_param);
} LayerNormOps;
extern const LayerNormOps layernorm_ops_cpu;
extern const LayerNormOps layernorm_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

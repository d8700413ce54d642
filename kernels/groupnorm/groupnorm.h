/* groupnorm.h: GroupNorm over NDHWC activations, statistics in at least fp32, optionally fused with the SiLU
 * that follows every GroupNorm of the model (shape.silu = 1).
 *   x, y     [n][spatial][c]       spatial = d*h*w; channel c belongs to group c / (c/groups)
 *   gamma, beta [c]
 *   mean, rstd [n][groups]         saved by forward for backward; rstd = 1/sqrt(var + eps), biased variance
 * silu = 0: y = (x - mean) * rstd * gamma + beta, and backward's dy is the gradient of that y.
 * silu = 1: y = silu(that), written in the same pass; backward's dy is the gradient of the SiLU's output and
 *           the normalised value is recomputed from x, mean, rstd, gamma and beta wherever it is needed. The
 *           pre-activation tensor is then never stored: one activation and one gradient tensor fewer per
 *           GroupNorm, and one read-write pass fewer each way (PyTorch eager runs them as two kernels).
 * beta_dx / beta_dparam follow the conv3d.h convention (0 overwrite, 1 accumulate).
 * Storage: the CPU version is the float32 reference. The CUDA one stores x, y, dy and dx as shape.dtype (dtype.h);
 * gamma, beta, their gradients and the statistics are float32, and every sum runs in double. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n;
    long spatial;
    int c, groups;
    float eps;
    int silu; /* 1: SiLU fused after the normalisation (see above) */
    DType dtype; /* storage of x, y, dy, dx (DT_F32 on the CPU) */
} GroupNormShape;

void groupnorm_forward_cpu(const GroupNormShape *s, const float *x, const float *gamma, const float *beta, float *y,
                           float *mean, float *rstd);
void groupnorm_backward_cpu(const GroupNormShape *s, const float *dy, const float *x, const float *gamma,
                            const float *beta, const float *mean, const float *rstd, float *dx, float *dgamma, float *dbeta,
                            float beta_dx, float beta_dparam);

/* CUDA (groupnorm_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void groupnorm_forward_cuda(const GroupNormShape *s, const void *x, const float *gamma, const float *beta,
                            void *y, float *mean, float *rstd);
void groupnorm_backward_cuda(const GroupNormShape *s, const void *dy, const void *x, const float *gamma,
                             const float *beta, const float *mean, const float *rstd, void *dx, float *dgamma, float *dbeta,
                             float beta_dx, float beta_dparam);

/* The op's sub-table (kernels/backend/ops.def): be->groupnorm->... */
enum { GROUPNORM_FORWARD, GROUPNORM_BACKWARD }; /* its functions, for supports() */
typedef struct GroupNormOps {
    OpHead head;
    void (*forward)(const GroupNormShape *s, const void *x, const float *gamma, const float *beta, void *y, float *mean,
                    float *rstd);
    void (*backward)(const GroupNormShape *s, const void *dy, const void *x, const float *gamma, const float *beta,
                     const float *mean, const float *rstd, void *dx, float *dgamma, float *dbeta, float beta_dx,
                     float beta_dparam);
} GroupNormOps;
extern const GroupNormOps groupnorm_ops_cpu;
extern const GroupNormOps groupnorm_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

/* latent.h: the variational bottleneck: log-variance clamp, reparameterization and KL divergence.
 *   mu, logvar_raw, eps, z, dz, dmu, dlogvar  [n][count_per_sample]
 *   lv = clamp(logvar_raw, logvar_min, logvar_max)
 *   z  = mu + exp(0.5*lv) * eps        (eps == NULL: z = mu, the deterministic path used for validation)
 *   kl_out[0] = mean over the n samples of 0.5 * sum(mu^2 + exp(lv) - 1 - lv)
 * Backward overwrites dmu and dlogvar with the gradient of  sum(dz*z) + kl_scale * kl ; the clamp passes no
 * gradient outside [logvar_min, logvar_max]. The CPU version is the float32 reference. The CUDA one stores mu,
 * logvar_raw, z, dz, dmu and dlogvar as shape.dtype (dtype.h; eps and kl_out are float32), sums KL in double, and
 * multiplies kl_scale by loss_scale[0] (device memory, NULL for 1), as recon_loss does. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n;
    long count_per_sample;
    float logvar_min, logvar_max;
    DType dtype; /* storage of everything but eps and kl_out (DT_F32 on the CPU) */
} LatentShape;

void latent_forward_cpu(const LatentShape *s, const float *mu, const float *logvar_raw, const float *eps, float *z,
                        float *kl_out);
void latent_backward_cpu(const LatentShape *s, const float *mu, const float *logvar_raw, const float *eps,
                         const float *dz, float kl_scale, float *dmu, float *dlogvar);

/* CUDA (latent_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void latent_forward_cuda(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps, void *z,
                         float *kl_out);
void latent_backward_cuda(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps,
                          const void *dz, float kl_scale, const float *loss_scale, void *dmu, void *dlogvar);

/* The op's sub-table (kernels/backend/ops.def): be->latent->... */
enum { LATENT_FORWARD, LATENT_BACKWARD }; /* its functions, for supports() */
typedef struct LatentOps {
    OpHead head;
    void (*forward)(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps, void *z,
                    float *kl_out);
    void (*backward)(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps, const void *dz,
                     float kl_scale, const float *loss_scale, void *dmu, void *dlogvar);
} LatentOps;
extern const LatentOps latent_ops_cpu;
extern const LatentOps latent_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

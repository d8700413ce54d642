/* loss.h: reconstruction loss, forward and gradient in one pass.
 *   pred, target, dpred [count]
 *   loss_out [1]: mean over all elements of |pred-target| (L1) or (pred-target)^2 (MSE)
 *   dpred = grad_scale * d(mean)/d(pred), overwritten; may be NULL for evaluation only.
 *   For L1 the subgradient at pred == target is 0 (as torch.sign). */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LOSS_L1 = 0, LOSS_MSE = 1 } ReconLoss;

void recon_loss_cpu(ReconLoss kind, long count, const float *pred, const float *target, float *loss_out,
                    float *dpred, float grad_scale);

/* CUDA (kernels/loss_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void recon_loss_cuda(ReconLoss kind, long count, const float *pred, const float *target, float *loss_out,
                     float *dpred, float grad_scale);

#ifdef __cplusplus
}
#endif

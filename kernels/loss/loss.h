/* loss.h: reconstruction loss, forward and gradient in one pass.
 *   pred, target, dpred [count]
 *   loss_out [1]: mean over all elements of |pred-target| (L1) or (pred-target)^2 (MSE)
 *   dpred = grad_scale * d(mean)/d(pred), overwritten; may be NULL for evaluation only.
 *   For L1 the subgradient at pred == target is 0 (as torch.sign).
 * The CPU version is the float32 reference. The CUDA one stores pred and dpred as `dt` (dtype.h; the target, the
 * model's input, stays float32), sums in double, and multiplies grad_scale by loss_scale[0] (device memory, NULL
 * for 1), the dynamic loss scale of mixed precision, read on the device so that a captured step follows it. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LOSS_L1 = 0, LOSS_MSE = 1 } ReconLoss;

void recon_loss_cpu(ReconLoss kind, long count, const float *pred, const float *target, float *loss_out,
                    float *dpred, float grad_scale);

/* CUDA (loss_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void recon_loss_cuda(ReconLoss kind, DType dt, long count, const void *pred, const float *target, float *loss_out,
                     void *dpred, float grad_scale, const float *loss_scale);

/* The op's sub-table (kernels/backend/ops.def): be->loss->... */
enum { LOSS_RECON }; /* its functions, for supports() */
typedef struct LossOps {
    OpHead head;
    /* grad_scale as above; loss_scale (backend memory, NULL for 1) multiplies it on the device */
    void (*recon)(ReconLoss kind, DType dt, long count, const void *pred, const float *target, float *loss_out,
                  void *dpred, float grad_scale, const float *loss_scale);
} LossOps;
extern const LossOps loss_ops_cpu;
extern const LossOps loss_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

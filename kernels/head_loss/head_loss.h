/* head_loss.h: the losses of a prediction head over a batch of n samples with k outputs each, forward and gradient
 * in one pass, as PyTorch computes them with reduction 'mean':
 *   CE    softmax cross-entropy (nn.CrossEntropyLoss): target [n] the class index as a float; weight [k] or NULL:
 *         loss = sum_i w[t_i] * -log softmax(z_i)[t_i] / sum_i w[t_i]
 *   BCE   binary cross-entropy with logits, multi-label (nn.BCEWithLogitsLoss): target [n][k] in {0, 1} (any value
 *         in [0, 1] works); weight [k] = pos_weight or NULL; loss = mean over n*k of
 *         -(pw*t*log sigmoid(z) + (1-t)*log(1 - sigmoid(z))), computed stably (log-sum-exp form); a negative target
 *         is masked (CheXpert's uncertain labels under u_ignore): its term and its gradient are 0, the mean still
 *         over n*k, so that ranks' means average to the global batch's
 *   COX   Cox partial likelihood for survival, Breslow's handling of ties (k = 1: z_i the risk score):
 *         target [n][2] = (time, event in {0, 1}); loss = -sum_{i: event} (z_i - log sum_{j: t_j >= t_i} exp z_j)
 *         / (number of events); no event in the batch: loss 0 and gradient 0. n is the GLOBAL batch: the caller
 *         gathers every rank's scores and targets first (a per-rank Cox loss is another objective)
 * (Regression's MSE is loss.h's recon_loss with LOSS_MSE.)
 *   z [n][k] of type dt; loss_out [1] float32; dz (NULL: loss only) of type dt, overwritten with
 *   grad_scale * loss_scale[0] * d(loss)/dz (loss_scale: backend memory, NULL for 1, as loss.h)
 * Every sum is fixed-order in double (COX: the risk sets in sorted-time order, O(n log n) or O(n^2) for the small
 * batches it serves), so results are bit-identical run to run. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { HEAD_LOSS_CE = 0, HEAD_LOSS_BCE = 1, HEAD_LOSS_COX = 2 } HeadLossKind;

typedef struct {
    HeadLossKind kind;
    int n, k;
    DType dtype; /* storage of z and dz */
} HeadLossShape;

/* The op's sub-table (kernels/backend/ops.def): be->head_loss->... */
enum { HEAD_LOSS_RUN }; /* its functions, for supports() */
typedef struct HeadLossOps {
    OpHead head;
    void (*run)(const HeadLossShape *s, const void *z, const float *target, const float *weight, float *loss_out,
                void *dz, float grad_scale, const float *loss_scale);
} HeadLossOps;
extern const HeadLossOps head_loss_ops_cpu;
extern const HeadLossOps head_loss_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

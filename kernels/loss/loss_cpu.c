/* loss_cpu.c: float32 CPU reconstruction loss (loss.h): the mean L1 or MSE over all elements and its gradient
 * in one pass. The mean is summed in double over fixed chunks of LOSS_CHUNK elements whose partial sums are
 * added in chunk order, so the value does not depend on the OpenMP thread count. */
#include <math.h>
#include <stdlib.h>

#include "core/util.h"
#include "loss/loss.h"
#include "common/cpu_op.h"

#define LOSS_CHUNK 8192L
/* independent accumulators inside a chunk: breaks the add latency chain and lets the loop vectorize, while the
 * order stays fixed */
#define LOSS_LANES 8

void recon_loss_cpu(ReconLoss kind, long count, const float *pred, const float *target, float *loss_out,
                    float *dpred, float grad_scale) {
    /* pred, target, dpred [count]; loss_out [1] */
    if (count <= 0) {
        loss_out[0] = 0.0f;
        return;
    }
    const long nb = (count + LOSS_CHUNK - 1) / LOSS_CHUNK;
    double *part = vx_malloc(sizeof(double) * (size_t)nb);
    /* d(mean)/d(pred): sign(d)/count for L1 (0 at d == 0, as torch.sign), 2*d/count for MSE */
    const float g1 = (float)((double)grad_scale / (double)count);
    const float g2 = (float)(2.0 * (double)grad_scale / (double)count);
    const int l1 = kind == LOSS_L1;
#pragma omp parallel for schedule(static)
    for (long blk = 0; blk < nb; blk++) {
        const long i0 = blk * LOSS_CHUNK, i1 = i0 + LOSS_CHUNK < count ? i0 + LOSS_CHUNK : count;
        double acc[LOSS_LANES] = {0};
        /* element i goes to lane (i - i0) % LOSS_LANES: a fixed order; the branches are loop-invariant and the
         * sign is computed branch-free (a data-dependent branch mispredicts on every other element) */
        for (long i = i0; i < i1; i += LOSS_LANES) {
            const int n = i + LOSS_LANES <= i1 ? LOSS_LANES : (int)(i1 - i);
            for (int l = 0; l < n; l++) {
                const float d = pred[i + l] - target[i + l];
                acc[l] += l1 ? (double)fabsf(d) : (double)d * d;
            }
            if (dpred) {
                if (l1)
                    for (int l = 0; l < n; l++) {
                        const float d = pred[i + l] - target[i + l];
                        dpred[i + l] = g1 * (float)((d > 0.0f) - (d < 0.0f)); /* sign, 0 at d == 0 */
                    }
                else
                    for (int l = 0; l < n; l++) dpred[i + l] = g2 * (pred[i + l] - target[i + l]);
            }
        }
        double s = 0.0;
        for (int l = 0; l < LOSS_LANES; l++) s += acc[l];
        part[blk] = s;
    }
    double total = 0.0;
    for (long blk = 0; blk < nb; blk++) total += part[blk];
    free(part);
    loss_out[0] = (float)(total / (double)count);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_recon(ReconLoss kind, DType dt, long count, const void *pred, const float *target, float *loss_out,
                      void *dpred, float grad_scale, const float *loss_scale) {
    cpu_need_f32(dt, "recon_loss");
    recon_loss_cpu(kind, count, pred, target, loss_out, dpred, cpu_scaled(grad_scale, loss_scale));
}
const LossOps loss_ops_cpu = {{op_supports_f32}, cpu_recon};

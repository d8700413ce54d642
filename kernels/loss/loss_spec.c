/* loss_spec.c: the reconstruction losses' entries in the op spec table (common/op_spec.h), with float64
 * references; the loss scale they read from backend memory is OP_SPEC_LOSS_SCALE. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "loss/loss.h"

/* the backend's table of this op, as the entries receive it */
static const LossOps *table(const OpHead *ops) { return (const LossOps *)(const void *)ops; }

static void loss_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 5, (long[]){k->count, k->count, 1, k->count, 1}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT, KB_OUT, KB_IN},
         0x9, 0);
}
static void loss_run_kind(const OpHead *ops, const KernelCase *k, void *const *b, ReconLoss kind) {
    table(ops)->recon(kind, k->dtype, k->count, b[0], b[1], b[2], b[3], 1.0f, b[4]);
}
static void loss_l1_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) { loss_run_kind(ops, k, b, LOSS_L1); }
static void loss_mse_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) { loss_run_kind(ops, k, b, LOSS_MSE); }
static void loss_ref_kind(const KernelCase *k, const float *const *in, double *const *ref, int l1) {
    double sum = 0;
    const double g = (double)in[4][0] / (double)k->count;
    for (long i = 0; i < k->count; i++) {
        const double d = (double)in[0][i] - in[1][i];
        sum += l1 ? fabs(d) : d * d;
        ref[3][i] = l1 ? g * ((d > 0) - (d < 0)) : g * 2 * d;
    }
    ref[2][0] = sum / (double)k->count;
}
static void loss_l1_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) { loss_ref_kind(k, in, ref, 1); }
static void loss_mse_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) { loss_ref_kind(k, in, ref, 0); }
static void loss_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 4) h[0] = OP_SPEC_LOSS_SCALE;
    else op_spec_uniform_fill(h, count, seed, b);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp loss_specs[] = {
    {"recon_loss_l1", LOSS_RECON, 0, 1e-5, loss_setup, loss_l1_run, loss_l1_ref, loss_fill},
    {"recon_loss_mse", LOSS_RECON, 0, 1e-5, loss_setup, loss_mse_run, loss_mse_ref, loss_fill},
};
const int loss_specs_count = sizeof loss_specs / sizeof loss_specs[0];

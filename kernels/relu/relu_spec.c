/* relu_spec.c: ReLU's entries in the op spec table (common/op_spec.h), over KernelCase.count values, with float64
 * references. backward reads the forward's output: its fill makes one (half the values exactly 0). */
#include <math.h>

#include "common/op_spec.h"
#include "relu/relu.h"

/* the backend's table of this op, as the entries receive it */
static const ReluOps *table(const OpHead *ops) { return (const ReluOps *)(const void *)ops; }

static void relu_fwd_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){k->count, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0);
}
static void relu_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->forward(k->dtype, k->count, b[0], b[1]);
}
static void relu_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = in[0][i] < 0 ? 0.0 : in[0][i];
}

/* y dy -> dx */
static void relu_bwd_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 3, (long[]){k->count, k->count, k->count}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0x4);
}
static void relu_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->backward(k->dtype, k->count, b[0], b[1], b[2], k->beta);
}
static void relu_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[2][i] = in[0][i] > 0 ? (double)in[1][i] : 0.0;
}
/* y: a ReLU output (max(u, 0), so about half are exactly 0); dy uniform in [-1, 1] */
static void relu_bwd_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    op_spec_uniform_fill(h, count, seed, b);
    if (b == 0)
        for (long i = 0; i < count; i++) h[i] = h[i] < 0 ? 0.0f : h[i];
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp relu_specs[] = {
    {"relu_forward", RELU_FORWARD, 0, 1e-6, relu_fwd_setup, relu_fwd_run, relu_fwd_ref, NULL},
    {"relu_backward", RELU_BACKWARD, 0, 1e-6, relu_bwd_setup, relu_bwd_run, relu_bwd_ref, relu_bwd_fill},
};
const int relu_specs_count = sizeof relu_specs / sizeof relu_specs[0];

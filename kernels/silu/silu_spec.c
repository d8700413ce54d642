/* silu_spec.c: SiLU's entries in the op spec table (common/op_spec.h), with float64 references. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "silu/silu.h"

/* the backend's table of this op, as the entries receive it */
static const SiluOps *table(const OpHead *ops) { return (const SiluOps *)(const void *)ops; }

static void unary_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){k->count, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0);
}
/* x, dy -> dx (beta) */
static void binary_grad_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 3, (long[]){k->count, k->count, k->count}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0x4);
}
static void silu_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->forward(k->dtype, k->count, b[0], b[1]);
}
static void silu_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = in[0][i] * op_spec_sigmoid(in[0][i]);
}
static void silu_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->backward(k->dtype, k->count, b[0], b[1], b[2], k->beta);
}
static void silu_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) {
        const double s = op_spec_sigmoid(in[0][i]);
        ref[2][i] = in[1][i] * s * (1 + in[0][i] * (1 - s));
    }
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp silu_specs[] = {
    {"silu_forward", SILU_FORWARD, 0, 1e-6, unary_setup, silu_fwd_run, silu_fwd_ref, NULL},
    {"silu_backward", SILU_BACKWARD, 0, 1e-6, binary_grad_setup, silu_bwd_run, silu_bwd_ref, NULL},
};
const int silu_specs_count = sizeof silu_specs / sizeof silu_specs[0];

/* dropout_spec.c: keyed dropout's entries in the op spec table (common/op_spec.h): buffers first (the batch's first
 * global sample, a uint64 in backend memory), x -> y and dy -> dx, against a float64 reference that takes the mask
 * from dropout_mask.h (the definition dropout.h states) and the scale 1/(1-p) in double. A case's shape is a
 * DropoutShape in KernelCase.params. */
#include <string.h>

#include "common/op_spec.h"
#include "dropout/dropout.h"
#include "dropout/dropout_mask.h"

/* the backend's table of this op, as the entries receive it */
static const DropoutOps *table(const OpHead *ops) { return (const DropoutOps *)(const void *)ops; }
static DropoutShape shape_of(const KernelCase *k) {
    DropoutShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}

static const uint64_t DROPOUT_FIRST = 1000003; /* a batch starting past sample 10^6: the counter's high bits move */

/* first, in -> out (forward: x -> y; backward: dy -> dx, which beta 1 adds to) */
static void dropout_setup(KernelCase *k, int bwd) {
    DropoutShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    const long n = (long)s.n * s.per_sample;
    op_spec_bufs(k, 3, (long[]){2, n, n}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x6, bwd ? 0x4 : 0);
}
static void dropout_fwd_setup(KernelCase *k, const OpHead *ops) { dropout_setup(k, 0); }
static void dropout_bwd_setup(KernelCase *k, const OpHead *ops) { dropout_setup(k, 1); }
static void dropout_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const DropoutShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], b[2]);
}
static void dropout_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const DropoutShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], b[2], k->beta);
}
static void dropout_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const DropoutShape s = shape_of(k);
    uint64_t first;
    memcpy(&first, in[0], sizeof first);
    const double scale = s.p < 1.0f ? 1.0 / (1.0 - (double)s.p) : 0.0;
    for (long e = 0; e < (long)s.n * s.per_sample; e++)
        ref[2][e] = dropout_keep(s.seed, s.stream, first, (uint64_t)s.per_sample, (uint64_t)e, s.p) ? in[1][e] * scale
                                                                                                    : 0.0;
}
static void dropout_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 0) memcpy(h, &DROPOUT_FIRST, sizeof DROPOUT_FIRST);
    else op_spec_uniform_fill(h, count, seed, b);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp dropout_specs[] = {
    {"dropout_forward", DROPOUT_FORWARD, 0, 1e-6, dropout_fwd_setup, dropout_fwd_run, dropout_ref, dropout_fill},
    {"dropout_backward", DROPOUT_BACKWARD, 0, 1e-6, dropout_bwd_setup, dropout_bwd_run, dropout_ref, dropout_fill},
};
const int dropout_specs_count = sizeof dropout_specs / sizeof dropout_specs[0];

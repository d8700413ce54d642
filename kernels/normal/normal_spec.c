/* normal_spec.c: normal_fill's entry in the op spec table (common/op_spec.h): the values against vx_normal. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "common/rng.h"
#include "normal/normal.h"

/* the backend's table of this op, as the entries receive it */
static const NormalOps *table(const OpHead *ops) { return (const NormalOps *)(const void *)ops; }

static const uint64_t NOISE_SEED = 42, NOISE_STREAM = 7, NOISE_OFFSET = 777;
static void normal_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){2, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0, 0);
}
static void normal_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->fill(k->count, NOISE_SEED, NOISE_STREAM, b[0], b[1]);
}
static void normal_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = vx_normal(NOISE_SEED, NOISE_STREAM, NOISE_OFFSET + (uint64_t)i);
}
static void normal_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    memcpy(h, &NOISE_OFFSET, sizeof NOISE_OFFSET);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp normal_specs[] = {
    {"normal_fill", NORMAL_FILL, 0, 1e-6, normal_setup, normal_run, normal_ref, normal_fill},
};
const int normal_specs_count = sizeof normal_specs / sizeof normal_specs[0];

/* ema_spec.c: the moving average's entries in the op spec table (common/op_spec.h), with a float64 reference of
 * ema.h's formula: decay 0.9 (buffer 0), the parameters and the old average in [-1, 1); the flag variants pass skip
 * as a one-element buffer (its float 0 or 1 read as int32: zero or not), the skipped one expects the average unchanged.
 * A case's count is KernelCase.count. */
#include "common/op_spec.h"
#include "ema/ema.h"

static const EmaOps *table(const OpHead *ops) { return (const EmaOps *)(const void *)ops; }

static void setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 4, (long[]){1, 1, k->count, k->count}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_INOUT}, 0, 0);
}
static void run_none(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->update(k->count, b[0], NULL, b[2], b[3]);
}
static void run_flag(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->update(k->count, b[0], (const int32_t *)b[1], b[2], b[3]);
}
static void ref_update(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const double d = in[0][0];
    for (long i = 0; i < k->count; i++) ref[3][i] = d * in[3][i] + (1.0 - d) * in[2][i];
}
static void ref_skipped(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[3][i] = in[3][i];
}
static void fill_flag(float *h, long count, unsigned seed, int b, float flag) {
    if (b == 0) h[0] = 0.9f;
    else if (b == 1) h[0] = flag;
    else op_spec_uniform_fill(h, count, seed, b);
}
static void fill_go(const KernelCase *k, int b, float *h, long count, unsigned seed) { fill_flag(h, count, seed, b, 0.0f); }
static void fill_skip(const KernelCase *k, int b, float *h, long count, unsigned seed) { fill_flag(h, count, seed, b, 1.0f); }

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp ema_specs[] = {
    {"ema_update", EMA_UPDATE, 0, 1e-6, setup, run_none, ref_update, fill_go},
    {"ema_update_flag", EMA_UPDATE, 0, 1e-6, setup, run_flag, ref_update, fill_go},
    {"ema_update_skipped", EMA_UPDATE, 0, 1e-6, setup, run_flag, ref_skipped, fill_skip},
};
const int ema_specs_count = sizeof ema_specs / sizeof ema_specs[0];

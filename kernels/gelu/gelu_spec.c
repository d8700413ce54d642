/* gelu_spec.c: GELU's entries in the op spec table (common/op_spec.h), with float64 references of gelu.h's formulas
 * (tanh and erf); inputs uniform in [-5, 5], so both tails and the bend are covered. The backward's terms reach ~2
 * where they cancel to ~1 (x near -2), so float32 keeps ~5e-6 of it, not 1e-6. A case's shape is a GeluShape in
 * KernelCase.params. */
#include <math.h>

#include "common/op_spec.h"
#include "gelu/gelu.h"

static const GeluOps *table(const OpHead *ops) { return (const GeluOps *)(const void *)ops; }
static GeluShape shape_of(const KernelCase *k) {
    GeluShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static GeluShape typed(KernelCase *k) {
    GeluShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}

/* float64 GELU and its derivative */
static double ref_value(int kind, double x) {
    if (kind == GELU_TANH) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}
static double ref_grad(int kind, double x) {
    if (kind == GELU_TANH) {
        const double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), t = tanh(u);
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
    }
    return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
}

static void fwd_setup(KernelCase *k, const OpHead *ops) {
    const GeluShape s = typed(k);
    op_spec_bufs(k, 2, (long[]){s.count, s.count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0);
}
static void fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const GeluShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1]);
}
static void fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GeluShape s = shape_of(k);
    for (long i = 0; i < s.count; i++) ref[1][i] = ref_value(s.kind, in[0][i]);
}

/* x, dy -> dx (beta) */
static void bwd_setup(KernelCase *k, const OpHead *ops) {
    const GeluShape s = typed(k);
    op_spec_bufs(k, 3, (long[]){s.count, s.count, s.count}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0x4);
}
static void bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const GeluShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], b[2], k->beta);
}
static void bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GeluShape s = shape_of(k);
    for (long i = 0; i < s.count; i++) ref[2][i] = in[1][i] * ref_grad(s.kind, in[0][i]);
}

static void gelu_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    op_spec_uniform_fill(h, count, seed, b);
    if (b == 0)
        for (long i = 0; i < count; i++) h[i] *= 5.0f;
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp gelu_specs[] = {
    {"gelu_forward", GELU_FORWARD, 0, 1e-6, fwd_setup, fwd_run, fwd_ref, gelu_fill},
    {"gelu_backward", GELU_BACKWARD, 0, 5e-6, bwd_setup, bwd_run, bwd_ref, gelu_fill},
};
const int gelu_specs_count = sizeof gelu_specs / sizeof gelu_specs[0];

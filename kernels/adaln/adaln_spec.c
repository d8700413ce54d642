/* adaln_spec.c: adaLN-Zero's entries in the op spec table (common/op_spec.h), with float64 references of adaln.h.
 * A case's shape is an AdaLNShape in KernelCase.params; with mod_stride > c the vectors sit in a wider packed array
 * (as in [n][6c]), whose other elements the op must not need (their gradients' are left unchecked). */
#include "adaln/adaln.h"
#include "common/op_spec.h"

static const AdaLNOps *table(const OpHead *ops) { return (const AdaLNOps *)(const void *)ops; }
static AdaLNShape shape_of(const KernelCase *k) {
    AdaLNShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static AdaLNShape typed(KernelCase *k) {
    AdaLNShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}
static long act_count(const AdaLNShape *s) { return (long)s->n * s->tokens * s->c; }
static long mod_count(const AdaLNShape *s) { return (long)s->n * s->mod_stride; }
static long mod_index(const AdaLNShape *s, long i) { return i / (s->tokens * s->c) * s->mod_stride + i % s->c; }

/* ---- modulate: x shift scale -> y;  gate: res h gate -> out ---------------------------------------------------- */

static void fwd_setup(KernelCase *k, const OpHead *ops) {
    const AdaLNShape s = typed(k);
    op_spec_bufs(k, 4, (long[]){act_count(&s), mod_count(&s), mod_count(&s), act_count(&s)},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT}, 0xF, 0);
}
static void gate_setup(KernelCase *k, const OpHead *ops) {
    const AdaLNShape s = typed(k);
    op_spec_bufs(k, 4, (long[]){act_count(&s), act_count(&s), mod_count(&s), act_count(&s)},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT}, 0xF, 0);
}
static void mod_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const AdaLNShape s = shape_of(k);
    table(ops)->modulate(&s, b[0], b[1], b[2], b[3]);
}
static void gate_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const AdaLNShape s = shape_of(k);
    table(ops)->gate(&s, b[0], b[1], b[2], b[3]);
}
static void mod_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const AdaLNShape s = shape_of(k);
    for (long i = 0; i < act_count(&s); i++) {
        const long m = mod_index(&s, i);
        ref[3][i] = (double)in[0][i] * (1.0 + in[2][m]) + in[1][m];
    }
}
static void gate_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const AdaLNShape s = shape_of(k);
    for (long i = 0; i < act_count(&s); i++) ref[3][i] = in[0][i] + (double)in[2][mod_index(&s, i)] * in[1][i];
}

/* ---- backwards: dy x scale -> dx dshift dscale;  dout h gate -> dh dgate (beta on every output) ----------------- */

static void mod_bwd_setup(KernelCase *k, const OpHead *ops) {
    const AdaLNShape s = typed(k);
    op_spec_bufs(k, 6, (long[]){act_count(&s), act_count(&s), mod_count(&s), act_count(&s), mod_count(&s), mod_count(&s)},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_OUT}, 0x3F, 0x38);
}
static void gate_bwd_setup(KernelCase *k, const OpHead *ops) {
    const AdaLNShape s = typed(k);
    op_spec_bufs(k, 5, (long[]){act_count(&s), act_count(&s), mod_count(&s), act_count(&s), mod_count(&s)},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT}, 0x1F, 0x18);
}
static void mod_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const AdaLNShape s = shape_of(k);
    table(ops)->modulate_backward(&s, b[0], b[1], b[2], b[3], b[4], b[5], k->beta, k->beta);
}
static void gate_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const AdaLNShape s = shape_of(k);
    table(ops)->gate_backward(&s, b[0], b[1], b[2], b[3], b[4], k->beta, k->beta);
}
/* d_in = dy*(add1 + v); sums (sum0 may be -1: none) over each sample's tokens of dy and dy*w */
static void bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, double add1, int d_in, int sum0,
                    int sum1) {
    const AdaLNShape s = shape_of(k);
    for (long m = 0; m < mod_count(&s); m++)
        if (m % s.mod_stride < s.c) {
            if (sum0 >= 0) ref[sum0][m] = 0;
            ref[sum1][m] = 0;
        }
    for (long i = 0; i < act_count(&s); i++) {
        const long m = mod_index(&s, i);
        ref[d_in][i] = in[0][i] * (add1 + in[2][m]);
        if (sum0 >= 0) ref[sum0][m] += in[0][i];
        ref[sum1][m] += (double)in[0][i] * in[1][i];
    }
}
static void mod_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    bwd_ref(k, in, ref, 1.0, 3, 4, 5);
}
static void gate_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    bwd_ref(k, in, ref, 0.0, 3, -1, 4);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp adaln_specs[] = {
    {"adaln_modulate", ADALN_MODULATE, 0, 1e-6, fwd_setup, mod_run, mod_ref, NULL},
    {"adaln_modulate_backward", ADALN_MODULATE_BACKWARD, 0, 1e-5, mod_bwd_setup, mod_bwd_run, mod_bwd_ref, NULL},
    {"adaln_gate", ADALN_GATE, 0, 1e-6, gate_setup, gate_run, gate_ref, NULL},
    {"adaln_gate_backward", ADALN_GATE_BACKWARD, 0, 1e-5, gate_bwd_setup, gate_bwd_run, gate_bwd_ref, NULL},
};
const int adaln_specs_count = sizeof adaln_specs / sizeof adaln_specs[0];

/* linear_spec.c: the fully connected layer's entries in the op spec table (common/op_spec.h), with float64
 * references computed from linear.h's definitions. A case's shape is a LinearShape in KernelCase.params. */
#include "common/op_spec.h"
#include "linear/linear.h"

/* the backend's table of this op, as the entries receive it */
static const LinearOps *table(const OpHead *ops) { return (const LinearOps *)(const void *)ops; }
static LinearShape shape_of(const KernelCase *k) {
    LinearShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static LinearShape typed(KernelCase *k) {
    LinearShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}

/* x w b -> y */
static void lin_fwd_setup(KernelCase *k, const OpHead *ops) {
    const LinearShape s = typed(k);
    op_spec_bufs(k, 4, (long[]){(long)s.n * s.in, (long)s.out * s.in, s.out, (long)s.n * s.out},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT}, 0xB, 0);
    k->flops = 2.0 * s.n * s.in * s.out;
}
static void lin_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const LinearShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], b[2], b[3]);
}
static void lin_fwd_nobias_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const LinearShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], NULL, b[3]);
}
static void lin_fwd_ref_bias(const KernelCase *k, const float *const *in, double *const *ref, int bias) {
    const LinearShape s = shape_of(k);
    for (long t = 0; t < (long)s.n * s.out; t++) {
        const long r = t / s.out, o = t % s.out;
        double acc = bias ? in[2][o] : 0.0;
        for (int i = 0; i < s.in; i++) acc += (double)in[0][r * s.in + i] * in[1][o * s.in + i];
        ref[3][t] = acc;
    }
}
static void lin_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    lin_fwd_ref_bias(k, in, ref, 1);
}
static void lin_fwd_nobias_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    lin_fwd_ref_bias(k, in, ref, 0);
}

/* dy w -> dx */
static void lin_data_setup(KernelCase *k, const OpHead *ops) {
    const LinearShape s = typed(k);
    op_spec_bufs(k, 3, (long[]){(long)s.n * s.out, (long)s.out * s.in, (long)s.n * s.in},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0x4);
    k->flops = 2.0 * s.n * s.in * s.out;
}
static void lin_data_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const LinearShape s = shape_of(k);
    table(ops)->backward_data(&s, b[0], b[1], b[2], k->beta);
}
static void lin_data_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const LinearShape s = shape_of(k);
    for (long t = 0; t < (long)s.n * s.in; t++) {
        const long r = t / s.in, i = t % s.in;
        double acc = 0;
        for (int o = 0; o < s.out; o++) acc += (double)in[0][r * s.out + o] * in[1][(long)o * s.in + i];
        ref[2][t] = acc;
    }
}

/* x dy -> dw db (float32) */
static void lin_filter_setup(KernelCase *k, const OpHead *ops) {
    const LinearShape s = typed(k);
    op_spec_bufs(k, 4, (long[]){(long)s.n * s.in, (long)s.n * s.out, (long)s.out * s.in, s.out},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_OUT, KB_OUT}, 0x3, 0xC);
    k->flops = 2.0 * s.n * s.in * s.out;
}
static void lin_filter_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const LinearShape s = shape_of(k);
    table(ops)->backward_filter(&s, b[0], b[1], b[2], b[3], k->beta);
}
static void lin_filter_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const LinearShape s = shape_of(k);
    for (long t = 0; t < (long)s.out * s.in; t++) {
        const long o = t / s.in, i = t % s.in;
        double acc = 0;
        for (int r = 0; r < s.n; r++) acc += (double)in[1][(long)r * s.out + o] * in[0][(long)r * s.in + i];
        ref[2][t] = acc;
    }
    for (int o = 0; o < s.out; o++) {
        double acc = 0;
        for (int r = 0; r < s.n; r++) acc += in[1][(long)r * s.out + o];
        ref[3][o] = acc;
    }
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp linear_specs[] = {
    {"linear_forward", LINEAR_FORWARD, 0, 1e-5, lin_fwd_setup, lin_fwd_run, lin_fwd_ref, NULL},
    {"linear_forward_nobias", LINEAR_FORWARD, 0, 1e-5, lin_fwd_setup, lin_fwd_nobias_run, lin_fwd_nobias_ref, NULL},
    {"linear_backward_data", LINEAR_BACKWARD_DATA, 0, 1e-5, lin_data_setup, lin_data_run, lin_data_ref, NULL},
    {"linear_backward_filter", LINEAR_BACKWARD_FILTER, 0, 1e-5, lin_filter_setup, lin_filter_run, lin_filter_ref,
     NULL},
};
const int linear_specs_count = sizeof linear_specs / sizeof linear_specs[0];

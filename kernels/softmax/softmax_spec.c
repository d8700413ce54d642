/* softmax_spec.c: softmax's entries in the op spec table (common/op_spec.h), with float64 references; inputs
 * uniform in [-4, 4] so rows are far from uniform. A case's shape is a SoftmaxShape in KernelCase.params. */
#include <math.h>

#include "common/op_spec.h"
#include "softmax/softmax.h"

static const SoftmaxOps *table(const OpHead *ops) { return (const SoftmaxOps *)(const void *)ops; }
static SoftmaxShape shape_of(const KernelCase *k) {
    SoftmaxShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static SoftmaxShape typed(KernelCase *k) {
    SoftmaxShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}

static void fwd_setup(KernelCase *k, const OpHead *ops) {
    const SoftmaxShape s = typed(k);
    const long n = s.rows * s.cols;
    op_spec_bufs(k, 2, (long[]){n, n}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0);
}
static void fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const SoftmaxShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1]);
}
static void fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const SoftmaxShape s = shape_of(k);
    for (long r = 0; r < s.rows; r++) {
        const float *x = in[0] + r * s.cols;
        double m = x[0], sum = 0;
        for (int j = 1; j < s.cols; j++) m = x[j] > m ? x[j] : m;
        for (int j = 0; j < s.cols; j++) sum += exp(x[j] - m);
        for (int j = 0; j < s.cols; j++) ref[1][r * s.cols + j] = exp(x[j] - m) / sum;
    }
}

/* y, dy -> dx (beta); y a softmax output (see fill) */
static void bwd_setup(KernelCase *k, const OpHead *ops) {
    const SoftmaxShape s = typed(k);
    const long n = s.rows * s.cols;
    op_spec_bufs(k, 3, (long[]){n, n, n}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0x4);
}
static void bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const SoftmaxShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], b[2], k->beta);
}
static void bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const SoftmaxShape s = shape_of(k);
    for (long r = 0; r < s.rows; r++) {
        const float *y = in[0] + r * s.cols, *dy = in[1] + r * s.cols;
        double dot = 0;
        for (int j = 0; j < s.cols; j++) dot += (double)dy[j] * y[j];
        for (int j = 0; j < s.cols; j++) ref[2][r * s.cols + j] = y[j] * (dy[j] - dot);
    }
}

/* the forward's x (and the backward's dy): uniform in [-4, 4]; the backward's y: a softmax of such a row */
static void sm_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    const SoftmaxShape s = shape_of(k);
    op_spec_uniform_fill(h, count, seed, b);
    for (long i = 0; i < count; i++) h[i] *= 4.0f;
    const int is_y = k->nbuf == 3 && b == 0;
    if (!is_y) return;
    for (long r = 0; r < s.rows; r++) {
        float *y = h + r * s.cols;
        double sum = 0;
        for (int j = 0; j < s.cols; j++) sum += exp(y[j]);
        for (int j = 0; j < s.cols; j++) y[j] = (float)(exp(y[j]) / sum);
    }
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp softmax_specs[] = {
    {"softmax_forward", SOFTMAX_FORWARD, 0, 1e-6, fwd_setup, fwd_run, fwd_ref, sm_fill},
    {"softmax_backward", SOFTMAX_BACKWARD, 0, 1e-6, bwd_setup, bwd_run, bwd_ref, sm_fill},
};
const int softmax_specs_count = sizeof softmax_specs / sizeof softmax_specs[0];

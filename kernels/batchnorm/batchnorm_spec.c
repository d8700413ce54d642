/* batchnorm_spec.c: BatchNorm's entries in the op spec table (common/op_spec.h), one per piece of batchnorm.h
 * (stats without and with the center, finalize in training and eval, forward, backward_reduce, backward), each with
 * a float64 reference. A case's shape is a BatchNormShape in KernelCase.params; KernelCase.count, when positive, is
 * the count of values per channel over every rank (the statistics summed across ranks: count > n*spatial), else
 * n*spatial (one rank). finalize uses eps 1e-5 and momentum 0.1 (PyTorch's defaults). The _relu entries are the pieces
 * with the ReLU fused (shape.relu: train.fuse's BatchNorm+ReLU node). A shape with ldx > c reads x and writes dx as
 * the first c channels of rows ldx apart (a dense block's buffer: batchnorm.h); the reference leaves the channels
 * after them NaN, so they are not compared (the whole-network checks against MONAI see any write there). */
#include <math.h>

#include "batchnorm/batchnorm.h"
#include "common/op_spec.h"

#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f

/* the backend's table of this op, as the entries receive it */
static const BatchNormOps *table(const OpHead *ops) { return (const BatchNormOps *)(const void *)ops; }
static BatchNormShape shape_of(const KernelCase *k) {
    BatchNormShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static BatchNormShape typed(KernelCase *k) {
    BatchNormShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}
static long rows_of(const BatchNormShape *s) { return (long)s->n * s->spatial; }
/* the count of x (and dx): rows of ldx */
static long x_count(const BatchNormShape *s) { return rows_of(s) * batchnorm_ldx(s); }
/* where value i of the [rows][c] view lies in x (and dx) */
static long xi(const BatchNormShape *s, long i) { return i / s->c * batchnorm_ldx(s) + i % s->c; }
static double count_of(const KernelCase *k) {
    const BatchNormShape s = shape_of(k);
    return k->count > 0 ? (double)k->count : (double)rows_of(&s);
}
static double u01(unsigned seed, int b, long i) { return vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i)); }

/* an activation with a mean and spread of its own per channel: 0.3*(j%5) + u*(1 + 0.2*(j%7)), u in [-1, 1] */
static float act_value(unsigned seed, int b, long i, int c) {
    const int j = (int)(i % c);
    return (float)(0.3 * (j % 5) + (2 * u01(seed, b, i) - 1) * (1 + 0.2 * (j % 7)));
}

/* ---- stats: x [-> center] -> out ----------------------------------------------------------------------------- */

static void stats_setup(KernelCase *k, const OpHead *ops) {
    const BatchNormShape s = typed(k);
    op_spec_bufs(k, 2, (long[]){x_count(&s), s.c}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x1, 0);
}
static void stats_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const BatchNormShape s = shape_of(k);
    table(ops)->stats(&s, b[0], NULL, count_of(k), b[1]);
}
static void stats_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const BatchNormShape s = shape_of(k);
    for (int j = 0; j < s.c; j++) ref[1][j] = 0;
    for (long i = 0; i < rows_of(&s) * s.c; i++) ref[1][i % s.c] += in[0][xi(&s, i)];
}
static void centered_setup(KernelCase *k, const OpHead *ops) {
    const BatchNormShape s = typed(k);
    op_spec_bufs(k, 3, (long[]){x_count(&s), s.c, s.c}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x1, 0);
}
static void centered_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const BatchNormShape s = shape_of(k);
    table(ops)->stats(&s, b[0], b[1], count_of(k), b[2]);
}
static void centered_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const BatchNormShape s = shape_of(k);
    const double count = count_of(k);
    for (int j = 0; j < s.c; j++) ref[2][j] = 0;
    for (long i = 0; i < rows_of(&s) * s.c; i++) {
        const double d = in[0][xi(&s, i)] - in[1][i % s.c] / count;
        ref[2][i % s.c] += d * d;
    }
}
/* x: act_value; center: count times a mean near the channel's own (0.3*(j%5), give or take 0.1) */
static void stats_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    const BatchNormShape s = shape_of(k);
    for (long i = 0; i < count; i++)
        h[i] = b == 0 ? act_value(seed, b, i, (int)batchnorm_ldx(&s))
                      : (float)(count_of(k) * (0.3 * (i % 5) + 0.2 * u01(seed, b, i) - 0.1));
}

/* ---- finalize: sum sq -> mean invstd, running_mean running_var (in and out) ---------------------------------- */

static void fin_setup(KernelCase *k, const OpHead *ops) {
    const BatchNormShape s = typed(k);
    op_spec_bufs(k, 6, (long[]){s.c, s.c, s.c, s.c, s.c, s.c},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_OUT, KB_OUT, KB_INOUT, KB_INOUT}, 0, 0);
}
static void fin_run(const OpHead *ops, const KernelCase *k, void *const *b, int train) {
    const BatchNormShape s = shape_of(k);
    table(ops)->finalize(s.c, count_of(k), BN_EPS, BN_MOMENTUM, train, b[0], b[1], b[2], b[3], b[4], b[5]);
}
static void fin_train_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) { fin_run(ops, k, b, 1); }
static void fin_eval_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) { fin_run(ops, k, b, 0); }
static void fin_ref(const KernelCase *k, const float *const *in, double *const *ref, int train) {
    const BatchNormShape s = shape_of(k);
    const double count = count_of(k), eps = BN_EPS, mom = BN_MOMENTUM;
    for (int j = 0; j < s.c; j++) {
        if (!train) {
            ref[2][j] = in[4][j];
            ref[3][j] = 1 / sqrt(in[5][j] + eps);
            ref[4][j] = in[4][j];
            ref[5][j] = in[5][j];
            continue;
        }
        const double m = in[0][j] / count, var = in[1][j] / count;
        ref[2][j] = m;
        ref[3][j] = 1 / sqrt(var + eps);
        ref[4][j] = (1 - mom) * in[4][j] + mom * m;                     /* PyTorch's update */
        /* with the unbiased variance; a single value has none (PyTorch refuses it): the biased one, batchnorm.h */
        ref[5][j] = (1 - mom) * in[5][j] + mom * (count > 1 ? in[1][j] / (count - 1) : var);
    }
}
static void fin_train_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    fin_ref(k, in, ref, 1);
}
static void fin_eval_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    fin_ref(k, in, ref, 0);
}
/* sum = count*mean (mean in [-1, 1]), sq = count*var (var in [0.01, 2]: a tiny one tests eps), running statistics */
static void fin_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    const double n = count_of(k);
    for (long i = 0; i < count; i++) {
        const double u = u01(seed, b, i);
        h[i] = (float)(b == 0 ? n * (2 * u - 1) : b == 1 ? n * (i == 0 ? 1e-6 : 0.01 + 2 * u) : b == 4 ? 2 * u - 1 : 0.1 + u);
    }
}

/* ---- forward: x mean invstd gamma beta -> y ------------------------------------------------------------------ */

static void fwd_setup(KernelCase *k, const OpHead *ops) {
    const BatchNormShape s = typed(k);
    op_spec_bufs(k, 6, (long[]){x_count(&s), s.c, s.c, s.c, s.c, rows_of(&s) * s.c},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT}, 0x21, 0);
}
static void fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const BatchNormShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], b[2], b[3], b[4], b[5]);
}
static void fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const BatchNormShape s = shape_of(k);
    for (long i = 0; i < rows_of(&s) * s.c; i++) {
        const int j = (int)(i % s.c);
        const double v = ((double)in[0][xi(&s, i)] - in[1][j]) * in[2][j] * in[3][j] + in[4][j];
        ref[5][i] = s.relu && v < 0 ? 0.0 : v;
    }
}
/* the fused ReLU's forward (batchnorm.h's shape.relu): the same buffers */
static void relu_on(KernelCase *k) {
    BatchNormShape s = shape_of(k);
    s.relu = 1;
    kernel_case_set_params(k, &s, sizeof s);
}
static void fwd_relu_setup(KernelCase *k, const OpHead *ops) {
    relu_on(k);
    fwd_setup(k, ops);
}
/* x: act_value; mean in [0, 1.2]; invstd in [0.5, 2]; gamma in [0.5, 1.5]; beta in [-0.5, 0.5] */
static void params_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    const BatchNormShape s = shape_of(k);
    for (long i = 0; i < count; i++) {
        const double u = u01(seed, b, i);
        h[i] = b == 0 ? act_value(seed, b, i, (int)batchnorm_ldx(&s))
                      : (float)(b == 2 ? 0.5 + 1.5 * u : b == 3 ? 0.5 + u : b == 4 ? u - 0.5 : 1.2 * u);
    }
}

/* ---- backward_reduce: dy x mean invstd [gamma beta] -> sum_dy sum_dy_xhat ------------------------------------- */
/* With the fused ReLU (shape.relu, the _relu entries) the forward's gamma and beta are the last buffers, and the
 * reference takes dy where the pre-activation is above 0 (relu.h's backward: y > 0); so in backward's below. */

/* dy where the fused ReLU's pre-activation batchnorm_pre(x) is above 0, else 0; without the ReLU dy. In float, the
 * kernels' own expression: a reference in double would disagree on the sign of values within rounding of 0. */
static double masked(const BatchNormShape *s, double dy, float x, float mean, float invstd, const float *gamma,
                     const float *beta, int j) {
    return !s->relu || batchnorm_pre(x, mean, invstd * gamma[j], beta[j]) > 0.0f ? dy : 0.0;
}

static void bred_setup(KernelCase *k, const OpHead *ops) {
    const BatchNormShape s = typed(k);
    const long x = rows_of(&s) * s.c;
    op_spec_bufs(k, 6 + 2 * s.relu, (long[]){x, x_count(&s), s.c, s.c, s.c, s.c, s.c, s.c},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_IN, KB_IN}, 0x3, 0);
}
static void bred_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const BatchNormShape s = shape_of(k);
    table(ops)->backward_reduce(&s, b[0], b[1], b[2], b[3], s.relu ? b[6] : NULL, s.relu ? b[7] : NULL, b[4], b[5]);
}
static void bred_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const BatchNormShape s = shape_of(k);
    for (int j = 0; j < s.c; j++) ref[4][j] = ref[5][j] = 0;
    for (long i = 0; i < rows_of(&s) * s.c; i++) {
        const int j = (int)(i % s.c);
        const double g = masked(&s, in[0][i], in[1][xi(&s, i)], in[2][j], in[3][j], s.relu ? in[6] : NULL,
                                s.relu ? in[7] : NULL, j);
        ref[4][j] += g;
        ref[5][j] += g * ((double)in[1][xi(&s, i)] - in[2][j]) * in[3][j];
    }
}
/* dy uniform, x act_value, mean and invstd as the forward's */
static void grad_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    const BatchNormShape s = shape_of(k);
    if (b == 0) op_spec_uniform_fill(h, count, seed, b);
    else if (b == 1)
        for (long i = 0; i < count; i++) h[i] = act_value(seed, b, i, (int)batchnorm_ldx(&s));
    else if (b == 5 || b == 6) /* backward's sums: sum_dy and sum_dy_xhat of a batch of count values, give or take */
        for (long i = 0; i < count; i++) h[i] = (float)(sqrt(count_of(k)) * (2 * u01(seed, b, i) - 1));
    else
        params_fill(k, b - 1, h, count, seed); /* mean (2), invstd (3), gamma (4): the forward's buffers 1, 2, 3 */
}
/* the fused ReLU's gamma (6) and beta (7) as the forward's: about half the pre-activations below 0 */
static void bred_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b >= 6) params_fill(k, b - 3, h, count, seed);
    else grad_fill(k, b, h, count, seed);
}

/* ---- backward: dy x mean invstd gamma sum_dy sum_dy_xhat [beta] -> dx ---------------------------------------- */

static void bwd_setup(KernelCase *k, const OpHead *ops) {
    const BatchNormShape s = typed(k);
    const long x = rows_of(&s) * s.c;
    op_spec_bufs(k, 8 + s.relu, (long[]){x, x_count(&s), s.c, s.c, s.c, s.c, s.c, x_count(&s), s.c},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT, KB_IN}, 0x83, 0x80);
}
static void bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const BatchNormShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], b[2], b[3], b[4], s.relu ? b[8] : NULL, b[5], b[6], count_of(k), b[7],
                         k->beta);
}
static void bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const BatchNormShape s = shape_of(k);
    const double count = count_of(k);
    for (long i = 0; i < x_count(&s); i++) ref[7][i] = NAN; /* the channels after c: not this op's */
    for (long i = 0; i < rows_of(&s) * s.c; i++) {
        const int j = (int)(i % s.c);
        const double xhat = ((double)in[1][xi(&s, i)] - in[2][j]) * in[3][j];
        const double g = masked(&s, in[0][i], in[1][xi(&s, i)], in[2][j], in[3][j], in[4], s.relu ? in[8] : NULL, j);
        ref[7][xi(&s, i)] = (double)in[4][j] * in[3][j] * (g - in[5][j] / count - xhat * in[6][j] / count);
    }
}
/* the fused ReLU's beta (8) as the forward's */
static void bwd_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 8) params_fill(k, 4, h, count, seed);
    else grad_fill(k, b, h, count, seed);
}

/* the fused ReLU's pieces: the plain ones with shape.relu set */
static void bred_relu_setup(KernelCase *k, const OpHead *ops) {
    relu_on(k);
    bred_setup(k, ops);
}
static void bwd_relu_setup(KernelCase *k, const OpHead *ops) {
    relu_on(k);
    bwd_setup(k, ops);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp batchnorm_specs[] = {
    {"batchnorm_stats", BN_STATS, 0, 1e-5, stats_setup, stats_run, stats_ref, stats_fill},
    {"batchnorm_stats_centered", BN_STATS, 0, 1e-5, centered_setup, centered_run, centered_ref, stats_fill},
    {"batchnorm_finalize", BN_FINALIZE, 0, 1e-6, fin_setup, fin_train_run, fin_train_ref, fin_fill},
    {"batchnorm_finalize_eval", BN_FINALIZE, 0, 1e-6, fin_setup, fin_eval_run, fin_eval_ref, fin_fill},
    {"batchnorm_forward", BN_FORWARD, 0, 1e-5, fwd_setup, fwd_run, fwd_ref, params_fill},
    {"batchnorm_backward_reduce", BN_BACKWARD_REDUCE, 0, 1e-5, bred_setup, bred_run, bred_ref, bred_fill},
    {"batchnorm_backward", BN_BACKWARD, 0, 1e-5, bwd_setup, bwd_run, bwd_ref, bwd_fill},
    {"batchnorm_forward_relu", BN_FORWARD, 0, 1e-5, fwd_relu_setup, fwd_run, fwd_ref, params_fill},
    {"batchnorm_backward_reduce_relu", BN_BACKWARD_REDUCE, 0, 1e-5, bred_relu_setup, bred_run, bred_ref, bred_fill},
    {"batchnorm_backward_relu", BN_BACKWARD, 0, 1e-5, bwd_relu_setup, bwd_run, bwd_ref, bwd_fill},
};
const int batchnorm_specs_count = sizeof batchnorm_specs / sizeof batchnorm_specs[0];

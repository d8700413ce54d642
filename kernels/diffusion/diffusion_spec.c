/* diffusion_spec.c: the diffusion pieces' entries in the op spec table (common/op_spec.h), with float64 references
 * written from diffusion.h's formulas (not diffusion_math.h's code). A case's shape is a DiffusionShape in
 * KernelCase.params (its param picks v or epsilon); the coefficients are filled in [0.05, 1) (alpha divides under
 * epsilon), the loss weights in [0, 2), the loss scale is OP_SPEC_LOSS_SCALE. */
#include "common/op_spec.h"
#include "diffusion/diffusion.h"

static const DiffusionOps *table(const OpHead *ops) { return (const DiffusionOps *)(const void *)ops; }
static DiffusionShape shape_of(const KernelCase *k) {
    DiffusionShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static DiffusionShape typed(KernelCase *k) {
    DiffusionShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}
#define SAMPLE(s, i) ((i) / (s).count)
/* the data scale k, in double (diffusion.h: 0 reads as 1) */
static double scale_of(const DiffusionShape *s) { return (double)diffusion_data_scale(s); }

/* ---- q_sample: alpha sigma x0 eps -> x_t target ---------------------------------------------------------------- */

static void q_setup(KernelCase *k, const OpHead *ops) {
    const DiffusionShape s = typed(k);
    const long t = diffusion_total(&s);
    op_spec_bufs(k, 6, (long[]){s.n, s.n, t, t, t, t}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT},
                 0x10, 0);
}
static void q_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const DiffusionShape s = shape_of(k);
    table(ops)->q_sample(&s, b[0], b[1], b[2], b[3], b[4], b[5]);
}
static void q_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const DiffusionShape s = shape_of(k);
    for (long i = 0; i < diffusion_total(&s); i++) {
        const double a = in[0][SAMPLE(s, i)], sg = in[1][SAMPLE(s, i)], x0 = scale_of(&s) * in[2][i], e = in[3][i];
        ref[4][i] = a * x0 + sg * e;
        ref[5][i] = s.param == DIFFUSION_V ? a * e - sg * x0 : e;
    }
}

/* ---- predict_x0: alpha sigma x_t pred -> x0_hat;  backward: alpha sigma dx0 -> dpred (beta) -------------------- */

static void x0_setup(KernelCase *k, const OpHead *ops) {
    const DiffusionShape s = typed(k);
    const long t = diffusion_total(&s);
    op_spec_bufs(k, 5, (long[]){s.n, s.n, t, t, t}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT}, 0x1C, 0);
}
static void x0_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const DiffusionShape s = shape_of(k);
    table(ops)->predict_x0(&s, b[0], b[1], b[2], b[3], b[4]);
}
static void x0_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const DiffusionShape s = shape_of(k);
    for (long i = 0; i < diffusion_total(&s); i++) {
        const double a = in[0][SAMPLE(s, i)], sg = in[1][SAMPLE(s, i)], xt = in[2][i], p = in[3][i];
        ref[4][i] = (s.param == DIFFUSION_V ? a * xt - sg * p : (xt - sg * p) / a) / scale_of(&s);
    }
}
static void x0b_setup(KernelCase *k, const OpHead *ops) {
    const DiffusionShape s = typed(k);
    const long t = diffusion_total(&s);
    op_spec_bufs(k, 4, (long[]){s.n, s.n, t, t}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT}, 0xC, 0x8);
}
static void x0b_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const DiffusionShape s = shape_of(k);
    table(ops)->predict_x0_backward(&s, b[0], b[1], b[2], b[3], k->beta);
}
static void x0b_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const DiffusionShape s = shape_of(k);
    for (long i = 0; i < diffusion_total(&s); i++) {
        const double a = in[0][SAMPLE(s, i)], sg = in[1][SAMPLE(s, i)];
        ref[3][i] = (s.param == DIFFUSION_V ? -sg : -sg / a) / scale_of(&s) * in[2][i];
    }
}

/* ---- loss: pred target w -> loss dpred (loss_scale read from buffer 5); unweighted: w NULL ---------------------- */

static void loss_setup(KernelCase *k, const OpHead *ops) {
    const DiffusionShape s = typed(k);
    const long t = diffusion_total(&s);
    op_spec_bufs(k, 6, (long[]){t, t, s.n, 1, t, 1}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_IN},
                 0x11, 0);
}
static void loss_run_w(const OpHead *ops, const KernelCase *k, void *const *b, int weighted) {
    const DiffusionShape s = shape_of(k);
    table(ops)->loss(&s, b[0], b[1], weighted ? b[2] : NULL, b[3], b[4], 1.0f, b[5]);
}
static void loss_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) { loss_run_w(ops, k, b, 1); }
static void loss_run_ones(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) { loss_run_w(ops, k, b, 0); }
static void loss_ref_w(const KernelCase *k, const float *const *in, double *const *ref, int weighted) {
    const DiffusionShape s = shape_of(k);
    double sum = 0;
    for (int b = 0; b < s.n; b++) {
        const double w = weighted ? in[2][b] : 1.0;
        double m = 0;
        for (long e = 0; e < s.count; e++) {
            const long i = (long)b * s.count + e;
            const double d = (double)in[0][i] - in[1][i];
            m += d * d;
            ref[4][i] = in[5][0] * 2.0 * w * d / ((double)s.n * s.count);
        }
        sum += w * (s.count ? m / s.count : 0.0);
    }
    ref[3][0] = s.n ? sum / s.n : 0.0;
}
static void loss_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    loss_ref_w(k, in, ref, 1);
}
static void loss_ref_ones(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    loss_ref_w(k, in, ref, 0);
}

/* ---- ddim_step: alpha sigma alpha_next sigma_next x_t pred -> x_next ------------------------------------------- */

static void ddim_setup(KernelCase *k, const OpHead *ops) {
    const DiffusionShape s = typed(k);
    const long t = diffusion_total(&s);
    op_spec_bufs(k, 7, (long[]){s.n, s.n, s.n, s.n, t, t, t},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT}, 0x20, 0);
}
static void ddim_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const DiffusionShape s = shape_of(k);
    table(ops)->ddim_step(&s, b[0], b[1], b[2], b[3], b[4], b[5], b[6]);
}
static void ddim_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const DiffusionShape s = shape_of(k);
    for (long i = 0; i < diffusion_total(&s); i++) {
        const long b = SAMPLE(s, i);
        const double a = in[0][b], sg = in[1][b], xt = in[4][i], p = in[5][i];
        const double x0 = s.param == DIFFUSION_V ? a * xt - sg * p : (xt - sg * p) / a;
        const double e = s.param == DIFFUSION_V ? sg * xt + a * p : p;
        ref[6][i] = in[2][b] * x0 + in[3][b] * e;
    }
}

static void coef_fill(float *h, long count, unsigned seed, int b) {
    for (long i = 0; i < count; i++) h[i] = 0.05f + 0.95f * vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
}
/* buffers 0 and 1 (alpha, sigma) or 0 to 3 (and the next timestep's) in [0.05, 1); the rest in [-1, 1) */
static void fill2(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b < 2) coef_fill(h, count, seed, b);
    else op_spec_uniform_fill(h, count, seed, b);
}
static void fill4(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b < 4) coef_fill(h, count, seed, b);
    else op_spec_uniform_fill(h, count, seed, b);
}
/* the loss: weights (buffer 2) in [0, 2), the loss scale (5) */
static void loss_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 5) h[0] = OP_SPEC_LOSS_SCALE;
    else if (b == 2)
        for (long i = 0; i < count; i++) h[i] = 2.0f * vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
    else op_spec_uniform_fill(h, count, seed, b);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp diffusion_specs[] = {
    {"diffusion_q_sample", DIFFUSION_Q_SAMPLE, 0, 1e-6, q_setup, q_run, q_ref, fill2},
    {"diffusion_predict_x0", DIFFUSION_PREDICT_X0, 0, 1e-6, x0_setup, x0_run, x0_ref, fill2},
    {"diffusion_predict_x0_backward", DIFFUSION_PREDICT_X0_BACKWARD, 0, 1e-6, x0b_setup, x0b_run, x0b_ref, fill2},
    {"diffusion_loss", DIFFUSION_LOSS, 0, 1e-5, loss_setup, loss_run, loss_ref, loss_fill},
    {"diffusion_loss_unweighted", DIFFUSION_LOSS, 0, 1e-5, loss_setup, loss_run_ones, loss_ref_ones, loss_fill},
    {"diffusion_ddim_step", DIFFUSION_DDIM_STEP, 0, 1e-6, ddim_setup, ddim_run, ddim_ref, fill4},
};
const int diffusion_specs_count = sizeof diffusion_specs / sizeof diffusion_specs[0];

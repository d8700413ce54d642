/* head_loss_spec.c: the head losses' entries in the op spec table (common/op_spec.h): CE with and without class
 * weights, BCE with logits with and without pos_weight (logits up to |z| = 60: the stable forms), and the Cox partial
 * likelihood (Breslow) with ties and censoring, and with every sample censored (loss 0, gradient 0). The references
 * are written from the definitions in float64, apart from the kernels' forms: CE straight from log-softmax, BCE in
 * PyTorch's form ((1-t) z + (1 + (pw-1) t)(log1p(e^-|z|) + max(-z, 0))), Cox by brute force over every pair
 * (risk set {j: t_j >= t_i}, its sum relative to the event's own exp(z_i)). Buffers: z, target, weight, loss_out, dz, loss_scale (=
 * OP_SPEC_LOSS_SCALE); the call's grad_scale is 0.5. A case's shape is a HeadLossShape in KernelCase.params (its
 * kind is the entry's). */
#include <math.h>

#include "common/op_spec.h"
#include "head_loss/head_loss.h"

#define HL_GRAD_SCALE 0.5f

/* the backend's table of this op, as the entries receive it */
static const HeadLossOps *table(const OpHead *ops) { return (const HeadLossOps *)(const void *)ops; }
static HeadLossShape shape_of(const KernelCase *k) {
    HeadLossShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static double u01(unsigned seed, int b, long i) { return vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i)); }

static void setup_kind(KernelCase *k, HeadLossKind kind) {
    HeadLossShape s = shape_of(k);
    s.kind = kind;
    if (kind == HEAD_LOSS_COX) s.k = 1;
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    const long nz = (long)s.n * s.k, nt = kind == HEAD_LOSS_CE ? s.n : kind == HEAD_LOSS_BCE ? nz : 2L * s.n;
    op_spec_bufs(k, 6, (long[]){nz, nt, s.k, 1, nz, 1}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_IN},
                 0x11, 0);
}
static void ce_setup(KernelCase *k, const OpHead *ops) { setup_kind(k, HEAD_LOSS_CE); }
static void bce_setup(KernelCase *k, const OpHead *ops) { setup_kind(k, HEAD_LOSS_BCE); }
static void cox_setup(KernelCase *k, const OpHead *ops) { setup_kind(k, HEAD_LOSS_COX); }

static void run_weighted(const OpHead *ops, const KernelCase *k, void *const *b, int weighted) {
    const HeadLossShape s = shape_of(k);
    table(ops)->run(&s, b[0], b[1], weighted ? b[2] : NULL, b[3], b[4], HL_GRAD_SCALE, b[5]);
}
static void run_plain(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) { run_weighted(ops, k, b, 0); }
static void run_weights(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) { run_weighted(ops, k, b, 1); }

/* ---- references ------------------------------------------------------------------------------------------------ */

/* log sum_j exp(z_ij) of row i, shifted by the row's max (so a single class gives exactly z: loss 0) */
static double row_lse(const float *z, int k) {
    double m = z[0], se = 0;
    for (int j = 1; j < k; j++) m = z[j] > m ? z[j] : m;
    for (int j = 0; j < k; j++) se += exp(z[j] - m);
    return m + log(se);
}
static void ce_ref_w(const KernelCase *k, const float *const *in, double *const *ref, int weighted) {
    const HeadLossShape s = shape_of(k);
    const double g = HL_GRAD_SCALE * in[5][0];
    double W = 0, L = 0;
    for (int i = 0; i < s.n; i++) {
        const int t = (int)in[1][i];
        const double w = weighted ? in[2][t] : 1.0;
        W += w;
        L += w * -(in[0][(long)i * s.k + t] - row_lse(in[0] + (long)i * s.k, s.k)); /* -log softmax */
    }
    ref[3][0] = L / W;
    for (int i = 0; i < s.n; i++) {
        const int t = (int)in[1][i];
        const double w = weighted ? in[2][t] : 1.0, lse = row_lse(in[0] + (long)i * s.k, s.k);
        for (int j = 0; j < s.k; j++) ref[4][(long)i * s.k + j] = g * w / W * (exp(in[0][(long)i * s.k + j] - lse) - (j == t));
    }
}
static void ce_ref(const KernelCase *k, const float *const *in, double *const *ref, long st) { ce_ref_w(k, in, ref, 0); }
static void ce_w_ref(const KernelCase *k, const float *const *in, double *const *ref, long st) { ce_ref_w(k, in, ref, 1); }

static double sig(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }
static void bce_ref_w(const KernelCase *k, const float *const *in, double *const *ref, int weighted) {
    const HeadLossShape s = shape_of(k);
    const long count = (long)s.n * s.k;
    const double g = HL_GRAD_SCALE * in[5][0];
    double L = 0;
    for (long e = 0; e < count; e++) {
        const double z = in[0][e], t = in[1][e], pw = weighted ? in[2][e % s.k] : 1.0, lw = 1 + (pw - 1) * t;
        if (t < 0) { /* a masked cell: no term, no gradient, still counted in the mean */
            ref[4][e] = 0;
            continue;
        }
        L += (1 - t) * z + lw * (log1p(exp(-fabs(z))) + (z < 0 ? -z : 0));
        ref[4][e] = g / (double)count * ((1 - t) - lw * sig(-z));
    }
    ref[3][0] = L / (double)count;
}
static void bce_ref(const KernelCase *k, const float *const *in, double *const *ref, long st) { bce_ref_w(k, in, ref, 0); }
static void bce_w_ref(const KernelCase *k, const float *const *in, double *const *ref, long st) { bce_ref_w(k, in, ref, 1); }

static void cox_ref(const KernelCase *k, const float *const *in, double *const *ref, long st) {
    const HeadLossShape s = shape_of(k);
    const float *z = in[0], *tg = in[1];
    const double g = HL_GRAD_SCALE * in[5][0];
    double E = 0, L = 0;
    for (int i = 0; i < s.n; i++) E += tg[2 * i + 1] != 0;
    for (int m = 0; m < s.n; m++) ref[4][m] = 0;
    if (E == 0) {
        ref[3][0] = 0;
        return;
    }
    for (int i = 0; i < s.n; i++) {
        if (tg[2 * i + 1] == 0) continue;
        double S = 0; /* sum over the risk set of exp(z_j - z_i): i is in it, so S >= 1 */
        for (int j = 0; j < s.n; j++)
            if (tg[2 * j] >= tg[2 * i]) S += exp((double)z[j] - z[i]);
        L += -log(S); /* z_i - log sum exp(z_j) */
        for (int m = 0; m < s.n; m++) /* d/dz_m of -(z_i - log sum exp z_j)/E */
            if (tg[2 * m] >= tg[2 * i]) ref[4][m] += g / E * exp((double)z[m] - z[i]) / S;
        ref[4][i] -= g / E;
    }
    ref[3][0] = -L / E;
}

/* ---- inputs ---------------------------------------------------------------------------------------------------- */

/* z: CE uniform in [-4, 4]; BCE in [-6, 6] with every 7th at +-20..60; Cox in [-3, 3] with sample 1 at 30 (exp
 * without a shift would overflow float); target: CE a class index, BCE 0 or 1 with every 5th 0.3 and every 11th
 * -1 (masked: CheXpert's u_ignore), Cox a time in
 * 1..5 (ties) and an event with probability 0.6 (`censored`: none); weight in [0.5, 2] (CE) or [0.5, 3] (BCE) */
static void fill_kind(const KernelCase *k, int b, float *h, long count, unsigned seed, int censored) {
    const HeadLossShape s = shape_of(k);
    for (long i = 0; i < count; i++) {
        const double u = u01(seed, b, i);
        float v = 0;
        if (b == 0) {
            if (s.kind == HEAD_LOSS_CE) v = (float)(8 * u - 4);
            else if (s.kind == HEAD_LOSS_BCE) v = i % 7 == 3 ? (float)((u < 0.5 ? -1 : 1) * (20 + 80 * fabs(u - 0.5))) : (float)(12 * u - 6);
            else v = i == 1 ? 30.0f : (float)(6 * u - 3);
        } else if (b == 1) {
            if (s.kind == HEAD_LOSS_CE) v = (float)(int)(u * s.k >= s.k ? s.k - 1 : u * s.k);
            else if (s.kind == HEAD_LOSS_BCE) v = i % 11 == 4 ? -1.0f : i % 5 == 2 ? 0.3f : u < 0.5 ? 0.0f : 1.0f;
            else v = i % 2 == 0 ? (float)(1 + (int)(u * 5 >= 5 ? 4 : u * 5)) : (!censored && u < 0.6 ? 1.0f : 0.0f);
        } else if (b == 2) {
            v = (float)(s.kind == HEAD_LOSS_CE ? 0.5 + 1.5 * u : 0.5 + 2.5 * u);
        } else if (b == 5) {
            v = OP_SPEC_LOSS_SCALE;
        }
        h[i] = v;
    }
}
static void hl_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) { fill_kind(k, b, h, count, seed, 0); }
static void hl_fill_censored(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    fill_kind(k, b, h, count, seed, 1);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp head_loss_specs[] = {
    {"head_loss_ce", HEAD_LOSS_RUN, 0, 1e-5, ce_setup, run_plain, ce_ref, hl_fill},
    {"head_loss_ce_weighted", HEAD_LOSS_RUN, 0, 1e-5, ce_setup, run_weights, ce_w_ref, hl_fill},
    {"head_loss_bce", HEAD_LOSS_RUN, 0, 1e-5, bce_setup, run_plain, bce_ref, hl_fill},
    {"head_loss_bce_pos_weight", HEAD_LOSS_RUN, 0, 1e-5, bce_setup, run_weights, bce_w_ref, hl_fill},
    {"head_loss_cox", HEAD_LOSS_RUN, 0, 1e-5, cox_setup, run_plain, cox_ref, hl_fill},
    {"head_loss_cox_censored", HEAD_LOSS_RUN, 0, 1e-5, cox_setup, run_plain, cox_ref, hl_fill_censored},
};
const int head_loss_specs_count = sizeof head_loss_specs / sizeof head_loss_specs[0];

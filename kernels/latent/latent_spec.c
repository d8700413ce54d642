/* latent_spec.c: the latent sampling's entries in the op spec table (common/op_spec.h): z = mu + exp(lv/2) eps
 * and its KL, with float64 references. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "latent/latent.h"

/* the backend's table of this op, as the entries receive it */
static const LatentOps *table(const OpHead *ops) { return (const LatentOps *)(const void *)ops; }
/* the case's shape (KernelCase.params) */
static LatentShape shape_of(const KernelCase *k) {
    LatentShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}

static const float KL_SCALE = 1e-3f;
static long lat_count(const KernelCase *k) {
    const LatentShape s = shape_of(k);
    return (long)s.n * s.count_per_sample;
}
/* mu logvar (act) eps (float32) -> z (act) kl */
static void lat_fwd_setup(KernelCase *k, const OpHead *ops) {
    const long c = lat_count(k);
    LatentShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    op_spec_bufs(k, 5, (long[]){c, c, c, c, 1}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT}, 0xB, 0);
}
/* mu logvar (act) eps (float32) dz (act) loss_scale [1] -> dmu dlogvar (act) */
static void lat_bwd_setup(KernelCase *k, const OpHead *ops) {
    const long c = lat_count(k);
    LatentShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    op_spec_bufs(k, 7, (long[]){c, c, c, c, 1, c, c}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT},
         0x6B, 0);
}
static void lat_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const LatentShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], b[2], b[3], b[4]);
}
static void lat_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const LatentShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], b[2], b[3], KL_SCALE, b[4], b[5], b[6]);
}
static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }
static void lat_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const LatentShape s = shape_of(k);
    double kl = 0;
    for (long i = 0; i < lat_count(k); i++) {
        const double lv = clampd(in[1][i], s.logvar_min, s.logvar_max), mu = in[0][i];
        ref[3][i] = mu + exp(0.5 * lv) * in[2][i];
        kl += 0.5 * (mu * mu + exp(lv) - 1 - lv);
    }
    ref[4][0] = kl / s.n;
}
static void lat_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const LatentShape s = shape_of(k);
    const double n = s.n, kls = (double)KL_SCALE * in[4][0];
    for (long i = 0; i < lat_count(k); i++) {
        const double raw = in[1][i], lv = clampd(raw, s.logvar_min, s.logvar_max), dz = in[3][i];
        ref[5][i] = dz + kls * in[0][i] / n;
        const int inside = raw >= s.logvar_min && raw <= s.logvar_max;
        ref[6][i] = inside ? dz * in[2][i] * 0.5 * exp(0.5 * lv) + kls * 0.5 * (exp(lv) - 1) / n : 0;
    }
}
static void lat_bwd_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 4) h[0] = OP_SPEC_LOSS_SCALE;
    else op_spec_uniform_fill(h, count, seed, b);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp latent_specs[] = {
    {"latent_forward", LATENT_FORWARD, 0, 1e-5, lat_fwd_setup, lat_fwd_run, lat_fwd_ref, NULL},
    {"latent_backward", LATENT_BACKWARD, 0, 1e-5, lat_bwd_setup, lat_bwd_run, lat_bwd_ref, lat_bwd_fill},
};
const int latent_specs_count = sizeof latent_specs / sizeof latent_specs[0];

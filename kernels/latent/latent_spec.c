/* latent_spec.c: the latent sampling's entries in the op spec table (common/op_spec.h): z = mu + exp(lv/2) eps
 * and its KL, with float64 references. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "latent/latent.h"

static const float KL_SCALE = 1e-3f;
static long lat_count(const KernelCase *k) { return (long)k->lat.n * k->lat.count_per_sample; }
/* mu logvar (act) eps (float32) -> z (act) kl */
static void lat_fwd_setup(KernelCase *k, const Backend *be) {
    const long c = lat_count(k);
    k->lat.dtype = k->dtype;
    op_spec_bufs(k, 5, (long[]){c, c, c, c, 1}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT}, 0xB, 0);
}
/* mu logvar (act) eps (float32) dz (act) loss_scale [1] -> dmu dlogvar (act) */
static void lat_bwd_setup(KernelCase *k, const Backend *be) {
    const long c = lat_count(k);
    k->lat.dtype = k->dtype;
    op_spec_bufs(k, 7, (long[]){c, c, c, c, 1, c, c}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT},
         0x6B, 0);
}
static void lat_fwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->latent->forward(&k->lat, b[0], b[1], b[2], b[3], b[4]);
}
static void lat_bwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->latent->backward(&k->lat, b[0], b[1], b[2], b[3], KL_SCALE, b[4], b[5], b[6]);
}
static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }
static void lat_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    double kl = 0;
    for (long i = 0; i < lat_count(k); i++) {
        const double lv = clampd(in[1][i], k->lat.logvar_min, k->lat.logvar_max), mu = in[0][i];
        ref[3][i] = mu + exp(0.5 * lv) * in[2][i];
        kl += 0.5 * (mu * mu + exp(lv) - 1 - lv);
    }
    ref[4][0] = kl / k->lat.n;
}
static void lat_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const double n = k->lat.n, kls = (double)KL_SCALE * in[4][0];
    for (long i = 0; i < lat_count(k); i++) {
        const double raw = in[1][i], lv = clampd(raw, k->lat.logvar_min, k->lat.logvar_max), dz = in[3][i];
        ref[5][i] = dz + kls * in[0][i] / n;
        const int inside = raw >= k->lat.logvar_min && raw <= k->lat.logvar_max;
        ref[6][i] = inside ? dz * in[2][i] * 0.5 * exp(0.5 * lv) + kls * 0.5 * (exp(lv) - 1) / n : 0;
    }
}
static void lat_bwd_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 4) h[0] = OP_SPEC_LOSS_SCALE;
    else op_spec_uniform_fill(h, count, seed, b);
}

/* ---- the entries (registered through kernels/ops.def) ---------------------------------------------------------- */

const KernelOp latent_specs[] = {
    {"latent_forward", OPID_latent, LATENT_FORWARD, 0, 1e-5, lat_fwd_setup, lat_fwd_run, lat_fwd_ref, NULL},
    {"latent_backward", OPID_latent, LATENT_BACKWARD, 0, 1e-5, lat_bwd_setup, lat_bwd_run, lat_bwd_ref, lat_bwd_fill},
};
const int latent_specs_count = sizeof latent_specs / sizeof latent_specs[0];

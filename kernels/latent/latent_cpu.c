/* latent_cpu.c: float32 CPU variational bottleneck (latent.h): log-variance clamp, reparameterization
 * z = mu + exp(0.5*lv)*eps and the KL divergence to N(0, I), forward and backward.
 * The KL sums run in double over fixed chunks of each sample, added in order: independent of thread count. */
#include <math.h>
#include <stdlib.h>

#include "core/util.h"
#include "latent/latent.h"
#include "common/cpu_op.h"

#define LATENT_CHUNK 4096L

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

void latent_forward_cpu(const LatentShape *s, const float *mu, const float *logvar_raw, const float *eps, float *z,
                        float *kl_out) {
    /* mu, logvar_raw, eps, z [n][cps]; kl_out [1] */
    const long cps = s->count_per_sample;
    const long nbs = (cps + LATENT_CHUNK - 1) / LATENT_CHUNK; /* chunks per sample */
    const long tasks = (long)s->n * nbs;
    double *part = vx_calloc((size_t)(tasks > 0 ? tasks : 1), sizeof(double));
#pragma omp parallel for schedule(static)
    for (long t = 0; t < tasks; t++) {
        const long b = t / nbs, blk = t % nbs;
        const long i0 = b * cps + blk * LATENT_CHUNK;
        const long i1 = b * cps + ((blk + 1) * LATENT_CHUNK < cps ? (blk + 1) * LATENT_CHUNK : cps);
        double kl = 0.0;
        for (long i = i0; i < i1; i++) {
            const float lv = clampf(logvar_raw[i], s->logvar_min, s->logvar_max);
            z[i] = eps ? mu[i] + expf(0.5f * lv) * eps[i] : mu[i];
            const double m = mu[i];
            kl += m * m + exp((double)lv) - 1.0 - (double)lv;
        }
        part[t] = kl;
    }
    /* mean over samples of 0.5 * per-sample sum */
    double total = 0.0;
    for (int b = 0; b < s->n; b++) {
        double sample = 0.0;
        for (long blk = 0; blk < nbs; blk++) sample += part[(long)b * nbs + blk];
        total += 0.5 * sample;
    }
    free(part);
    kl_out[0] = s->n > 0 ? (float)(total / s->n) : 0.0f;
}

void latent_backward_cpu(const LatentShape *s, const float *mu, const float *logvar_raw, const float *eps,
                         const float *dz, float kl_scale, float *dmu, float *dlogvar) {
    /* mu, logvar_raw, eps, dz, dmu, dlogvar [n][cps]; gradient of sum(dz*z) + kl_scale*kl, both overwritten:
     *   dmu = dz + kl_scale*mu/n
     *   dlv = dz*eps*0.5*exp(0.5*lv) + kl_scale*0.5*(exp(lv) - 1)/n   inside [logvar_min, logvar_max], else 0
     * (the clamp's gradient is 1 on the closed range, as torch.clamp's) */
    const long total = (long)s->n * s->count_per_sample;
    const float kn = s->n > 0 ? (float)((double)kl_scale / s->n) : 0.0f;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < total; i++) {
        const float raw = logvar_raw[i];
        const float g = dz ? dz[i] : 0.0f;
        dmu[i] = g + kn * mu[i];
        if (raw < s->logvar_min || raw > s->logvar_max) {
            dlogvar[i] = 0.0f;
            continue;
        }
        const float sd = expf(0.5f * raw);
        const float dz_term = eps ? g * eps[i] * 0.5f * sd : 0.0f;
        dlogvar[i] = dz_term + kn * 0.5f * expm1f(raw);
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps, void *z,
                        float *kl_out) {
    cpu_need_f32(s->dtype, "latent_forward");
    latent_forward_cpu(s, mu, logvar_raw, eps, z, kl_out);
}
static void cpu_backward(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps, const void *dz,
                         float kl_scale, const float *loss_scale, void *dmu, void *dlogvar) {
    cpu_need_f32(s->dtype, "latent_backward");
    latent_backward_cpu(s, mu, logvar_raw, eps, dz, cpu_scaled(kl_scale, loss_scale), dmu, dlogvar);
}
const LatentOps latent_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

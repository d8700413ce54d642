/* diffusion_schedule.c: the noise schedules, SNR weights and DDIM timesteps of diffusion_schedule.h, in double. */
#include "graph/diffusion_schedule.h"

#include <math.h>
#include <string.h>

#include "core/util.h"

#define LINEAR_BETA_START 1e-4
#define LINEAR_BETA_END 2e-2
#define COSINE_S 0.008
#define COSINE_MAX_BETA 0.999

int diffusion_schedule_parse(const char *name) {
    if (name && strcmp(name, "linear") == 0) return DIFFUSION_SCHEDULE_LINEAR;
    if (name && strcmp(name, "cosine") == 0) return DIFFUSION_SCHEDULE_COSINE;
    return -1;
}

const char *diffusion_schedule_name(DiffusionSchedule kind) {
    return kind == DIFFUSION_SCHEDULE_COSINE ? "cosine" : "linear";
}

/* Nichol & Dhariwal's f(u), u in [0, 1] */
static double cosine_f(double u) {
    const double c = cos((u + COSINE_S) / (1.0 + COSINE_S) * M_PI / 2.0);
    return c * c;
}

void diffusion_alphabar(DiffusionSchedule kind, int T, double *alphabar) {
    if (T < 1) vx_fatal("diffusion_alphabar: %d timesteps", T);
    double prod = 1.0;
    for (int t = 0; t < T; t++) {
        double beta;
        if (kind == DIFFUSION_SCHEDULE_COSINE) {
            beta = 1.0 - cosine_f((double)(t + 1) / T) / cosine_f((double)t / T);
            if (beta > COSINE_MAX_BETA) beta = COSINE_MAX_BETA;
        } else {
            beta = T == 1 ? LINEAR_BETA_START
                          : LINEAR_BETA_START + (LINEAR_BETA_END - LINEAR_BETA_START) * (double)t / (double)(T - 1);
        }
        prod *= 1.0 - beta;
        alphabar[t] = prod;
    }
}

double diffusion_snr(double alphabar) { return alphabar / (1.0 - alphabar); }

double diffusion_min_snr_weight(double alphabar, double gamma, DiffusionParam param) {
    const double snr = diffusion_snr(alphabar), m = snr < gamma ? snr : gamma;
    return param == DIFFUSION_V ? m / (snr + 1.0) : m / snr;
}

void diffusion_coefficients(double alphabar, float *alpha, float *sigma) {
    *alpha = (float)sqrt(alphabar);
    *sigma = (float)sqrt(1.0 - alphabar);
}

int diffusion_ddim_spacing_parse(const char *name) {
    if (name && strcmp(name, "trailing") == 0) return DDIM_TRAILING;
    if (name && strcmp(name, "leading") == 0) return DDIM_LEADING;
    return -1;
}

static int ddim_t(DdimSpacing spacing, int T, int N, int i) {
    if (spacing == DDIM_LEADING) return (N - 1 - i) * (T / N);
    /* numpy's round(arange(T, 0, -T / N)) - 1 as diffusers computes it: start + i * step, halves to even */
    return (int)nearbyint((double)T + (double)i * (-(double)T / N)) - 1;
}

void diffusion_ddim_timesteps(DdimSpacing spacing, int T, int N, int *t) {
    if (N < 1 || N > T) vx_fatal("diffusion_ddim_timesteps: %d steps of %d timesteps", N, T);
    for (int i = 0; i < N; i++) t[i] = ddim_t(spacing, T, N, i);
}

double diffusion_ddim_next_alphabar(DdimSpacing spacing, const double *alphabar, int T, int N, int i) {
    if (N < 1 || N > T || i < 0 || i >= N) vx_fatal("diffusion_ddim_next_alphabar: step %d of %d (T %d)", i, N, T);
    /* the next step's timestep (leading's t_i - T/N), or x0 itself after the last */
    return i + 1 < N ? alphabar[ddim_t(spacing, T, N, i + 1)] : 1.0;
}

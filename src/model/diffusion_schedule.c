/* diffusion_schedule.c: see diffusion_schedule.h. */
#include "model/diffusion_schedule.h"

#include <math.h>
#include <string.h>

#include "core/util.h"

void diffusion_alphabar(const char *schedule, int T, double *alphabar) {
    double prod = 1.0;
    if (strcmp(schedule, "cosine") == 0) {
        /* betas_t = min(1 - f((t+1)/T) / f(t/T), 0.999), f(u) = cos((u + s) / (1 + s) * pi/2)^2 */
        const double s = 0.008;
        for (int t = 0; t < T; t++) {
            const double f0 = cos(((double)t / T + s) / (1 + s) * M_PI / 2), f1 = cos(((double)(t + 1) / T + s) / (1 + s) * M_PI / 2);
            double beta = 1.0 - (f1 * f1) / (f0 * f0);
            if (beta > 0.999) beta = 0.999;
            prod *= 1.0 - beta;
            alphabar[t] = prod;
        }
    } else if (strcmp(schedule, "linear") == 0) {
        for (int t = 0; t < T; t++) {
            const double beta = 1e-4 + (0.02 - 1e-4) * (T > 1 ? (double)t / (T - 1) : 0.0);
            prod *= 1.0 - beta;
            alphabar[t] = prod;
        }
    } else {
        vx_usage_error("diffusion.schedule \"%s\" is not a schedule: use cosine or linear", schedule);
    }
}

double diffusion_min_snr_weight(double alphabar, double gamma, int v_param) {
    const double snr = alphabar / (1.0 - alphabar), clipped = snr < gamma ? snr : gamma;
    return v_param ? clipped / (snr + 1.0) : clipped / snr;
}

void diffusion_ddim_timesteps(int T, int N, int *t) {
    const int step = T / N;
    for (int i = 0; i < N; i++) t[i] = (N - 1 - i) * step;
}

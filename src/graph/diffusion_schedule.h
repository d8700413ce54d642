/* diffusion_schedule.h: the host math of a diffusion model's noise schedule, in double (pure C, no backend):
 *   alphabar[t], t = 0..T-1, the product of (1 - beta_s) for s <= t, with the betas of
 *     linear   DDPM's (Ho et al. 2020), diffusers' "linear": beta_t = linspace(1e-4, 2e-2, T)
 *     cosine   Nichol & Dhariwal 2021, diffusers' "squaredcos_cap_v2": f(u) = cos((u + 0.008)/1.008 * pi/2)^2,
 *              beta_t = min(1 - f((t + 1)/T) / f(t/T), 0.999)
 *   (diffusers holds the betas and their product in float32; this table is the same formulas in double)
 *   SNR(t) = alphabar / (1 - alphabar)
 *   min-SNR-gamma loss weights (Hang et al. 2023), for the loss of diffusion.h's loss op:
 *     v prediction       min(SNR, gamma) / (SNR + 1)
 *     epsilon prediction min(SNR, gamma) / SNR
 *   alpha = sqrt(alphabar), sigma = sqrt(1 - alphabar): the coefficients diffusion.h's ops take per sample
 *   DDIM sampling (Song et al. 2021) in N steps, diffusers' DDIMScheduler with timestep_spacing "leading",
 *     steps_offset 0 and set_alpha_to_one: t_i = (N - 1 - i) * (T / N) (integer division), i = 0..N-1 (descending);
 *     step i goes from t_i to t_i - T/N, whose alphabar is 1 below t = 0 (the last step lands on x0). */
#pragma once
#include "diffusion/diffusion.h"

typedef enum { DIFFUSION_SCHEDULE_LINEAR = 0, DIFFUSION_SCHEDULE_COSINE = 1 } DiffusionSchedule;

/* "linear" or "cosine" -> the schedule; -1 for any other name */
int diffusion_schedule_parse(const char *name);
const char *diffusion_schedule_name(DiffusionSchedule kind);

/* alphabar[0..T) of the schedule; T >= 1 (a smaller T is a bug in the caller: vx_fatal) */
void diffusion_alphabar(DiffusionSchedule kind, int T, double *alphabar);

double diffusion_snr(double alphabar);
/* the min-SNR-gamma weight of a timestep with this alphabar for the model's parameterisation (gamma > 0) */
double diffusion_min_snr_weight(double alphabar, double gamma, DiffusionParam param);
/* sqrt(alphabar) and sqrt(1 - alphabar), rounded to float once (what the ops' coefficient arrays hold) */
void diffusion_coefficients(double alphabar, float *alpha, float *sigma);

/* DDIM's N timesteps (1 <= N <= T), descending, into t[0..N) */
void diffusion_ddim_timesteps(int T, int N, int *t);
/* the alphabar step i of those N goes to: alphabar[t_i - T/N], or 1 when that is below 0 */
double diffusion_ddim_next_alphabar(const double *alphabar, int T, int N, int i);

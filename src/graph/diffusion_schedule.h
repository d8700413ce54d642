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
 *   DDIM sampling (Song et al. 2021) in N steps, diffusers' DDIMScheduler with set_alpha_to_one and its
 *     timestep_spacing (diffusion.timestep_spacing), i = 0..N-1, descending:
 *     trailing  t_i = round(T - i T/N) - 1 (numpy's round, halves to even): the first step at T - 1, where x_T is pure noise as the sampler's start
 *               is (Lin et al. 2024, "Common diffusion noise schedules and sample steps are flawed"; 1 step is one
 *               prediction of x0 from noise at T - 1)
 *     leading   t_i = (N - 1 - i) * (T / N) (integer division; steps_offset 0): the first step at T - T/N, which
 *               trained on x_t still holding sqrt(alphabar) of x0, and 1 step at t = 0 (returns x_T)
 *     step i goes to t_{i+1}'s alphabar, 1 after the last step (it lands on x0). */
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

typedef enum { DDIM_TRAILING = 0, DDIM_LEADING = 1 } DdimSpacing;
/* "trailing" or "leading" -> the spacing; -1 for any other name */
int diffusion_ddim_spacing_parse(const char *name);

/* DDIM's N timesteps (1 <= N <= T), descending, into t[0..N) */
void diffusion_ddim_timesteps(DdimSpacing spacing, int T, int N, int *t);
/* the alphabar step i of those N goes to: alphabar[t_{i+1}], or 1 after the last */
double diffusion_ddim_next_alphabar(DdimSpacing spacing, const double *alphabar, int T, int N, int i);

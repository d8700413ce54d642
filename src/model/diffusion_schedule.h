/* diffusion_schedule.h: the noise schedules of diffusion training and sampling, on the host (pure functions, no
 * backend): alphabar_t (the cumulative product of 1 - beta) for t = 0..T-1, the signal-to-noise ratio and the
 * min-SNR-gamma loss weight (Hang et al. 2023), and the DDIM sampler's timesteps. */
#pragma once

/* alphabar[0..T-1] of schedule "cosine" (Nichol & Dhariwal 2021, s = 0.008, betas capped at 0.999: diffusers'
 * squaredcos_cap_v2) or "linear" (DDPM's betas linspace(1e-4, 0.02, T)); exits with one line on another name. */
void diffusion_alphabar(const char *schedule, int T, double *alphabar);
/* SNR = alphabar / (1 - alphabar); the min-SNR-gamma weight: min(SNR, gamma) / (SNR + 1) for v prediction,
 * min(SNR, gamma) / SNR for epsilon prediction */
double diffusion_min_snr_weight(double alphabar, double gamma, int v_param);
/* DDIM's N timesteps, first to last, with diffusers' "leading" spacing: t_i = (N - 1 - i) * (T / N). */
void diffusion_ddim_timesteps(int T, int N, int *t);

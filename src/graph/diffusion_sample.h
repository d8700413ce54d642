/* diffusion_sample.h: sampling volumes from a trained vit3d_diffusion model with DDIM (Song et al. 2021, eta 0, the
 * schedule's "leading" timesteps: diffusion_schedule.h), conditioned on two X-ray views:
 *   x_T ~ N(0, 1), keyed by (seed, the sample's id, element), drawn on the host (the same on every backend and
 *   whatever batch or rank a sample falls in);
 *   step i of N: every sample at t_i (diff_set_timesteps), the denoiser's forward with m->sampling (q_sample and the
 *   views' DRR skipped: x_t and the views are written into t_xt and t_views here), then diffusion.h's ddim_step from
 *   (alpha, sigma) of t_i to those of the next timestep (alphabar 1 past t = 0: the last step lands on x0_hat).
 * The state x_t stays float32 between steps (ddim_step's contract); the model reads its copy in the model's dtype.
 * The arena plan keeps t_xt and t_views live from time 0 (model_build.c), so nothing a forward writes clobbers them.
 * Host arrays are float32; volumes [n][D][H][W][c], views [n][2][img][img] (AP, lateral), n = m->batch. */
#pragma once
#include <stdint.h>

#include "graph/model.h"

/* Both views of host volumes vols (the model's input shape) into host views, with the DRR training conditions on
 * (drr.h, on the model's backend). */
void diffusion_render_views(Model *m, const float *vols, float *views);
/* The conditioning of the next samples: host views into t_views. */
void diffusion_set_views(Model *m, const float *views);
/* DDIM in `steps` steps (1 <= steps <= diffusion.timesteps) from the views set last; sample b's starting noise is
 * keyed by (seed, ids[b]). The sampled clean volumes into host x0, in the data's units (the steps run on
 * diffusion.data_scale times them). Leaves m->sampling 0. A SIGINT/SIGTERM
 * (core/stop_signal.h) ends the steps early, x0 then unfinished: the caller honours the stop before using it. */
void diffusion_ddim_sample(Model *m, int steps, uint64_t seed, const uint64_t *ids, float *x0);

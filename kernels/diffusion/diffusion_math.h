/* diffusion_math.h: one element of diffusion.h's formulas, the code both backends run (VX_HD), in float. */
#pragma once
#include "common/vx_hd.h"
#include "diffusion/diffusion.h"

/* x0_hat from x_t and the model's prediction */
VX_HD float diffusion_x0(int param, float a, float s, float xt, float pred) {
    return param == DIFFUSION_V ? a * xt - s * pred : (xt - s * pred) / a;
}
/* d x0_hat / d pred */
VX_HD float diffusion_dx0_dpred(int param, float a, float s) { return param == DIFFUSION_V ? -s : -(s / a); }
/* the noise implied by x_t and the prediction */
VX_HD float diffusion_eps(int param, float a, float s, float xt, float pred) {
    return param == DIFFUSION_V ? s * xt + a * pred : pred;
}

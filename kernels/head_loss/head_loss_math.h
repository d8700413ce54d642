/* head_loss_math.h: the per-element pieces of head_loss.h's losses in double, one definition the CPU
 * (head_loss_cpu.c) and the GPU (head_loss_cuda.cu) compile, computed stably for any |z|:
 *   softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|)        (never overflows)
 *   sigmoid(x)  = 1/(1 + e^-x) for x >= 0, e^x/(1 + e^x) below     (never overflows, no 0/0)
 *   BCE with logits, pos_weight pw:  loss = pw*t*softplus(-z) + (1-t)*softplus(z)
 *                                    d loss/dz = (1-t)*sigmoid(z) - pw*t*sigmoid(-z)
 *                                    a negative t is a masked cell (CheXpert's u_ignore, data/label_policy.h):
 *                                    loss 0 and gradient 0 (the mean stays over every cell: torch's
 *                                    (mask * BCEWithLogitsLoss(reduction='none')).mean())
 * (-log sigmoid(z) = softplus(-z), -log(1 - sigmoid(z)) = softplus(z).) */
#pragma once
#include <math.h>

#include "common/vx_hd.h"

VX_HD double head_softplus(double x) { return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x))); }

VX_HD double head_sigmoid(double x) {
    if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
    const double e = exp(x);
    return e / (1.0 + e);
}

VX_HD double head_bce(double z, double t, double pw) {
    return t < 0.0 ? 0.0 : pw * t * head_softplus(-z) + (1.0 - t) * head_softplus(z);
}
VX_HD double head_bce_grad(double z, double t, double pw) {
    return t < 0.0 ? 0.0 : (1.0 - t) * head_sigmoid(z) - pw * t * head_sigmoid(-z);
}

/* CE's target: the class index as a float, valid when it is an integer in [0, k); else -1 */
VX_HD int head_class(float t, int k) {
    return t >= 0.0f && t < (float)k && t == (float)(int)t ? (int)t : -1;
}

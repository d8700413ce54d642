/* gelu_math.h: the GELU formulas of gelu.h, one definition for the CPU op, the CUDA op and gemm's GELU epilogues
 * (VX_HD: host and device). float in, float out. The exponential is CUDA's expf on the device and the CPU's
 * vectorising exp_vec (exp_cpu.h, ~2 ulp) on the host, erf the platform's erff, so CPU and GPU agree to a few ulp, not
 * bit for bit. */
#pragma once
#include <math.h>

#include "common/vx_hd.h"
#if defined(__CUDACC__)
#define GELU_EXP expf
#else
#include "common/exp_cpu.h"
#define GELU_EXP exp_vec
#endif

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f
#define GELU_RSQRT2 0.7071067811865476f
#define GELU_RSQRT2PI 0.3989422804014327f /* 1/sqrt(2 pi) */

/* sigmoid(2u) written as 1/(1 + exp(-2u)), the argument clamped so exp never overflows (sigmoid is 0 or 1 there) */
VX_HD float gelu_sig2(float x) {
    float a = -2.0f * GELU_K0 * (x + GELU_K1 * x * x * x);
    a = a > 80.0f ? 80.0f : a;
    return 1.0f / (1.0f + GELU_EXP(a));
}
VX_HD float gelu_value(int kind, float x) {
    if (kind == 0) return x * gelu_sig2(x);
    return 0.5f * x * (1.0f + erff(x * GELU_RSQRT2));
}
VX_HD float gelu_grad(int kind, float x) {
    if (kind == 0) {
        const float s = gelu_sig2(x);
        return s + x * s * (1.0f - s) * 2.0f * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
    }
    return 0.5f * (1.0f + erff(x * GELU_RSQRT2)) + x * GELU_RSQRT2PI * GELU_EXP(-0.5f * x * x);
}

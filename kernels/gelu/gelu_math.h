/* gelu_math.h: the GELU formulas of gelu.h, one definition for the CPU op, the CUDA op and gemm's GELU epilogues
 * (VX_HD: host and device). float in, float out. The exponential is CUDA's expf on the device and the CPU's
 * vectorising exp_vec (exp_cpu.h, ~2 ulp) on the host; 1 + erf is 1 + erff on the device and a branch-free erfc on
 * the host (one_plus_erf below), so CPU and GPU agree to a few ulp, not bit for bit. */
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

/* 1 + erf(u). On the host from erfc(|u|) (Numerical Recipes' erfcc: a Chebyshev fit whose relative error is below
 * 1.2e-7 for every u, plus float rounding of the exponent's argument, ~|u|^2 x 6e-8): 2 - erfc(u) for u >= 0 and
 * erfc(-u) below, so GELU keeps its relative accuracy where 1 + erf is tiny. Branch-free, so GCC vectorises the
 * GELU loops and gemm's epilogues: glibc's erff, one call per element, made the MLP's fused GELU epilogue cost as
 * much as its GEMM (1024x1536x384: 202 against 401 GFLOP/s without it, 2-core AVX-512 EPYC). */
VX_HD float gelu_one_plus_erf(float u) {
#if defined(__CUDACC__)
    return 1.0f + erff(u);
#else
    const float z = fabsf(u), t = 1.0f / VX_FMAF(0.5f, z, 1.0f);
    float p = 0.17087277f; /* VX_FMAF: exp_cpu.h */
    p = VX_FMAF(p, t, -0.82215223f);
    p = VX_FMAF(p, t, 1.48851587f);
    p = VX_FMAF(p, t, -1.13520398f);
    p = VX_FMAF(p, t, 0.27886807f);
    p = VX_FMAF(p, t, -0.18628806f);
    p = VX_FMAF(p, t, 0.09678418f);
    p = VX_FMAF(p, t, 0.37409196f);
    p = VX_FMAF(p, t, 1.00002368f);
    p = VX_FMAF(p, t, -1.26551223f);
    /* Past z = 9.19, erfc is below FLT_MIN and t x exp came out subnormal: each such element cost a microcode assist
     * (a GELU epilogue with a fifth of its inputs below -13 ran 4x slower), and exp_vec's clamp at -87 left ~3e-39
     * where erfc is far smaller. From z = 9.15 (erfc 2.7e-38) the factor is selected to 0 before the product, so
     * erfc is 0 there, never a subnormal; GELU loses at most 2e-37 (x = -12.94). */
    const float e = z < 9.15f ? GELU_EXP(VX_FMAF(-z, z, p)) : 0.0f, erfc = t * e;
    return u >= 0.0f ? 2.0f - erfc : erfc;
#endif
}

/* sigmoid(2u) written as 1/(1 + exp(-2u)), the argument clamped so exp never overflows (sigmoid is 0 or 1 there) */
VX_HD float gelu_sig2(float x) {
    float a = -2.0f * GELU_K0 * (x + GELU_K1 * x * x * x);
    a = a > 80.0f ? 80.0f : a;
    return 1.0f / (1.0f + GELU_EXP(a));
}
VX_HD float gelu_value(int kind, float x) {
    if (kind == 0) return x * gelu_sig2(x);
    return 0.5f * x * gelu_one_plus_erf(x * GELU_RSQRT2);
}
VX_HD float gelu_grad(int kind, float x) {
    if (kind == 0) {
        const float s = gelu_sig2(x);
        return s + x * s * (1.0f - s) * 2.0f * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
    }
    return 0.5f * gelu_one_plus_erf(x * GELU_RSQRT2) + x * GELU_RSQRT2PI * GELU_EXP(-0.5f * x * x);
}

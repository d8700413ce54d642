/* silu_device.cuh: SiLU and its derivative as device functions, shared by the SiLU kernels and the fused
 * GroupNorm + SiLU (groupnorm_cuda.cu), with the formulas of exp_cpu.h / silu_cpu.c: exp's argument clamped to
 * [-87, 88] so it never overflows. */
#pragma once

__device__ __forceinline__ float silu_exp_neg(float x) { return expf(fminf(fmaxf(-x, -87.0f), 88.0f)); }
/* silu(x) = x / (1 + exp(-x)) */
__device__ __forceinline__ float silu_dev(float x) { return x / (1.0f + silu_exp_neg(x)); }
/* silu'(x) = s * (1 + x * (1 - s)), s = sigmoid(x) */
__device__ __forceinline__ float silu_grad_dev(float x) {
    const float s = 1.0f / (1.0f + silu_exp_neg(x));
    return s * (1.0f + x * (1.0f - s));
}

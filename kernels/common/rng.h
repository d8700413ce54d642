/* rng.h: counter-based random numbers shared by the CPU and the GPU code.
 * Every value is a pure function of (seed, stream, index), so a step's noise does not depend on how many values
 * were drawn before it or on thread count: what makes resume exact. The integer hash and the uniforms are
 * bit-identical on both backends; normals go through logf/cosf/sqrtf, so CPU and GPU agree to their rounding
 * (a few ulp), provided the CUDA side is built without fast-math intrinsics (it is: no -use_fast_math). */
#pragma once
#include <math.h>
#include <stdint.h>

#include "common/vx_hd.h"

/* splitmix64 finalizer: a bijective 64-bit mix with good avalanche. */
VX_HD uint64_t vx_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

VX_HD uint64_t vx_hash3(uint64_t seed, uint64_t stream, uint64_t index) {
    return vx_mix64(vx_mix64(vx_mix64(seed) ^ stream) ^ index);
}

/* Uniform in (0, 1]: 24 random bits, never 0 so log() is safe. Above 0.5 the float has 23 bits of room, so
 * (a + 0.5) rounds to even there and the top value rounds to exactly 1.0 (then vx_normal gives 0, with
 * probability 2^-24). Kept as is: changing it would change every noise stream, and with them resumed runs. */
VX_HD float vx_uniform01(uint64_t h) { return ((float)(h >> 40) + 0.5f) * (1.0f / 16777216.0f); }

/* vx_normal's two parts, apart for the CPU fill (normal_cpu.c): its integer hashing vectorises in a loop of its own,
 * while the libm calls stay scalar. */
VX_HD void vx_normal_uniforms(uint64_t seed, uint64_t stream, uint64_t index, float *u1, float *u2) {
    uint64_t h = vx_hash3(seed, stream, index);
    *u1 = vx_uniform01(h);
    *u2 = vx_uniform01(vx_mix64(h));
}
VX_HD float vx_box_muller(float u1, float u2) { return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2); }

/* A standard normal value for (seed, stream, index), Box-Muller on two independent uniforms. */
VX_HD float vx_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    float u1, u2;
    vx_normal_uniforms(seed, stream, index, &u1, &u2);
    return vx_box_muller(u1, u2);
}

/* dropout_mask.h: dropout.h's mask and scale, one definition the CPU (dropout_cpu.c), the GPU (dropout_cuda.cu) and
 * the spec's reference (dropout_spec.c) all compile, so the three keep exactly the same values (the mask is integer
 * hashing and one float comparison; the scale one float division, IEEE-rounded on both sides).
 *   element e of a batch whose first global sample is `first` (e = i*per_sample + j) is value j of sample first + i:
 *   counter (first + i)*per_sample + j = first*per_sample + e, kept when vx_uniform01(vx_hash3(seed, stream, that))
 *   >= p; p >= 1 keeps nothing (the uniform reaches 1.0 with probability 2^-24, which 1/(1-p) would make inf). */
#pragma once
#include <stdint.h>

#include "common/rng.h"
#include "common/vx_hd.h"

VX_HD int dropout_keep(uint64_t seed, uint64_t stream, uint64_t first, uint64_t per_sample, uint64_t e, float p) {
    return p < 1.0f && vx_uniform01(vx_hash3(seed, stream, first * per_sample + e)) >= p;
}

/* 1/(1-p) in float, 0 for p >= 1 (nothing is kept then) */
VX_HD float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

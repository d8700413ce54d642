/* silu_cpu.c: float32 CPU SiLU (silu.h), y = x * sigmoid(x), and its backward from the saved input x.
 * Elementwise over flat arrays of `count` floats; OpenMP splits them, there is no reduction. The exponential is
 * an inline branch-free expf (below) so the loops vectorize: glibc's expf is one call per element and made
 * these ops ~10x slower than the memory traffic they need. */
#include <stdint.h>
#include <string.h>

#include "silu.h"

/* Below this many elements the OpenMP fork costs more than it saves. */
#define SILU_PARALLEL_MIN 16384L

/* exp(x) within ~2 ulp for x in [-87, 88] (Cephes expf: Cody-Waite reduction x = n*ln2 + r, degree-6
 * polynomial for e^r, then a 2^n exponent). Inputs are clamped to that range: exp(-x) then never overflows to
 * inf, and beyond it sigmoid is 0 or 1 to float precision anyway. */
static inline float exp_vec(float x) {
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    const float n = __builtin_rintf(x * 1.44269504088896341f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

void silu_forward_cpu(long count, const float *x, float *y) {
    /* x, y [count] */
#pragma omp parallel for simd schedule(static) if (count >= SILU_PARALLEL_MIN)
    for (long i = 0; i < count; i++) y[i] = x[i] / (1.0f + exp_vec(-x[i]));
}

void silu_backward_cpu(long count, const float *x, const float *dy, float *dx, float beta) {
    /* x, dy, dx [count];  silu'(x) = s * (1 + x * (1 - s)), s = sigmoid(x) */
    if (beta != 0.0f) {
#pragma omp parallel for simd schedule(static) if (count >= SILU_PARALLEL_MIN)
        for (long i = 0; i < count; i++) {
            const float s = 1.0f / (1.0f + exp_vec(-x[i]));
            dx[i] = beta * dx[i] + dy[i] * (s * (1.0f + x[i] * (1.0f - s)));
        }
    } else {
        /* beta 0 must overwrite (dx may hold NaN): dx is not read */
#pragma omp parallel for simd schedule(static) if (count >= SILU_PARALLEL_MIN)
        for (long i = 0; i < count; i++) {
            const float s = 1.0f / (1.0f + exp_vec(-x[i]));
            dx[i] = dy[i] * (s * (1.0f + x[i] * (1.0f - s)));
        }
    }
}

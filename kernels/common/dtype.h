/* dtype.h: the element types activations may be stored in, and their host-side conversions.
 *   DT_F32   float32: parameters, gradients, optimizer state, statistics and losses always; activations on the CPU
 *   DT_BF16  bfloat16 (8-bit exponent, 8-bit significand): mixed precision on GPUs with bf16 tensor cores
 *   DT_F16   IEEE float16 (5-bit exponent, 11-bit significand): mixed precision with loss scaling
 * Whatever the storage type, every op computes in float32 and every reduction accumulates in at least float32
 * (the ops' headers say where in double). Conversions to 16 bits round to nearest, ties to even, as CUDA's
 * __float2bfloat16_rn / __float2half_rn do, so host-side test references round exactly as the device does.
 * The host conversions here serve the tests, the probe and the readback of low-precision tensors; they are not on
 * any hot path. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2 } DType;
#define DT_COUNT 3

static inline size_t dtype_size(DType t) { return t == DT_F32 ? 4 : 2; }
static inline const char *dtype_name(DType t) { return t == DT_F32 ? "f32" : t == DT_BF16 ? "bf16" : "f16"; }

static inline uint32_t dtype_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float dtype_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* bfloat16 is the top half of a float32: round the low half away, to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t dtype_f32_to_bf16(float f) {
    const uint32_t u = dtype_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float dtype_bf16_to_f32(uint16_t h) { return dtype_bits_f32((uint32_t)h << 16); }

/* float16: normal numbers by rounding the significand to 10 bits, subnormals (below 2^-14) in steps of 2^-24,
 * overflow (at or beyond 65520 after rounding) to infinity. */
static inline uint16_t dtype_f32_to_f16(float f) {
    const uint32_t u = dtype_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);         /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);        /* rounds to >= 65520: infinity */
    if (a < 0x38800000u) {                                          /* below 2^-14: subnormal or zero */
        /* value = a_float; subnormal step 2^-24: round(value * 2^24) to nearest even */
        const int e = (int)(a >> 23);                               /* biased exponent of the float */
        if (e < 102) return (uint16_t)sign;                         /* below 2^-25: rounds to 0 */
        const uint32_t m = (a & 0x7fffffu) | 0x800000u;             /* 24-bit significand, value = m * 2^(e-150) */
        const int shift = 126 - e;                                  /* m * 2^(e-150) * 2^24 = m >> (126 - e) */
        const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        const uint32_t r = q + (rem > half || (rem == half && (q & 1u)));
        return (uint16_t)(sign | r);
    }
    /* normal: rebias the exponent (127 -> 15) and round 23 significand bits to 10 */
    const uint32_t v = a - 0x38000000u; /* exponent - 112 */
    const uint32_t r = (v + 0xfffu + ((v >> 13) & 1u)) >> 13;
    return (uint16_t)(sign | r);
}
static inline float dtype_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return dtype_bits_f32(sign | 0x7f800000u | (m << 13)); /* inf, NaN */
    if (e == 0) { /* zero or subnormal: m * 2^-24 */
        const float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return dtype_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* One element of a buffer of type t, as float, and back (rounding as above). */
static inline float dtype_load(DType t, const void *p, size_t i) {
    if (t == DT_F32) return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return t == DT_BF16 ? dtype_bf16_to_f32(h) : dtype_f16_to_f32(h);
}
static inline void dtype_store(DType t, void *p, size_t i, float v) {
    if (t == DT_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = t == DT_BF16 ? dtype_f32_to_bf16(v) : dtype_f32_to_f16(v);
}
/* The value v becomes when stored as t. */
static inline float dtype_round(DType t, float v) {
    if (t == DT_F32) return v;
    return t == DT_BF16 ? dtype_bf16_to_f32(dtype_f32_to_bf16(v)) : dtype_f16_to_f32(dtype_f32_to_f16(v));
}

/* count elements of type `from` at src to type `to` at dst (host memory, no overlap). */
static inline void dtype_convert(size_t count, DType from, const void *src, DType to, void *dst) {
    if (from == to) {
        memcpy(dst, src, count * dtype_size(from));
        return;
    }
    for (size_t i = 0; i < count; i++) dtype_store(to, dst, i, dtype_load(from, src, i));
}

#ifdef __cplusplus
}
#endif

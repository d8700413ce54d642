/* elementwise_cpu.c: float32 CPU vector ops of elementwise.h: residual add, gradient accumulation, scaling, and the
 * cast between storage types (dtype.h's conversions).
 * Flat loops over `count` floats, split by OpenMP once the arrays are large enough to pay for the fork. */
#include "elementwise.h"

#include <string.h>

#define EW_PARALLEL_MIN 32768L

void add_forward_cpu(long count, const float *a, const float *b, float *y) {
    /* a, b, y [count] */
#pragma omp parallel for simd schedule(static) if (count >= EW_PARALLEL_MIN)
    for (long i = 0; i < count; i++) y[i] = a[i] + b[i];
}

void accumulate_cpu(long count, const float *src, float *dst, float beta) {
    /* src, dst [count]; beta 0 copies without reading dst, which may hold NaN */
    if (beta != 0.0f) {
#pragma omp parallel for simd schedule(static) if (count >= EW_PARALLEL_MIN)
        for (long i = 0; i < count; i++) dst[i] = beta * dst[i] + src[i];
    } else {
#pragma omp parallel for simd schedule(static) if (count >= EW_PARALLEL_MIN)
        for (long i = 0; i < count; i++) dst[i] = src[i];
    }
}

void scale_cpu(long count, float *x, float scale) {
    /* x [count] */
#pragma omp parallel for simd schedule(static) if (count >= EW_PARALLEL_MIN)
    for (long i = 0; i < count; i++) x[i] *= scale;
}

void cast_cpu(long count, DType from, const void *src, DType to, void *dst) {
    /* src [count] of `from`, dst [count] of `to` */
    if (from == to) {
        if (src != dst && count > 0) memcpy(dst, src, (size_t)count * dtype_size(from));
        return;
    }
#pragma omp parallel for schedule(static) if (count >= EW_PARALLEL_MIN)
    for (long i = 0; i < count; i++) dtype_store(to, dst, (size_t)i, dtype_load(from, src, (size_t)i));
}

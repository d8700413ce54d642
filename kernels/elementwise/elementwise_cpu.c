/* elementwise_cpu.c: float32 CPU vector ops of elementwise.h: residual add, gradient accumulation, scaling, the
 * cast between storage types (dtype.h's conversions) and its channel-padding form.
 * Flat loops over `count` floats, split by OpenMP once the arrays are large enough to pay for the fork. */
#include "elementwise/elementwise.h"
#include "common/cpu_op.h"

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

void pad_channels_cpu(long rows, DType from, int c_from, const void *src, DType to, int c_to, void *dst, float beta) {
    /* src [rows][c_from] of `from`, dst [rows][c_to] of `to`; computed in float32 as the CUDA kernel does */
    const int c_copy = c_from < c_to ? c_from : c_to;
#pragma omp parallel for schedule(static) if (rows * c_to >= EW_PARALLEL_MIN)
    for (long r = 0; r < rows; r++)
        for (int c = 0; c < c_to; c++) {
            const size_t o = (size_t)r * (size_t)c_to + (size_t)c;
            float v = c < c_copy ? dtype_load(from, src, (size_t)r * (size_t)c_from + (size_t)c) : 0.0f;
            if (beta != 0.0f) v = beta * dtype_load(to, dst, o) + v;
            dtype_store(to, dst, o, v);
        }
}

void copy_channels_cpu(long rows, DType dt, int c_src, int src_off, const void *src, int c_dst, int dst_off, void *dst,
                       int n, float beta) {
    cpu_need_f32(dt, "copy_channels");
    const float *s = src;
    float *d = dst;
#pragma omp parallel for schedule(static) if (rows * n >= EW_PARALLEL_MIN)
    for (long r = 0; r < rows; r++) {
        const float *sr = s + r * c_src + src_off;
        float *dr = d + r * c_dst + dst_off;
        if (beta != 0.0f)
            for (int j = 0; j < n; j++) dr[j] = beta * dr[j] + sr[j];
        else
            memcpy(dr, sr, sizeof(float) * (size_t)n);
    }
}

/* ---- the CPU backend's table (ops.def): float32, except the casts, which convert between any types ----------- */

static int cpu_supports(int fn, DType dt) { return dt == DT_F32 || fn == EW_CAST || fn == EW_PAD_CHANNELS; }
static void cpu_add(DType dt, long count, const void *a, const void *b, void *y) {
    cpu_need_f32(dt, "add_forward");
    add_forward_cpu(count, a, b, y);
}
static void cpu_accumulate(DType dt, long count, const void *src, void *dst, float beta) {
    cpu_need_f32(dt, "accumulate");
    accumulate_cpu(count, src, dst, beta);
}
const ElementwiseOps elementwise_ops_cpu = {{cpu_supports}, cpu_add, cpu_accumulate, scale_cpu, cast_cpu,
                                            pad_channels_cpu, copy_channels_cpu};

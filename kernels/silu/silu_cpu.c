/* silu_cpu.c: float32 CPU SiLU (silu.h), y = x * sigmoid(x), and its backward from the saved input x.
 * Elementwise over flat arrays of `count` floats; OpenMP splits them, there is no reduction. The exponential is
 * an inline branch-free expf (exp_cpu.h) so the loops vectorize: glibc's expf is one call per element and made
 * these ops ~10x slower than the memory traffic they need. */
#include "common/exp_cpu.h"
#include "silu/silu.h"
#include "common/cpu_op.h"

/* Below this many elements the OpenMP fork costs more than it saves. */
#define SILU_PARALLEL_MIN 16384L

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

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(DType dt, long count, const void *x, void *y) {
    cpu_need_f32(dt, "silu_forward");
    silu_forward_cpu(count, x, y);
}
static void cpu_backward(DType dt, long count, const void *x, const void *dy, void *dx, float beta) {
    cpu_need_f32(dt, "silu_backward");
    silu_backward_cpu(count, x, dy, dx, beta);
}
const SiluOps silu_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

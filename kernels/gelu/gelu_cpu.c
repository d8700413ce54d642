/* gelu_cpu.c: float32 CPU GELU (gelu.h) with the formulas of gelu_math.h, elementwise over flat arrays; OpenMP
 * splits them, there is no reduction. beta 0 overwrites dx without reading it (dx may hold NaN). */
#include "common/cpu_op.h"
#include "gelu/gelu.h"
#include "gelu/gelu_math.h"

#define GELU_PARALLEL_MIN 16384L /* below this many elements the OpenMP fork costs more than it saves */

static void check(const GeluShape *s) {
    if (s->count < 0 || (s->kind != GELU_TANH && s->kind != GELU_ERF))
        vx_fatal("gelu: invalid shape count=%ld kind=%d", s->count, s->kind);
}

static void cpu_forward(const GeluShape *s, const void *xv, void *yv) {
    cpu_need_f32(s->dtype, "gelu_forward");
    check(s);
    const float *x = xv;
    float *y = yv;
    const long n = s->count;
    if (s->kind == GELU_TANH) {
#pragma omp parallel for simd schedule(static) if (n >= GELU_PARALLEL_MIN)
        for (long i = 0; i < n; i++) y[i] = gelu_value(GELU_TANH, x[i]);
    } else {
#pragma omp parallel for schedule(static) if (n >= GELU_PARALLEL_MIN)
        for (long i = 0; i < n; i++) y[i] = gelu_value(GELU_ERF, x[i]);
    }
}

static void cpu_backward(const GeluShape *s, const void *xv, const void *dyv, void *dxv, float beta) {
    cpu_need_f32(s->dtype, "gelu_backward");
    check(s);
    const float *x = xv, *dy = dyv;
    float *dx = dxv;
    const long n = s->count;
    const int kind = s->kind;
    if (beta != 0.0f) {
#pragma omp parallel for schedule(static) if (n >= GELU_PARALLEL_MIN)
        for (long i = 0; i < n; i++) dx[i] = beta * dx[i] + dy[i] * gelu_grad(kind, x[i]);
    } else {
#pragma omp parallel for schedule(static) if (n >= GELU_PARALLEL_MIN)
        for (long i = 0; i < n; i++) dx[i] = dy[i] * gelu_grad(kind, x[i]);
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

const GeluOps gelu_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

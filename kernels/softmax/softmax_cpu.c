/* softmax_cpu.c: float32 CPU softmax over the last axis (softmax.h): one row per OpenMP iteration, the row's max in
 * float, its exponentials (exp_cpu.h's exp_vec) in float and their sum in double, in column order. */
#include "common/cpu_op.h"
#include "common/exp_cpu.h"
#include "softmax/softmax.h"

static void check(const SoftmaxShape *s) {
    if (s->rows < 0 || s->cols < 1) vx_fatal("softmax: invalid shape rows=%ld cols=%d", s->rows, s->cols);
}

static void cpu_forward(const SoftmaxShape *s, const void *xv, void *yv) {
    cpu_need_f32(s->dtype, "softmax_forward");
    check(s);
    const int c = s->cols;
#pragma omp parallel for schedule(static) if (s->rows * c >= 16384)
    for (long r = 0; r < s->rows; r++) {
        const float *x = (const float *)xv + r * c;
        float *y = (float *)yv + r * c;
        float m = x[0];
        for (int j = 1; j < c; j++) m = x[j] > m ? x[j] : m;
        double sum = 0.0;
        for (int j = 0; j < c; j++) {
            y[j] = exp_vec(x[j] - m);
            sum += y[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int j = 0; j < c; j++) y[j] *= inv;
    }
}

static void cpu_backward(const SoftmaxShape *s, const void *yv, const void *dyv, void *dxv, float beta) {
    cpu_need_f32(s->dtype, "softmax_backward");
    check(s);
    const int c = s->cols;
#pragma omp parallel for schedule(static) if (s->rows * c >= 16384)
    for (long r = 0; r < s->rows; r++) {
        const float *y = (const float *)yv + r * c, *dy = (const float *)dyv + r * c;
        float *dx = (float *)dxv + r * c;
        double dot = 0.0;
        for (int j = 0; j < c; j++) dot += (double)dy[j] * y[j];
        const float d = (float)dot;
        if (beta != 0.0f)
            for (int j = 0; j < c; j++) dx[j] = beta * dx[j] + y[j] * (dy[j] - d);
        else
            for (int j = 0; j < c; j++) dx[j] = y[j] * (dy[j] - d);
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

const SoftmaxOps softmax_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

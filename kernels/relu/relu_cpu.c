/* relu_cpu.c: the float32 CPU ReLU (relu.h) and its gradient, elementwise (no reductions, so any thread split gives
 * the same bits).
 *   forward:  y = x < 0 ? 0 : x   (NaN passes through, as torch.relu's clamp_min; y is 0 at x == 0)
 *   backward: dx = [beta*dx +] (y > 0 ? dy : 0), read from the forward's output: y > 0 exactly where x > 0 */
#include "relu/relu.h"
#include "common/cpu_op.h"

#define RELU_PAR_MIN 32768L /* elements below which the loop stays on one thread */

static void relu_forward_cpu(long count, const float *x, float *y) {
    /* x, y [count] */
#pragma omp parallel for schedule(static) if (count >= RELU_PAR_MIN)
    for (long i = 0; i < count; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

static void relu_backward_cpu(long count, const float *y, const float *dy, float *dx, float beta) {
    /* y, dy, dx [count]; beta 0 overwrites dx without reading it (it may hold NaN) */
    if (beta != 0.0f) {
#pragma omp parallel for schedule(static) if (count >= RELU_PAR_MIN)
        for (long i = 0; i < count; i++) dx[i] = beta * dx[i] + (y[i] > 0.0f ? dy[i] : 0.0f);
    } else {
#pragma omp parallel for schedule(static) if (count >= RELU_PAR_MIN)
        for (long i = 0; i < count; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(DType dt, long count, const void *x, void *y) {
    cpu_need_f32(dt, "relu_forward");
    relu_forward_cpu(count, x, y);
}
static void cpu_backward(DType dt, long count, const void *y, const void *dy, void *dx, float beta) {
    cpu_need_f32(dt, "relu_backward");
    relu_backward_cpu(count, y, dy, dx, beta);
}
const ReluOps relu_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

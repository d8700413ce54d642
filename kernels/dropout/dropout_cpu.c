/* dropout_cpu.c: the float32 CPU dropout (dropout.h) with keyed noise: the mask of element e is dropout_mask.h's
 * dropout_keep, recomputed by backward, never stored; elementwise, so any thread split gives the same bits.
 *   forward:  y = keep ? x * scale : 0          scale = 1/(1-p) in float
 *   backward: dx = [beta*dx +] (keep ? dy * scale : 0) */
#include "common/cpu_op.h"
#include "core/util.h"
#include "dropout/dropout.h"
#include "dropout/dropout_mask.h"

#define DROPOUT_PAR_MIN 16384L /* elements below which the loop stays on one thread */

static void check(const DropoutShape *s) {
    if (s->n < 0 || s->per_sample < 0 || !(s->p >= 0.0f && s->p <= 1.0f))
        vx_fatal("dropout: invalid shape n=%d per_sample=%ld p=%g", s->n, s->per_sample, (double)s->p);
}

static void dropout_forward_cpu(const DropoutShape *s, uint64_t first, const float *x, float *y) {
    /* x, y [n][per_sample] */
    check(s);
    const long count = (long)s->n * s->per_sample;
    const float scale = dropout_scale(s->p);
#pragma omp parallel for schedule(static) if (count >= DROPOUT_PAR_MIN)
    for (long e = 0; e < count; e++)
        y[e] = dropout_keep(s->seed, s->stream, first, (uint64_t)s->per_sample, (uint64_t)e, s->p) ? x[e] * scale
                                                                                                   : 0.0f;
}

static void dropout_backward_cpu(const DropoutShape *s, uint64_t first, const float *dy, float *dx, float beta) {
    /* dy, dx [n][per_sample]; beta 0 overwrites dx without reading it (it may hold NaN) */
    check(s);
    const long count = (long)s->n * s->per_sample;
    const float scale = dropout_scale(s->p);
#pragma omp parallel for schedule(static) if (count >= DROPOUT_PAR_MIN)
    for (long e = 0; e < count; e++) {
        const float g =
            dropout_keep(s->seed, s->stream, first, (uint64_t)s->per_sample, (uint64_t)e, s->p) ? dy[e] * scale : 0.0f;
        dx[e] = beta != 0.0f ? beta * dx[e] + g : g;
    }
}

/* ---- the CPU backend's table (ops.def): float32 only; `first` is read from host memory ---------------------- */

static void cpu_forward(const DropoutShape *s, const uint64_t *first, const void *x, void *y) {
    cpu_need_f32(s->dtype, "dropout_forward");
    dropout_forward_cpu(s, first[0], x, y);
}
static void cpu_backward(const DropoutShape *s, const uint64_t *first, const void *dy, void *dx, float beta) {
    cpu_need_f32(s->dtype, "dropout_backward");
    dropout_backward_cpu(s, first[0], dy, dx, beta);
}
const DropoutOps dropout_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

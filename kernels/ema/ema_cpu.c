/* ema_cpu.c: the weights' moving average (ema.h) on the CPU, an OpenMP loop over the flat buffer. */
#include "common/cpu_op.h"
#include "ema/ema.h"

static void cpu_update(long count, const float *decay, const int32_t *skip, const float *param, float *ema) {
    if (count < 0) vx_fatal("ema: a negative count %ld", count);
    if (skip && skip[0]) return;
    const float w = 1.0f - decay[0];
#pragma omp parallel for schedule(static)
    for (long i = 0; i < count; i++) ema[i] += w * (param[i] - ema[i]);
}

/* ---- the CPU backend's table (ops.def): float32 -------------------------------------------------------------- */

const EmaOps ema_ops_cpu = {{op_supports_f32}, cpu_update};

/* timestep_cpu.c: the float32 CPU sinusoidal timestep embedding (timestep.h), each element in double. */
#include "common/cpu_op.h"
#include "timestep/timestep.h"
#include "timestep/timestep_math.h"

static void cpu_embed(const TimestepShape *s, const float *t, void *embv) {
    cpu_need_f32(s->dtype, "timestep_embed");
    if (s->n < 0 || s->dim < 1 || !(s->max_period > 1.0f))
        vx_fatal("timestep: invalid shape n=%d dim=%d max_period=%g", s->n, s->dim, (double)s->max_period);
    float *emb = embv;
    for (long i = 0; i < (long)s->n * s->dim; i++)
        emb[i] = (float)timestep_value(t[i / s->dim], (int)(i % s->dim), s->dim, s->max_period);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

const TimestepOps timestep_ops_cpu = {{op_supports_f32}, cpu_embed};

/* cpu_op.h: what the CPU tables of the op folders share (<op>/<op>_cpu.c): the float32 guard of their adapters
 * (the table's untyped activation pointers must be float32 on the CPU; anything else is a bug in a caller that did
 * not ask supports()), and the loss scale, which the CUDA kernels read from device memory and the CPU from host
 * memory. */
#pragma once
#include "common/dtype.h"
#include "core/util.h"

static inline void cpu_need_f32(DType dt, const char *op) {
    if (dt != DT_F32)
        vx_fatal("the CPU backend computes %s in float32 only, not %s (a caller that did not ask supports())", op,
                 dtype_name(dt));
}
static inline float cpu_scaled(float v, const float *loss_scale) { return loss_scale ? v * loss_scale[0] : v; }

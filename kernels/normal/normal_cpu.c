/* normal_cpu.c: the CPU fill of rng.h's counter-based normals. Each value depends only on (seed, stream, index), so
 * the loop splits across threads freely and any offset reproduces the tail of a longer fill exactly. */
#include "normal/normal.h"
#include "common/rng.h"

void normal_fill_cpu(long count, uint64_t seed, uint64_t stream, uint64_t offset, float *out) {
    /* out [count] = vx_normal(seed, stream, offset + i) */
#pragma omp parallel for schedule(static) if (count >= 4096)
    for (long i = 0; i < count; i++) out[i] = vx_normal(seed, stream, offset + (uint64_t)i);
}

/* ---- the CPU backend's table (ops.def): the offset is read from host memory -------------------------------- */

static void cpu_fill(long count, uint64_t seed, uint64_t stream, const uint64_t *offset, float *out) {
    normal_fill_cpu(count, seed, stream, offset[0], out);
}
const NormalOps normal_ops_cpu = {{op_supports_f32}, cpu_fill};

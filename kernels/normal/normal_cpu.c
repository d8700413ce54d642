/* normal_cpu.c: the CPU fill of rng.h's counter-based normals. Each value depends only on (seed, stream, index), so
 * the loop splits across threads freely and any offset reproduces the tail of a longer fill exactly. */
#include "normal/normal.h"
#include "common/rng.h"

/* values per job: the uniforms of a job on the stack (8 KiB), then its normals */
#define NORMAL_JOB 1024L

/* Why two loops a job: in one, the 64-bit hashing stayed scalar around the libm calls; alone it vectorises. A
 * 524288-value fill on one thread: 14.5 ms in one loop, 0.8 + 10.5 ms in two (2-core AVX-512 Xeon). Same bits. */
void normal_fill_cpu(long count, uint64_t seed, uint64_t stream, uint64_t offset, float *out) {
    /* out [count] = vx_normal(seed, stream, offset + i) */
    const long jobs = (count + NORMAL_JOB - 1) / NORMAL_JOB;
#pragma omp parallel for schedule(static) if (count >= 4096)
    for (long job = 0; job < jobs; job++) {
        const long i0 = job * NORMAL_JOB, n = count - i0 < NORMAL_JOB ? count - i0 : NORMAL_JOB;
        float u1[NORMAL_JOB], u2[NORMAL_JOB];
        for (long i = 0; i < n; i++) vx_normal_uniforms(seed, stream, offset + (uint64_t)(i0 + i), &u1[i], &u2[i]);
        for (long i = 0; i < n; i++) out[i0 + i] = vx_box_muller(u1[i], u2[i]);
    }
}

/* ---- the CPU backend's table (ops.def): the offset is read from host memory -------------------------------- */

static void cpu_fill(long count, uint64_t seed, uint64_t stream, const uint64_t *offset, float *out) {
    normal_fill_cpu(count, seed, stream, offset[0], out);
}
const NormalOps normal_ops_cpu = {{op_supports_f32}, cpu_fill};

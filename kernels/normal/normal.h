/* normal.h: the op that fills a buffer with counter-based standard normals (common/rng.h's vx_normal): the
 * reparameterisation's eps and any other noise a step draws. Each value depends only on (seed, stream, index). */
#pragma once
#include <stdint.h>

#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills out[i] = vx_normal(seed, stream, offset + i) for i < count. */
void normal_fill_cpu(long count, uint64_t seed, uint64_t stream, uint64_t offset, float *out);
/* CUDA (normal_cuda.cu, CUDA builds only): the same values on the device (to libm rounding, see rng.h), the
 * offset read from device memory (offset[0]) when the kernel runs, so that a captured step draws each replay's own
 * noise. */
void normal_fill_cuda(long count, uint64_t seed, uint64_t stream, const uint64_t *offset, float *out);

/* The op's sub-table (kernels/backend/ops.def): be->normal->... */
enum { NORMAL_FILL }; /* its functions, for supports() */
typedef struct NormalOps {
    OpHead head;
    /* out[i] = vx_normal(seed, stream, offset[0] + i): offset in backend memory */
    void (*fill)(long count, uint64_t seed, uint64_t stream, const uint64_t *offset, float *out);
} NormalOps;
extern const NormalOps normal_ops_cpu;
extern const NormalOps normal_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

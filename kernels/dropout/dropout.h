/* dropout.h: inverted dropout with keyed noise: value j of sample s (global index first + i of a batch) is kept when
 * vx_uniform01(vx_hash3(seed, stream, (first + i)*per_sample + j)) >= p, and then scaled by 1/(1-p). The mask is a
 * pure function of (seed, stream, global sample, j): never stored, recomputed by backward, the same for a sample
 * whatever batch or rank it falls in, so a resumed run drops the same values (resume stays exact).
 *   x, y, dy, dx [n][per_sample] of type dt; first [1]: uint64 in backend memory (the batch's first global sample,
 *   read when the kernel runs, so a captured step follows it, as normal.h's offset); beta as conv3d.h
 * p = 0 is the identity (y = x); eval runs never call it. CPU: the float32 reference; CUDA: every storage type. */
#pragma once
#include <stdint.h>

#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n;
    long per_sample;
    float p;
    uint64_t seed, stream;
    DType dtype;
} DropoutShape;

/* The op's sub-table (kernels/backend/ops.def): be->dropout->... */
enum { DROPOUT_FORWARD, DROPOUT_BACKWARD }; /* its functions, for supports() */
typedef struct DropoutOps {
    OpHead head;
    void (*forward)(const DropoutShape *s, const uint64_t *first, const void *x, void *y);
    void (*backward)(const DropoutShape *s, const uint64_t *first, const void *dy, void *dx, float beta);
} DropoutOps;
extern const DropoutOps dropout_ops_cpu;
extern const DropoutOps dropout_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

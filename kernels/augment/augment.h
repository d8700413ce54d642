/* augment.h: the random flips and 90-degree rotations of a training volume (data.augment), one sample at a time.
 *   x, y   [d][h][w][c] (one sample, NDHWC without N); y must not overlap x
 *   code   bit 0, 1, 2: flip along z, y, x; bits 3-4: k, the number of 90-degree rotations in the (h, w) plane
 *          (an odd k needs h == w); augment_code draws one from a sample's hash
 * y = flip(rot_k(x)): for each output voxel (z, j, i) the flips are undone first, then the rotation:
 *   k = 0: (j', i')   k = 1: (i', n-1-j')   k = 2: (h-1-j', w-1-i')   k = 3: (n-1-i', j')   (k odd: n = h = w)
 * The CPU version runs on the data loader's threads (CPU training), the CUDA one after the upload (GPU training);
 * they move the same values, so the two are exact copies of each other. */
#pragma once
#include <stdint.h>

#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AUGMENT_FLIP_Z 1u
#define AUGMENT_FLIP_Y 2u
#define AUGMENT_FLIP_X 4u
#define AUGMENT_ROT_SHIFT 3

/* A code from 64 random bits: each flip with probability 1/2, k uniform in 0..3 (0 or 2 when h != w). */
static inline uint32_t augment_code(uint64_t bits, int h, int w) {
    uint32_t k = (uint32_t)(bits >> 3) & 3u;
    if (h != w) k &= 2u;
    return (uint32_t)(bits & 7u) | (k << AUGMENT_ROT_SHIFT);
}

void augment_cpu(int d, int h, int w, int c, uint32_t code, const float *x, float *y);
/* CUDA (augment_cuda.cu): the same on device pointers, on the compute stream. */
void augment_cuda(int d, int h, int w, int c, uint32_t code, const float *x, float *y);

/* The op's sub-table (kernels/backend/ops.def): be->augment->... */
enum { AUGMENT_APPLY }; /* its functions, for supports() */
typedef struct AugmentOps {
    OpHead head;
    void (*apply)(int d, int h, int w, int c, uint32_t code, const float *x, float *y);
} AugmentOps;
extern const AugmentOps augment_ops_cpu;
extern const AugmentOps augment_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif

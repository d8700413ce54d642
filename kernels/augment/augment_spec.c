/* augment_spec.c: the augmentation's entry in the op spec table (common/op_spec.h): flips and rotations checked
 * against augment.h's definition read directly. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "augment/augment.h"

/* the backend's table of this op, as the entries receive it */
static const AugmentOps *table(const OpHead *ops) { return (const AugmentOps *)(const void *)ops; }

static long aug_count(const KernelCase *k) { return (long)k->dims[0] * k->dims[1] * k->dims[2] * k->dims[3]; }
static void aug_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){aug_count(k), aug_count(k)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0, 0);
}
static void aug_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->apply(k->dims[0], k->dims[1], k->dims[2], k->dims[3], (uint32_t)k->count, b[0], b[1]);
}
/* augment.h's definition read directly: the source of output voxel (z, j, i) is found by undoing the flips, giving
 * (j', i'), then the rotation: k = 0 (j', i'), 1 (i', n-1-j'), 2 (h-1-j', w-1-i'), 3 (n-1-i', j'), n = h = w */
static void aug_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const int d = k->dims[0], h = k->dims[1], w = k->dims[2], c = k->dims[3];
    const uint32_t code = (uint32_t)k->count;
    const int turns = (int)(code >> AUGMENT_ROT_SHIFT) & 3;
    for (int z = 0; z < d; z++)
        for (int j = 0; j < h; j++)
            for (int i = 0; i < w; i++) {
                const int zs = code & AUGMENT_FLIP_Z ? d - 1 - z : z;
                const int jf = code & AUGMENT_FLIP_Y ? h - 1 - j : j, if_ = code & AUGMENT_FLIP_X ? w - 1 - i : i;
                const int sj = turns == 0 ? jf : turns == 1 ? if_ : turns == 2 ? h - 1 - jf : h - 1 - if_;
                const int si = turns == 0 ? if_ : turns == 1 ? h - 1 - jf : turns == 2 ? w - 1 - if_ : jf;
                for (int ch = 0; ch < c; ch++)
                    ref[1][(((long)z * h + j) * w + i) * c + ch] = in[0][(((long)zs * h + sj) * w + si) * c + ch];
            }
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp augment_specs[] = {
    {"augment", AUGMENT_APPLY, 0, 0, aug_setup, aug_run, aug_ref, NULL},
};
const int augment_specs_count = sizeof augment_specs / sizeof augment_specs[0];

/* augment_cpu.c: flips and 90-degree rotations of one volume on the CPU (augment.h). */
#include "augment/augment.h"

#include <string.h>

void augment_cpu(int d, int h, int w, int c, uint32_t code, const float *x, float *y) {
    const int k = (int)(code >> AUGMENT_ROT_SHIFT) & 3, n = h;
    for (int z = 0; z < d; z++) {
        const int zs = code & AUGMENT_FLIP_Z ? d - 1 - z : z;
        for (int j = 0; j < h; j++) {
            const int jf = code & AUGMENT_FLIP_Y ? h - 1 - j : j;
            for (int i = 0; i < w; i++) {
                const int is = code & AUGMENT_FLIP_X ? w - 1 - i : i;
                const int sj = k == 0 ? jf : k == 1 ? is : k == 2 ? h - 1 - jf : n - 1 - is;
                const int si = k == 0 ? is : k == 1 ? n - 1 - jf : k == 2 ? w - 1 - is : jf;
                memcpy(y + (((size_t)z * h + j) * w + i) * c, x + (((size_t)zs * h + sj) * w + si) * c,
                       (size_t)c * sizeof(float));
            }
        }
    }
}

/* ---- the CPU backend's table (ops.def) ---------------------------------------------------------------------- */

const AugmentOps augment_ops_cpu = {{op_supports_f32}, augment_cpu};

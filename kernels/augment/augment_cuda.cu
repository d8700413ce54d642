/* augment_cuda.cu: flips and 90-degree rotations of one volume on the GPU (augment.h): one thread per output
 * voxel and channel, the index arithmetic of augment_cpu.c. */
#include "augment/augment.h"
#include "common/cuda_check.h"

__global__ void augment_kernel(int d, int h, int w, int c, uint32_t code, const float *__restrict__ x,
                               float *__restrict__ y, size_t total) {
    const int k = (int)(code >> AUGMENT_ROT_SHIFT) & 3, n = h;
    for (size_t t = vx_global_thread(); t < total; t += vx_grid_threads()) {
        const int ch = (int)(t % c);
        size_t v = t / c;
        const int i = (int)(v % w);
        v /= w;
        const int j = (int)(v % h);
        const int z = (int)(v / h);
        const int zs = code & AUGMENT_FLIP_Z ? d - 1 - z : z;
        const int jf = code & AUGMENT_FLIP_Y ? h - 1 - j : j;
        const int is = code & AUGMENT_FLIP_X ? w - 1 - i : i;
        const int sj = k == 0 ? jf : k == 1 ? is : k == 2 ? h - 1 - jf : n - 1 - is;
        const int si = k == 0 ? is : k == 1 ? n - 1 - jf : k == 2 ? w - 1 - is : jf;
        y[t] = x[(((size_t)zs * h + sj) * w + si) * c + ch];
    }
}

extern "C" void augment_cuda(int d, int h, int w, int c, uint32_t code, const float *x, float *y) {
    const size_t total = (size_t)d * h * w * c;
    if (total == 0) return;
    augment_kernel<<<vx_ew_blocks(total), VX_THREADS, 0, vx_cuda_stream()>>>(d, h, w, c, code, x, y, total);
    LAUNCH_CHECK("augment_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const AugmentOps augment_ops_cuda = {{op_supports_f32}, augment_cuda};

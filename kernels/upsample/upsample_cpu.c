/* upsample_cpu.c: float32 CPU nearest-neighbour x2 upsampling (upsample.h) in NDHWC, forward and backward.
 * Both are parallel over rows of input voxels (n, z, y): each output voxel is written by exactly one iteration,
 * so there are no races, and the backward's 8-term sums run in a fixed order. */
#include <string.h>

#include "upsample/upsample.h"
#include "common/cpu_op.h"

void upsample2x_forward_cpu(int n, int d, int h, int w, int c, const float *x, float *y) {
    /* x [n][d][h][w][c] -> y [n][2d][2h][2w][c] */
    const long in_row = (long)w * c, out_row = 2 * in_row;
    const long rows = (long)n * d * h;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        /* input row r = (b, z, yy) fills output rows (b, 2z + dz, 2yy + dy) for dz, dy in {0, 1} */
        const long yy = r % h, bz = r / h; /* bz = b*d + z */
        const float *src = x + r * in_row;
        float *dst = y + ((bz * 2) * (2L * h) + 2 * yy) * out_row;
        for (int xx = 0; xx < w; xx++) {
            memcpy(dst + (2L * xx) * c, src + (long)xx * c, sizeof(float) * c);
            memcpy(dst + (2L * xx + 1) * c, src + (long)xx * c, sizeof(float) * c);
        }
        memcpy(dst + out_row, dst, sizeof(float) * out_row);                     /* (2z, 2yy+1) */
        memcpy(dst + 2L * h * out_row, dst, sizeof(float) * 2 * out_row);       /* (2z+1, 2yy), (2z+1, 2yy+1) */
    }
}

void upsample2x_backward_cpu(int n, int d, int h, int w, int c, const float *dy, float *dx, float beta) {
    /* dy [n][2d][2h][2w][c] -> dx [n][d][h][w][c] = beta*dx + sum of each 2x2x2 block */
    const long in_row = (long)w * c, out_row = 2 * in_row, plane = 2L * h * out_row;
    const long rows = (long)n * d * h;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const long yy = r % h, bz = r / h;
        const float *a = dy + ((bz * 2) * (2L * h) + 2 * yy) * out_row; /* (2z, 2yy) */
        const float *b = a + out_row, *e = a + plane, *f = a + plane + out_row;
        float *dst = dx + r * in_row;
        for (int xx = 0; xx < w; xx++) {
            const long o = 2L * xx * c;
            for (int j = 0; j < c; j++) {
                const float g = ((a[o + j] + a[o + c + j]) + (b[o + j] + b[o + c + j])) +
                                ((e[o + j] + e[o + c + j]) + (f[o + j] + f[o + c + j]));
                float *t = dst + (long)xx * c + j;
                *t = beta != 0.0f ? beta * *t + g : g;
            }
        }
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(DType dt, int n, int d, int h, int w, int c, const void *x, void *y) {
    cpu_need_f32(dt, "upsample2x_forward");
    upsample2x_forward_cpu(n, d, h, w, c, x, y);
}
static void cpu_backward(DType dt, int n, int d, int h, int w, int c, const void *dy, void *dx, float beta) {
    cpu_need_f32(dt, "upsample2x_backward");
    upsample2x_backward_cpu(n, d, h, w, c, dy, dx, beta);
}
const UpsampleOps upsample_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

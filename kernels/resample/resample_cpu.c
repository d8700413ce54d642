/* resample_cpu.c: float32 CPU trilinear resampling (resample.h) in NDHWC, weights and sums in double, rounded once.
 * Parallel over output rows (b, od, oh): each output voxel has one writer and its sum a fixed order, so the result
 * does not depend on the thread count. model_resample_grid (graph/model_carry.c) is this with n = 1. */
#include "resample/resample.h"
#include "common/cpu_op.h"

/* PyTorch's source index for align_corners=False (area_pixel_compute_source_index): output cell o's centre in input
 * cells, clamped at 0; its lower neighbour, the upper one (the last cell repeats) and the upper one's weight. */
static void source_index(int o, int in, int out, int *i0, int *i1, double *l1) {
    double s = (double)in / out * (o + 0.5) - 0.5;
    if (s < 0) s = 0;
    *i0 = (int)s;
    *i1 = *i0 + (*i0 < in - 1);
    *l1 = s - *i0;
}

void resample_trilinear_cpu(int n, const int in[3], const int out[3], int c, const float *x, float *y) {
    if (n <= 0 || c <= 0 || out[0] <= 0 || out[1] <= 0 || out[2] <= 0) return;
    if (in[0] <= 0 || in[1] <= 0 || in[2] <= 0)
        vx_fatal("resample_trilinear: an empty input grid %dx%dx%d has nothing to resample to %dx%dx%d", in[0], in[1],
                 in[2], out[0], out[1], out[2]);
    const long in_vol = (long)in[0] * in[1] * in[2] * c, rows = (long)n * out[0] * out[1];
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const int oh = (int)(r % out[1]), od = (int)(r / out[1] % out[0]);
        const long b = r / ((long)out[0] * out[1]);
        int d0, d1, h0, h1, w0, w1;
        double ld, lh, lw;
        source_index(od, in[0], out[0], &d0, &d1, &ld);
        source_index(oh, in[1], out[1], &h0, &h1, &lh);
        const float *src = x + b * in_vol;
        float *dst = y + r * out[2] * (long)c;
        for (int ow = 0; ow < out[2]; ow++) {
            source_index(ow, in[2], out[2], &w0, &w1, &lw);
            const float *p[8];
            const int ds[2] = {d0, d1}, hs[2] = {h0, h1}, ws[2] = {w0, w1};
            for (int k = 0; k < 8; k++) /* k = 4*(upper in D) + 2*(upper in H) + (upper in W) */
                p[k] = src + (((long)ds[k >> 2] * in[1] + hs[(k >> 1) & 1]) * in[2] + ws[k & 1]) * c;
            float *o = dst + (long)ow * c;
            for (int j = 0; j < c; j++) { /* along W, then H, then D; in double, rounded once */
                const double a0 = (1 - lh) * ((1 - lw) * p[0][j] + lw * p[1][j]) +
                                  lh * ((1 - lw) * p[2][j] + lw * p[3][j]);
                const double a1 = (1 - lh) * ((1 - lw) * p[4][j] + lw * p[5][j]) +
                                  lh * ((1 - lw) * p[6][j] + lw * p[7][j]);
                o[j] = (float)((1 - ld) * a0 + ld * a1);
            }
        }
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(DType dt, int n, const int in[3], const int out[3], int c, const void *x, void *y) {
    cpu_need_f32(dt, "resample_trilinear");
    resample_trilinear_cpu(n, in, out, c, x, y);
}
const ResampleOps resample_ops_cpu = {{op_supports_f32}, cpu_forward};

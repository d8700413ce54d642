/* avgpool_cpu.c: the float32 CPU global average pool (avgpool.h): y[n][c] = mean over the spatial positions of
 * x[n][p][c], and its gradient dx[n][p][c] = [beta*dx +] dy[n][c] / spatial.
 * Deterministic: each output's sum runs over the positions in order, in double, on one thread (the threads split
 * samples and blocks of channels, never a sum), so the bits do not depend on the thread count. */
#include <stdlib.h>

#include "avgpool/avgpool.h"
#include "common/cpu_op.h"
#include "core/util.h"

#define AP_CHANNEL_BLOCK 64L /* channels per work item of the forward (its double accumulators stay in L1) */
#define AP_PAR_MIN 32768L    /* elements below which a loop stays on one thread */

static void check(int n, long spatial, int c) {
    if (n < 0 || spatial < 1 || c < 1) vx_fatal("avgpool: invalid shape n=%d spatial=%ld c=%d", n, spatial, c);
}

static void avgpool_forward_cpu(int n, long S, int c, const float *x, float *y) {
    /* x [n][S][c] -> y [n][c] */
    check(n, S, c);
    const long cb = (c + AP_CHANNEL_BLOCK - 1) / AP_CHANNEL_BLOCK;
#pragma omp parallel for schedule(static) if ((long)n * S * c >= AP_PAR_MIN)
    for (long t = 0; t < (long)n * cb; t++) {
        const long b = t / cb, j0 = (t % cb) * AP_CHANNEL_BLOCK;
        const int w = (int)(j0 + AP_CHANNEL_BLOCK <= c ? AP_CHANNEL_BLOCK : c - j0);
        double acc[AP_CHANNEL_BLOCK] = {0};
        for (long p = 0; p < S; p++) {
            const float *xr = x + (b * S + p) * c + j0;
            for (int j = 0; j < w; j++) acc[j] += xr[j];
        }
        for (int j = 0; j < w; j++) y[b * c + j0 + j] = (float)(acc[j] / (double)S);
    }
}

static void avgpool_backward_cpu(int n, long S, int c, const float *dy, float *dx, float beta) {
    /* dy [n][c] -> dx [n][S][c]; beta 0 overwrites dx without reading it */
    check(n, S, c);
    float *g = vx_malloc(sizeof(float) * (size_t)((long)n * c > 0 ? (long)n * c : 1)); /* dy / S, [n][c] */
    for (long i = 0; i < (long)n * c; i++) g[i] = dy[i] / (float)S;
#pragma omp parallel for schedule(static) if ((long)n * S * c >= AP_PAR_MIN)
    for (long r = 0; r < (long)n * S; r++) {
        const float *gr = g + (r / S) * c;
        float *d = dx + r * c;
        if (beta != 0.0f)
            for (int j = 0; j < c; j++) d[j] = beta * d[j] + gr[j];
        else
            for (int j = 0; j < c; j++) d[j] = gr[j];
    }
    free(g);
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(DType dt, int n, long spatial, int c, const void *x, void *y) {
    cpu_need_f32(dt, "avgpool_forward");
    avgpool_forward_cpu(n, spatial, c, x, y);
}
static void cpu_backward(DType dt, int n, long spatial, int c, const void *dy, void *dx, float beta) {
    cpu_need_f32(dt, "avgpool_backward");
    avgpool_backward_cpu(n, spatial, c, dy, dx, beta);
}
const AvgPoolOps avgpool_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

/* pool_window_cpu.c: the float32 CPU average pooling over non-overlapping windows (pool_window.h). The threads split
 * output rows (forward) or input rows (backward), never a sum: the bits do not depend on the thread count. */
#include <stdlib.h>

#include "common/cpu_op.h"
#include "core/util.h"
#include "pool_window/pool_window.h"

#define PW_PAR_MIN 32768L /* elements below which a loop stays on one thread */

PoolWindowShape pool_window_shape(int n, int d, int h, int w, int c, const int k[3]) {
    if (n < 0 || c < 1 || k[0] < 1 || k[1] < 1 || k[2] < 1 || d < k[0] || h < k[1] || w < k[2])
        vx_fatal("pool_window: window %dx%dx%d does not fit %dx%dx%d (c=%d)", k[0], k[1], k[2], d, h, w, c);
    return (PoolWindowShape){.n = n, .d = d, .h = h, .w = w, .c = c, .k = {k[0], k[1], k[2]},
                             .od = d / k[0], .oh = h / k[1], .ow = w / k[2], .dtype = DT_F32};
}

static void forward_cpu(const PoolWindowShape *s, const float *x, float *y) {
    const int c = s->c, kd = s->k[0], kh = s->k[1], kw = s->k[2];
    const long rows = (long)s->n * s->od * s->oh * s->ow;
    const float inv = 1.0f / (float)(kd * kh * kw);
#pragma omp parallel for schedule(static) if (rows * c * kd * kh * kw >= PW_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const int ox = (int)(r % s->ow), oy = (int)(r / s->ow % s->oh), oz = (int)(r / ((long)s->ow * s->oh) % s->od);
        const long b = r / ((long)s->ow * s->oh * s->od);
        float *yr = y + r * c;
        for (int j = 0; j < c; j++) yr[j] = 0.0f;
        for (int a = 0; a < kd; a++)
            for (int e = 0; e < kh; e++)
                for (int f = 0; f < kw; f++) {
                    const long p = ((b * s->d + (long)oz * kd + a) * s->h + (long)oy * kh + e) * s->w + (long)ox * kw + f;
                    const float *xr = x + p * c;
                    for (int j = 0; j < c; j++) yr[j] += xr[j];
                }
        for (int j = 0; j < c; j++) yr[j] *= inv;
    }
}

static void backward_cpu(const PoolWindowShape *s, const float *dy, float *dx, float beta) {
    const int c = s->c, kd = s->k[0], kh = s->k[1], kw = s->k[2];
    const long rows = (long)s->n * s->d * s->h * s->w;
    const float inv = 1.0f / (float)(kd * kh * kw);
#pragma omp parallel for schedule(static) if (rows * c >= PW_PAR_MIN)
    for (long p = 0; p < rows; p++) {
        const int x = (int)(p % s->w), y = (int)(p / s->w % s->h), z = (int)(p / ((long)s->w * s->h) % s->d);
        const long b = p / ((long)s->w * s->h * s->d);
        const int oz = z / kd, oy = y / kh, ox = x / kw, inside = oz < s->od && oy < s->oh && ox < s->ow;
        const float *g = inside ? dy + (((b * s->od + oz) * s->oh + oy) * s->ow + ox) * c : NULL;
        float *d = dx + p * c;
        for (int j = 0; j < c; j++) {
            const float v = g ? g[j] * inv : 0.0f;
            d[j] = beta != 0.0f ? beta * d[j] + v : v;
        }
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(const PoolWindowShape *s, const void *x, void *y) {
    cpu_need_f32(s->dtype, "pool_window_forward");
    forward_cpu(s, x, y);
}
static void cpu_backward(const PoolWindowShape *s, const void *dy, void *dx, float beta) {
    cpu_need_f32(s->dtype, "pool_window_backward");
    backward_cpu(s, dy, dx, beta);
}
const PoolWindowOps pool_window_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

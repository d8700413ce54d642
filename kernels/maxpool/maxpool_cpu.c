/* maxpool_cpu.c: maxpool_shape and the float32 CPU 3-D max pooling of maxpool.h, forward and backward.
 * forward: per output, the window's positions in window order (kd, then kh, then kw), padding skipped (it counts as
 *   -infinity, so it never wins: every window holds at least one real position, pad <= k/2 as PyTorch requires);
 *   the first maximum wins a tie (a later value must be strictly greater), a NaN wins over numbers (the first NaN,
 *   so a NaN input shows in the output, as PyTorch propagates it); arg = kd*k*k + kh*k + kw of the winner.
 * backward: each input position gathers the dy of the outputs whose window holds it and whose arg points at it, in
 *   output order (od, oh, ow ascending), summed in float: no scatter, no race, the same bits for any thread count. */
#include <stdint.h>
#include <stdlib.h>

#include "common/cpu_op.h"
#include "core/util.h"
#include "maxpool/maxpool.h"

MaxPoolShape maxpool_shape(int n, int d, int h, int w, int c, int k, int stride, int pad) {
    MaxPoolShape s = {.n = n, .d = d, .h = h, .w = w, .c = c, .k = k, .stride = stride, .pad = pad};
    if (n < 1 || d < 1 || h < 1 || w < 1 || c < 1 || k < 1 || stride < 1 || pad < 0 || 2 * pad > k)
        vx_fatal("maxpool: invalid shape n=%d %dx%dx%d c=%d k=%d stride=%d pad=%d (pad must be at most k/2)", n, d, h,
                 w, c, k, stride, pad);
    if (d + 2 * pad < k || h + 2 * pad < k || w + 2 * pad < k)
        vx_fatal("maxpool: window %d larger than the padded input %dx%dx%d (pad %d)", k, d, h, w, pad);
    s.od = (d + 2 * pad - k) / stride + 1;
    s.oh = (h + 2 * pad - k) / stride + 1;
    s.ow = (w + 2 * pad - k) / stride + 1;
    return s;
}

/* The outputs along one axis whose window holds input position z: [*lo, *hi) (z + pad - o*stride in [0, k)). */
static void out_range(int z, int k, int stride, int pad, int size_out, int *lo, int *hi) {
    const int top = z + pad; /* o*stride <= top and o*stride > top - k */
    int a = top - k + 1 <= 0 ? 0 : (top - k + 1 + stride - 1) / stride;
    int b = top / stride + 1;
    if (b > size_out) b = size_out;
    *lo = a, *hi = b > a ? b : a;
}

/* Output rows (b, oz, oy) split across threads; per output position the window is walked in order with the c
 * channels innermost (contiguous), y and arg holding each channel's best so far. */
static void maxpool_forward_cpu(const MaxPoolShape *s, const float *x, float *y, int32_t *arg) {
    const int k = s->k, c = s->c;
#pragma omp parallel for schedule(static)
    for (long row = 0; row < (long)s->n * s->od * s->oh; row++) {
        const int oy = (int)(row % s->oh), oz = (int)(row / s->oh % s->od);
        const long b = row / ((long)s->oh * s->od);
        for (int ox = 0; ox < s->ow; ox++) {
            float *best = y + (row * s->ow + ox) * c;
            int32_t *at = arg + (row * s->ow + ox) * c;
            int first = 1;
            for (int kd = 0; kd < k; kd++) {
                const int z = oz * s->stride - s->pad + kd;
                if (z < 0 || z >= s->d) continue;
                for (int kh = 0; kh < k; kh++) {
                    const int yy = oy * s->stride - s->pad + kh;
                    if (yy < 0 || yy >= s->h) continue;
                    for (int kw = 0; kw < k; kw++) {
                        const int xx = ox * s->stride - s->pad + kw;
                        if (xx < 0 || xx >= s->w) continue;
                        const float *xr = x + (((b * s->d + z) * s->h + yy) * s->w + xx) * c;
                        const int32_t tap = (kd * k + kh) * k + kw;
                        if (first) {
                            for (int j = 0; j < c; j++) best[j] = xr[j], at[j] = tap;
                            first = 0;
                            continue;
                        }
                        for (int j = 0; j < c; j++) {
                            const float v = xr[j];
                            if (v > best[j] || (v != v && best[j] == best[j])) best[j] = v, at[j] = tap;
                        }
                    }
                }
            }
        }
    }
}

/* Input rows (b, z, y) split across threads; per input position the outputs whose window holds it are visited in
 * order, the c channels innermost, the gradient gathered in g. */
static void maxpool_backward_cpu(const MaxPoolShape *s, const float *dy, const int32_t *arg, float *dx, float beta) {
    const int k = s->k, c = s->c;
#pragma omp parallel
    {
        float *g = vx_malloc(sizeof(float) * (size_t)c);
#pragma omp for schedule(static)
        for (long row = 0; row < (long)s->n * s->d * s->h; row++) {
            const int yy = (int)(row % s->h), z = (int)(row / s->h % s->d);
            const long b = row / ((long)s->h * s->d);
            int z0, z1, y0, y1;
            out_range(z, k, s->stride, s->pad, s->od, &z0, &z1);
            out_range(yy, k, s->stride, s->pad, s->oh, &y0, &y1);
            for (int xx = 0; xx < s->w; xx++) {
                int x0, x1;
                out_range(xx, k, s->stride, s->pad, s->ow, &x0, &x1);
                for (int j = 0; j < c; j++) g[j] = 0.0f;
                for (int oz = z0; oz < z1; oz++)
                    for (int oy = y0; oy < y1; oy++)
                        for (int ox = x0; ox < x1; ox++) {
                            const int32_t want = ((z + s->pad - oz * s->stride) * k + (yy + s->pad - oy * s->stride)) *
                                                     k + (xx + s->pad - ox * s->stride);
                            const long o = (((b * s->od + oz) * s->oh + oy) * s->ow + ox) * c;
                            for (int j = 0; j < c; j++)
                                if (arg[o + j] == want) g[j] += dy[o + j];
                        }
                float *d = dx + (row * s->w + xx) * c;
                if (beta != 0.0f)
                    for (int j = 0; j < c; j++) d[j] = beta * d[j] + g[j];
                else
                    for (int j = 0; j < c; j++) d[j] = g[j];
            }
        }
        free(g);
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(const MaxPoolShape *s, const void *x, void *y, int32_t *arg) {
    cpu_need_f32(s->dtype, "maxpool_forward");
    maxpool_forward_cpu(s, x, y, arg);
}
static void cpu_backward(const MaxPoolShape *s, const void *dy, const int32_t *arg, void *dx, float beta) {
    cpu_need_f32(s->dtype, "maxpool_backward");
    maxpool_backward_cpu(s, dy, arg, dx, beta);
}
const MaxPoolOps maxpool_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward};

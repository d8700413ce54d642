/* affine.c: the random affine of 2-D training images (see affine.h). */
#include "data/affine.h"

#include <math.h>

#include "common/rng.h"

#define RNG_STREAM_AFFINE 0xAFF1ull

AffineParams affine_draw(uint64_t seed, uint64_t index, const double bounds[3], int h, int w) {
    double u[4];
    for (int k = 0; k < 4; k++) u[k] = 2.0 * vx_uniform01(vx_hash3(seed, RNG_STREAM_AFFINE + (uint64_t)k, index)) - 1.0;
    return (AffineParams){.angle = u[0] * bounds[0] * M_PI / 180.0, .scale = 1.0 + u[1] * bounds[1],
                          .tx = u[2] * bounds[2] * w, .ty = u[3] * bounds[2] * h};
}

void affine_apply(const float *in, int h, int w, int c, const AffineParams *p, float pad, float *out) {
    /* A^-1 = R(-angle) / scale */
    const double cs = cos(p->angle) / p->scale, sn = sin(p->angle) / p->scale;
    const double cx = 0.5 * w, cy = 0.5 * h;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const double dx = x + 0.5 - cx - p->tx, dy = y + 0.5 - cy - p->ty;
            /* the source point, in pixel-centre coordinates (pixel i spans [i, i + 1)) */
            const double sx = cs * dx + sn * dy + cx - 0.5, sy = -sn * dx + cs * dy + cy - 0.5;
            const double fx = floor(sx), fy = floor(sy), ax = sx - fx, ay = sy - fy;
            const int x0 = (int)fx, y0 = (int)fy;
            float *o = out + ((long)y * w + x) * c;
            for (int ch = 0; ch < c; ch++) {
                double v = 0.0;
                for (int k = 0; k < 4; k++) {
                    const int xx = x0 + (k & 1), yy = y0 + (k >> 1);
                    const double wgt = ((k & 1) ? ax : 1.0 - ax) * ((k >> 1) ? ay : 1.0 - ay);
                    const float s = xx >= 0 && xx < w && yy >= 0 && yy < h ? in[((long)yy * w + xx) * c + ch] : pad;
                    v += wgt * ((double)s - pad); /* in double: (s - pad) + pad is s again */
                }
                o[ch] = (float)(v + pad);
            }
        }
}

/* resize.c: the antialiased bilinear resize of a 2-D image (resize.h). Separable: along the width first (into
 * h x ow), then along the height (oh x ow). Single-threaded: it runs in the loader's threads, one image each. Each
 * output pixel's weights are computed as ATen's upsample_bilinear2d_aa computes them
 * (_compute_indices_min_size_weights_aa), in double, and summed in double: tests/integration/test_image2d.py
 * compares with torch in float64. */
#include "data/resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

void resize_target(const char *mode, int h, int w, int H, int W, int *oh, int *ow) {
    *oh = h, *ow = w;
    if (strcmp(mode, "none") == 0 || h < 1 || w < 1) return;
    const double sh = (double)H / h, sw = (double)W / w;
    /* fit: the smaller factor (both sides within), fill: the larger (both sides covered) */
    const int by_height = strcmp(mode, "fit") == 0 ? sh <= sw : sh >= sw;
    if (by_height) {
        *oh = H;
        *ow = (int)lround(w * sh);
    } else {
        *ow = W;
        *oh = (int)lround(h * sw);
    }
    if (*oh < 1) *oh = 1;
    if (*ow < 1) *ow = 1;
}

/* The weights of one axis, in -> out: for output i, taps [first[i], first[i] + taps[i]) with weight w[i*span + k]. */
typedef struct {
    int span;
    int *first, *taps;
    double *w;
} AxisWeights;

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

static AxisWeights axis_weights(int in, int out) {
    const double scale = (double)in / out;
    /* bilinear's filter spans 2 input pixels; shrinking widens it by the factor (the antialiasing) */
    const double support = scale >= 1.0 ? scale : 1.0, invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    AxisWeights a;
    a.span = (int)ceil(support) * 2 + 1;
    a.first = vx_malloc(sizeof(int) * (size_t)out);
    a.taps = vx_malloc(sizeof(int) * (size_t)out);
    a.w = vx_calloc((size_t)out * a.span, sizeof(double));
    for (int i = 0; i < out; i++) {
        const double center = scale * (i + 0.5);
        /* (int64_t) truncates toward zero, as ATen's cast does */
        int lo = (int)(int64_t)(center - support + 0.5);
        if (lo < 0) lo = 0;
        int hi = (int)(int64_t)(center + support + 0.5);
        if (hi > in) hi = in;
        int n = hi - lo;
        if (n > a.span) n = a.span;
        double total = 0.0, *w = a.w + (size_t)i * a.span;
        for (int k = 0; k < n; k++) total += w[k] = triangle((k + lo - center + 0.5) * invscale);
        if (total != 0.0)
            for (int k = 0; k < n; k++) w[k] /= total;
        a.first[i] = lo, a.taps[i] = n;
    }
    return a;
}

static void axis_free(AxisWeights *a) {
    free(a->first);
    free(a->taps);
    free(a->w);
}

void resize_image(const Volume *in, int oh, int ow, Volume *out) {
    if (in->d != 1) vx_fatal("resize_image: a 2-D image (depth 1) is resized, not depth %d", in->d);
    const int h = in->h, w = in->w, c = in->c;
    AxisWeights ax = axis_weights(w, ow), ay = axis_weights(h, oh);
    /* along the width: tmp [h][ow][c] */
    double *tmp = vx_malloc(sizeof(double) * (size_t)h * ow * c);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < ow; x++) {
            const double *wx = ax.w + (size_t)x * ax.span;
            for (int ch = 0; ch < c; ch++) {
                double s = 0.0;
                for (int k = 0; k < ax.taps[x]; k++) s += wx[k] * in->v[((size_t)y * w + ax.first[x] + k) * c + ch];
                tmp[((size_t)y * ow + x) * c + ch] = s;
            }
        }
    memset(out, 0, sizeof *out);
    out->v = vx_malloc(sizeof(float) * (size_t)oh * ow * c);
    out->d = 1, out->h = oh, out->w = ow, out->c = c;
    /* along the height */
    for (int y = 0; y < oh; y++) {
        const double *wy = ay.w + (size_t)y * ay.span;
        for (int x = 0; x < ow * c; x++) {
            double s = 0.0;
            for (int k = 0; k < ay.taps[y]; k++) s += wy[k] * tmp[(size_t)(ay.first[y] + k) * ow * c + x];
            out->v[(size_t)y * ow * c + x] = (float)s;
        }
    }
    free(tmp);
    axis_free(&ax);
    axis_free(&ay);
}

/* v resized in place to rh x rw when it is not that size already (v->nonfinite kept) */
static void resize_in_place(Volume *v, int rh, int rw) {
    if (v->h == rh && v->w == rw) return;
    Volume r;
    resize_image(v, rh, rw, &r);
    r.nonfinite = v->nonfinite;
    volume_free(v);
    *v = r;
}

int resize_read_sized(const char *path, int channels, const char *mode, int h, int w, int H, int W, Volume *out,
                      char *why, size_t why_len) {
    int rh, rw;
    resize_target(mode, h, w, H, W, &rh, &rw);
    if (rh == h && rw == w) return volume_read(path, channels, out, why, why_len);
    if (!volume_read_at_least(path, channels, rh, rw, out, why, why_len)) return 0;
    resize_in_place(out, rh, rw);
    return 1;
}

int resize_read(const char *path, int channels, const char *mode, int H, int W, Volume *out, char *why,
                size_t why_len) {
    if (strcmp(mode, "none") == 0) return volume_read(path, channels, out, why, why_len);
    int dims[4];
    if (!volume_probe(path, channels, dims, why, why_len)) return 0;
    return resize_read_sized(path, channels, mode, dims[1], dims[2], H, W, out, why, why_len);
}

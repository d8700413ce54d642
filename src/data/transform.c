/* transform.c: normalisation and cropping of decoded volumes (see transform.h). */
#include "data/transform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* The k-th smallest of a[0..n) (a is reordered): quickselect, O(n) on average. */
static float kth(float *a, size_t n, size_t k) {
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const float pivot = a[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                const float t = a[i];
                a[i] = a[j], a[j] = t;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return a[k];
    }
    return a[k];
}

/* numpy.percentile(x, p) with linear interpolation, over scratch (a copy it may reorder). */
static double percentile(float *scratch, size_t n, double p) {
    const double pos = p / 100.0 * (double)(n - 1);
    const size_t lo = (size_t)floor(pos);
    const double frac = pos - (double)lo;
    const double a = kth(scratch, n, lo);
    if (frac == 0 || lo + 1 >= n) return a;
    const double b = kth(scratch, n, lo + 1); /* after the first call, lo+1's element is in lo+1.. */
    return a + (b - a) * frac;
}

void transform_normalize(Volume *v, const char *how, double clip_low, double clip_high) {
    if (strcmp(how, "none") == 0) return;
    const size_t n = (size_t)v->d * v->h * v->w;
    float *ch = vx_malloc(n * sizeof(float));
    for (int c = 0; c < v->c; c++) {
        for (size_t i = 0; i < n; i++) ch[i] = v->v[i * v->c + c];
        double a, scale;
        if (strcmp(how, "zscore") == 0) {
            double sum = 0, sq = 0;
            for (size_t i = 0; i < n; i++) sum += ch[i];
            const double mean = sum / (double)n;
            for (size_t i = 0; i < n; i++) sq += (ch[i] - mean) * (ch[i] - mean);
            const double sd = sqrt(sq / (double)n);
            a = mean, scale = sd > 0 ? 1.0 / sd : 0.0;
            for (size_t i = 0; i < n; i++) v->v[i * v->c + c] = (float)((v->v[i * v->c + c] - a) * scale);
        } else { /* percentile */
            const double lo = percentile(ch, n, clip_low), hi = percentile(ch, n, clip_high);
            a = lo, scale = hi > lo ? 1.0 / (hi - lo) : 0.0;
            for (size_t i = 0; i < n; i++) {
                double x = v->v[i * v->c + c];
                x = x < lo ? lo : x > hi ? hi : x;
                v->v[i * v->c + c] = (float)((x - a) * scale);
            }
        }
    }
    free(ch);
}

float transform_min(const Volume *v) {
    const size_t n = (size_t)v->d * v->h * v->w * v->c;
    float m = n ? v->v[0] : 0.0f;
    for (size_t i = 1; i < n; i++)
        if (v->v[i] < m) m = v->v[i];
    return m;
}

void transform_window(const Volume *v, const int size[3], const uint64_t *bits, int off[3]) {
    const int dims[3] = {v->d, v->h, v->w};
    for (int a = 0; a < 3; a++) {
        const int slack = dims[a] - size[a]; /* negative: padding */
        const int span = slack >= 0 ? slack : -slack;
        const int pick = bits ? (int)(bits[a] % (uint64_t)(span + 1)) : span / 2;
        off[a] = slack >= 0 ? pick : -pick;
    }
}

void transform_crop(const Volume *v, const int off[3], const int size[3], float pad, float *out) {
    const int c = v->c;
    for (int z = 0; z < size[0]; z++) {
        const int sz = z + off[0];
        for (int y = 0; y < size[1]; y++) {
            const int sy = y + off[1];
            float *row = out + (((size_t)z * size[1] + y) * size[2]) * c;
            for (int x = 0; x < size[2]; x++) {
                const int sx = x + off[2];
                const int inside = sz >= 0 && sz < v->d && sy >= 0 && sy < v->h && sx >= 0 && sx < v->w;
                for (int ch = 0; ch < c; ch++)
                    row[(size_t)x * c + ch] = inside ? v->v[(((size_t)sz * v->h + sy) * v->w + sx) * c + ch] : pad;
            }
        }
    }
}

/* phantom.c: the phantom generator (see phantom.h). */
#include "data/phantom.h"

#include <math.h>
#include <string.h>

#include "core/util.h"
#include "common/rng.h"

#define MAX_ELLIPSOIDS 8

typedef struct {
    float cz, cy, cx;       /* centre, in [0,1] coordinates */
    float rz, ry, rx;       /* radii */
    float rot[3][3];        /* rotation into the ellipsoid's axes */
    float intensity[4];     /* per channel (channels beyond 4 reuse them) */
} Ellipsoid;

/* A deterministic uniform in [lo, hi) for draw number k of a volume. */
static float draw(uint64_t seed, uint64_t index, uint64_t k, float lo, float hi) {
    return lo + (hi - lo) * vx_uniform01(vx_hash3(seed, index, k));
}

static void rotation(float a, float b, float g, float r[3][3]) {
    float ca = cosf(a), sa = sinf(a), cb = cosf(b), sb = sinf(b), cg = cosf(g), sg = sinf(g);
    float m[3][3] = {{ca * cb, ca * sb * sg - sa * cg, ca * sb * cg + sa * sg},
                     {sa * cb, sa * sb * sg + ca * cg, sa * sb * cg - ca * sg},
                     {-sb, cb * sg, cb * cg}};
    memcpy(r, m, sizeof m);
}

void phantom_generate(uint64_t seed, uint64_t index, int d, int h, int w, int c, float noise, float *out) {
    uint64_t k = 0;
    int ne = 2 + (int)draw(seed, index, k++, 0, MAX_ELLIPSOIDS - 1);
    Ellipsoid e[MAX_ELLIPSOIDS];
    for (int i = 0; i < ne; i++) {
        e[i].cz = draw(seed, index, k++, 0.25f, 0.75f);
        e[i].cy = draw(seed, index, k++, 0.25f, 0.75f);
        e[i].cx = draw(seed, index, k++, 0.25f, 0.75f);
        /* The first ellipsoid is the large "body"; the rest are smaller structures inside it. */
        float rmin = i == 0 ? 0.30f : 0.06f, rmax = i == 0 ? 0.42f : 0.20f;
        e[i].rz = draw(seed, index, k++, rmin, rmax);
        e[i].ry = draw(seed, index, k++, rmin, rmax);
        e[i].rx = draw(seed, index, k++, rmin, rmax);
        float alpha = draw(seed, index, k++, 0, 6.2831853f), beta = draw(seed, index, k++, 0, 6.2831853f);
        float gamma = draw(seed, index, k++, 0, 6.2831853f);
        rotation(alpha, beta, gamma, e[i].rot);
        for (int ch = 0; ch < 4; ch++) e[i].intensity[ch] = draw(seed, index, k++, i == 0 ? 0.2f : -0.3f, i == 0 ? 0.4f : 0.5f);
    }
    /* Smooth bias field: 1 + a*sin(f.z + phase) products, as MRI coils leave. */
    float fz = draw(seed, index, k++, 1, 4), fy = draw(seed, index, k++, 1, 4), fx = draw(seed, index, k++, 1, 4);
    float pz = draw(seed, index, k++, 0, 6.28f), py = draw(seed, index, k++, 0, 6.28f), px = draw(seed, index, k++, 0, 6.28f);
    float amp = draw(seed, index, k++, 0.05f, 0.2f);
    const float soft = 0.05f; /* edge width, in units of the normalized radius */
    /* Single-threaded on purpose: this runs on the loader thread beside the training step's own OpenMP team. */
    uint64_t noise_stream = vx_mix64(seed ^ 0xA015Eull);

    for (int z = 0; z < d; z++) {
        float Z = (z + 0.5f) / d;
        for (int y = 0; y < h; y++) {
            float Y = (y + 0.5f) / h;
            for (int x = 0; x < w; x++) {
                float X = (x + 0.5f) / w;
                float v[4] = {0, 0, 0, 0};
                for (int i = 0; i < ne; i++) {
                    float dz = Z - e[i].cz, dy = Y - e[i].cy, dx = X - e[i].cx;
                    float a = (e[i].rot[0][0] * dz + e[i].rot[0][1] * dy + e[i].rot[0][2] * dx) / e[i].rz;
                    float b = (e[i].rot[1][0] * dz + e[i].rot[1][1] * dy + e[i].rot[1][2] * dx) / e[i].ry;
                    float g = (e[i].rot[2][0] * dz + e[i].rot[2][1] * dy + e[i].rot[2][2] * dx) / e[i].rx;
                    float r = sqrtf(a * a + b * b + g * g);
                    float inside = 1.0f / (1.0f + expf((r - 1.0f) / soft));
                    for (int ch = 0; ch < 4; ch++) v[ch] += inside * e[i].intensity[ch];
                }
                float bias = (1 + amp * sinf(fz * Z + pz)) * (1 + amp * sinf(fy * Y + py)) * (1 + amp * sinf(fx * X + px));
                long voxel = ((long)z * h + y) * w + x;
                for (int ch = 0; ch < c; ch++) {
                    float n = noise > 0 ? noise * vx_normal(noise_stream, index, (uint64_t)(voxel * c + ch)) : 0.0f;
                    out[voxel * c + ch] = v[ch % 4] * bias + n;
                }
            }
        }
    }
}

/* The CDF of the mean of three uniforms on [0, 1) (Irwin-Hall of 3, scaled): maps the body's mean radius to a
 * uniform value */
static double mean3_cdf(double u) {
    const double x = 3.0 * u;
    if (x <= 0) return 0;
    if (x < 1) return x * x * x / 6.0;
    if (x < 2) return (-2.0 * x * x * x + 9.0 * x * x - 9.0 * x + 3.0) / 6.0;
    if (x < 3) return 1.0 - (3.0 - x) * (3.0 - x) * (3.0 - x) / 6.0;
    return 1;
}

void phantom_labels(uint64_t seed, uint64_t index, const char *task, int num_classes, float *out) {
    /* the same draws phantom_generate makes first: the count, then the body's centre (3), radii (3), angles (3) and
     * intensities (4) */
    const int ne = 2 + (int)draw(seed, index, 0, 0, MAX_ELLIPSOIDS - 1);
    double radius = 0;
    for (int a = 0; a < 3; a++) radius += (draw(seed, index, 4 + (uint64_t)a, 0.30f, 0.42f) - 0.30) / 0.12;
    const double size = mean3_cdf(radius / 3.0);
    const double bright = (draw(seed, index, 10, 0.2f, 0.4f) - 0.2) / 0.2;
    /* the score: size and brightness together (the sum of two uniforms through its own CDF: uniform again) */
    const double sum = size + bright, score = sum < 1 ? sum * sum / 2 : 1 - (2 - sum) * (2 - sum) / 2;
    const int inside = ne - 1;
    if (strcmp(task, "classification") == 0) {
        const int c = (int)(score * num_classes);
        out[0] = (float)(c < num_classes ? c : num_classes - 1);
    } else if (strcmp(task, "multilabel") == 0) {
        for (int j = 0; j < num_classes; j++) out[j] = inside > j ? 1.0f : 0.0f;
    } else if (strcmp(task, "regression") == 0) {
        const double f[3] = {score, bright, inside / 7.0};
        for (int j = 0; j < num_classes; j++) out[j] = (float)f[j % 3];
    } else { /* survival */
        const uint64_t stream = vx_mix64(seed ^ 0x5C0EBull);
        const double hazard = exp(4.0 * (score - 0.5));
        const double t = -log(vx_uniform01(vx_hash3(stream, index, 0))) / hazard;
        const double censor = -log(vx_uniform01(vx_hash3(stream, index, 1))) * 2.2;
        out[0] = (float)(t < censor ? t : censor);
        out[1] = t <= censor ? 1.0f : 0.0f;
    }
}

void phantom_batch(uint64_t seed, const int size[3], int c, float noise, int count, int64_t first, float *out) {
    const int d = size[0], h = size[1], w = size[2];
    for (int b = 0; b < count; b++)
        phantom_generate(seed, (uint64_t)(first + b), d, h, w, c, noise, out + (long)b * d * h * w * c);
}

/* phantom_chest.c: synthetic chest films (data.phantom chest, see phantom.h): a 2-D frontal radiograph's layout and
 * findings whose presence is the label, so a chest X-ray classifier (densenet, 2-D) trains and shows learning without
 * data. Everything is a pure function of (seed, index), as the volume phantoms are.
 *   film      soft tissue (a rounded trunk) at about 0.55, two lung fields (ellipses either side) at about 0.2, the
 *             heart's shadow (an ellipse low and left of the middle) at 0.65 overlapping the left lung, the diaphragm
 *             below; each drawn with jittered size, position and contrast, then Gaussian noise (data.noise)
 *   findings  label j is present with probability 0.4, independently, and drawn as kind j % 4:
 *             0 opacity      a bright round blob (radius 6-9% of the width) inside a lung field
 *             1 cardiomegaly the heart's shadow 40% wider
 *             2 effusion     the lower quarter of a lung field filled (bright, a level edge)
 *             3 nodule       a small bright blob (radius 2.5-3.5%) in a lung field
 *             (labels 4 and on repeat the kinds, drawn independently of the first four) */
#include <math.h>
#include <string.h>

#include "common/rng.h"
#include "data/phantom.h"

#define CHEST_STREAM 0xC4E57ull

/* draw k of film `index`: uniform in [lo, hi) */
static float u(uint64_t seed, uint64_t index, uint64_t k, float lo, float hi) {
    return lo + (hi - lo) * vx_uniform01(vx_hash3(seed ^ CHEST_STREAM, index, k));
}

/* a soft-edged ellipse: 1 inside, 0 outside, a smooth edge of width `soft` (in units of the radius) */
static float ellipse(float x, float y, float cx, float cy, float rx, float ry, float soft) {
    const float dx = (x - cx) / rx, dy = (y - cy) / ry, r = sqrtf(dx * dx + dy * dy);
    return 1.0f / (1.0f + expf((r - 1.0f) / soft));
}

static int present(uint64_t seed, uint64_t index, int j) { return u(seed, index, 100 + (uint64_t)j, 0, 1) < 0.4f; }

void phantom_chest_labels(uint64_t seed, uint64_t index, int num_classes, float *out) {
    for (int j = 0; j < num_classes; j++) out[j] = present(seed, index, j) ? 1.0f : 0.0f;
}

void phantom_chest_generate(uint64_t seed, uint64_t index, int h, int w, int c, float noise, int num_findings,
                            float *out) {
    /* the anatomy's jitter */
    const float lung_rx = u(seed, index, 0, 0.15f, 0.19f), lung_ry = u(seed, index, 1, 0.27f, 0.33f);
    const float lung_y = u(seed, index, 2, 0.42f, 0.48f), lung_dx = u(seed, index, 3, 0.19f, 0.23f);
    const float lung_v = u(seed, index, 4, 0.15f, 0.25f), tissue_v = u(seed, index, 5, 0.5f, 0.6f);
    const float shift = u(seed, index, 6, -0.03f, 0.03f);
    float heart_rx = u(seed, index, 7, 0.12f, 0.15f);
    const float heart_ry = u(seed, index, 8, 0.11f, 0.14f), heart_v = u(seed, index, 9, 0.6f, 0.7f);
    /* the findings: kind, lung (0 left of the image, 1 right), place and size */
    int has[16] = {0};
    const int nf = num_findings < 16 ? num_findings : 16;
    for (int j = 0; j < nf; j++) has[j] = present(seed, index, j);
    for (int j = 0; j < nf; j++)
        if (has[j] && j % 4 == 1) heart_rx *= 1.4f;
    const float cx_l = 0.5f - lung_dx + shift, cx_r = 0.5f + lung_dx + shift;
    const uint64_t noise_stream = vx_mix64(seed ^ 0xF11Cull);
    for (int y = 0; y < h; y++) {
        const float Y = (y + 0.5f) / h;
        for (int x = 0; x < w; x++) {
            const float X = (x + 0.5f) / w;
            float v = tissue_v * ellipse(X, Y, 0.5f + shift, 0.55f, 0.44f, 0.55f, 0.04f); /* the trunk */
            const float lungs = fmaxf(ellipse(X, Y, cx_l, lung_y, lung_rx, lung_ry, 0.06f),
                                      ellipse(X, Y, cx_r, lung_y, lung_rx, lung_ry, 0.06f));
            v += (lung_v - v) * lungs;
            const float heart = ellipse(X, Y, 0.5f + shift + 0.05f, lung_y + 0.17f, heart_rx, heart_ry, 0.08f);
            v += (heart_v - v) * heart;
            v += 0.15f * (Y > lung_y + lung_ry * 0.9f ? 1.0f : 0.0f) * ellipse(X, Y, 0.5f + shift, 0.9f, 0.45f, 0.25f, 0.1f);
            for (int j = 0; j < nf; j++) {
                if (!has[j] || j % 4 == 1) continue;
                const uint64_t k0 = 200 + 8 * (uint64_t)j;
                const float side = u(seed, index, k0, 0, 1) < 0.5f ? cx_l : cx_r;
                if (j % 4 == 2) { /* effusion: the lung's lower quarter, a level top */
                    const float level = lung_y + lung_ry * 0.5f;
                    const float in_lung = ellipse(X, Y, side, lung_y, lung_rx, lung_ry, 0.06f);
                    v += 0.35f * in_lung / (1.0f + expf((level - Y) / 0.01f));
                    continue;
                }
                const float r = j % 4 == 0 ? u(seed, index, k0 + 1, 0.06f, 0.09f) : u(seed, index, k0 + 1, 0.025f, 0.035f);
                const float bx = side + u(seed, index, k0 + 2, -0.5f, 0.5f) * lung_rx;
                const float by = lung_y + u(seed, index, k0 + 3, -0.5f, 0.4f) * lung_ry;
                v += 0.3f * ellipse(X, Y, bx, by, r, r, 0.15f);
            }
            const long px = (long)y * w + x;
            for (int ch = 0; ch < c; ch++)
                out[px * c + ch] = v + (noise > 0 ? noise * vx_normal(noise_stream, index, (uint64_t)(px * c + ch)) : 0.0f);
        }
    }
}

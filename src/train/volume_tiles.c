/* volume_tiles.c: mid-slice pictures of volumes for TensorBoard (see volume_tiles.h). */
#include "train/volume_tiles.h"

#include <math.h>
#include <string.h>

void tiles_size(int d, int h, int w, int *width, int *height) {
    int row_h = h > d ? h : d;
    *width = w + w + h + 2 * TILES_GAP;
    *height = 3 * row_h + 2 * TILES_GAP;
}

static uint8_t to_byte(float v) {
    if (!(v > 0.0f)) return 0; /* also NaN */
    if (v >= 1.0f) return 255;
    return (uint8_t)lrintf(v * 255.0f);
}

/* Value shown for voxel (z, y, x) of row kind 0 (input), 1 (reconstruction) or 2 (scaled error). */
static float shown(const float *in, const float *rec, long idx, int kind) {
    if (kind == 0) return in[idx];
    if (kind == 1) return rec[idx];
    return fabsf(in[idx] - rec[idx]) * TILES_ERROR_GAIN;
}

/* Black rectangle: the area of one tile, so a slice shorter than its row is padded below with black. */
static void clear_tile(uint8_t *pixels, int width, int x0, int y0, int tile_w, int tile_h) {
    for (int r = 0; r < tile_h; r++) memset(pixels + (size_t)(y0 + r) * width + x0, 0, (size_t)tile_w);
}

void tiles_mid_slices(const float *input, const float *recon, int d, int h, int w, int c, uint8_t *pixels) {
    int width, height;
    tiles_size(d, h, w, &width, &height);
    memset(pixels, TILES_GAP_VALUE, (size_t)width * height);
    int row_h = h > d ? h : d;
    int zm = d / 2, ym = h / 2, xm = w / 2;
    int col_x[3] = {0, w + TILES_GAP, 2 * (w + TILES_GAP)}, col_w[3] = {w, w, h};
#define VOX(z, y, x) ((((long)(z) * h + (y)) * w + (x)) * c)
#define PIX(row, col, x) (pixels[(size_t)(y0 + (row)) * width + col_x[col] + (x)])
    for (int kind = 0; kind < 3; kind++) {
        int y0 = kind * (row_h + TILES_GAP);
        for (int col = 0; col < 3; col++) clear_tile(pixels, width, col_x[col], y0, col_w[col], row_h);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) PIX(y, 0, x) = to_byte(shown(input, recon, VOX(zm, y, x), kind));
        for (int z = 0; z < d; z++)
            for (int x = 0; x < w; x++) PIX(z, 1, x) = to_byte(shown(input, recon, VOX(z, ym, x), kind));
        for (int z = 0; z < d; z++)
            for (int y = 0; y < h; y++) PIX(z, 2, y) = to_byte(shown(input, recon, VOX(z, y, xm), kind));
    }
#undef PIX
#undef VOX
}

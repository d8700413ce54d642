/* volume_tiles.h: one 8-bit grayscale picture of a volume, its reconstruction and their difference, for
 * TensorBoard's image dashboard. Volumes are NDHWC without N ([d][h][w][c]); channel 0 is shown.
 *
 *   columns: axial (z = d/2, rows y, cols x) | coronal (y = h/2, rows z, cols x) | sagittal (x = w/2, rows z, cols y)
 *   rows:    input | reconstruction | |input - reconstruction| x TILES_ERROR_GAIN
 *
 * Intensities are clamped to [0, 1] and mapped to 0..255 with the same fixed scale at every step, so images of
 * different steps compare directly. Tiles are separated by TILES_GAP pixels of value TILES_GAP_VALUE. */
#pragma once
#include <stdint.h>

#define TILES_GAP 2
#define TILES_GAP_VALUE 64
#define TILES_ERROR_GAIN 4.0f /* an error of 0.25 is white */

/* Width and height in pixels of the picture of a d x h x w volume. */
void tiles_size(int d, int h, int w, int *width, int *height);
/* Writes the picture (tiles_size pixels, row-major) of one volume and its reconstruction into pixels. */
void tiles_mid_slices(const float *input, const float *recon, int d, int h, int w, int c, uint8_t *pixels);

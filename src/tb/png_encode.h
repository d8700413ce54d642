/* png_encode.h: encodes 8-bit grayscale or RGB pixels as a PNG file in memory (TensorBoard images are PNGs). */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* pixels: height rows of width*channels bytes, row-major, channels 1 (gray) or 3 (RGB).
 * On success returns 0 and sets *png (free() it) and *png_len. Returns -1 for bad arguments (NULL, zero or
 * oversized dimensions, other channel counts); dies via vx_fatal if libpng itself fails. */
int tb_png_encode(const uint8_t *pixels, int width, int height, int channels, uint8_t **png, size_t *png_len);

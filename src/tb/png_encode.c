/* png_encode.c: PNG encoding into a growable memory buffer with libpng's write callbacks. */
#include "tb/png_encode.h"

#include <png.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

typedef struct {
    uint8_t *data;
    size_t len, cap;
} PngBuffer;

static void png_buffer_write(png_structp png, png_bytep bytes, png_size_t n) {
    PngBuffer *b = png_get_io_ptr(png);
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p) png_error(png, "out of memory growing the PNG buffer");
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
}

static void png_buffer_flush(png_structp png) { (void)png; }

/* libpng reports errors by longjmp; this turns its message into our fatal-error exit instead of an abort. */
static void png_fail(png_structp png, png_const_charp msg) {
    (void)png;
    vx_fatal("libpng failed to encode an image: %s", msg);
}

int tb_png_encode(const uint8_t *pixels, int width, int height, int channels, uint8_t **png_out, size_t *png_len) {
    if (!pixels || !png_out || !png_len || width <= 0 || height <= 0 || (channels != 1 && channels != 3))
        return -1;
    /* PNG's own limit is 2^31-1 per side; libpng's default user limit is 1,000,000 which we keep. */
    if (width > 1000000 || height > 1000000) return -1;

    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, png_fail, NULL);
    if (!png) vx_fatal("libpng could not create a write struct (out of memory?)");
    png_infop info = png_create_info_struct(png);
    if (!info) vx_fatal("libpng could not create an info struct (out of memory?)");

    PngBuffer buf = {0};
    png_set_write_fn(png, &buf, png_buffer_write, png_buffer_flush);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8,
                 channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    /* Level 3 keeps encoding cheap next to a training step; the images are small previews anyway. */
    png_set_compression_level(png, 3);
    png_write_info(png, info);
    size_t stride = (size_t)width * (size_t)channels;
    for (int y = 0; y < height; y++) png_write_row(png, (png_const_bytep)(pixels + (size_t)y * stride));
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);

    *png_out = buf.data;
    *png_len = buf.len;
    return 0;
}

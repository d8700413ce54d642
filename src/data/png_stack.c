/* png_stack.c: a volume from a folder of 2-D PNG slices (see reader.h): each PNG one z slice, in natural order of
 * their names (slice2.png before slice10.png), 8- or 16-bit grey (1, 2 and 4-bit grey are widened to 8), all of
 * one size. Pixel values are taken as they are stored (no gamma): a 16-bit CT slice keeps its numbers. */
#include <dirent.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "data/reader.h"

#define PNG_MAX_SLICES VOLUME_MAX_DIM

static int natural(const void *a, const void *b) { return strverscmp(*(char *const *)a, *(char *const *)b); }

static int is_png(const char *name) {
    const size_t n = strlen(name);
    return n > 4 && strcasecmp(name + n - 4, ".png") == 0;
}

/* The slice file names of dir in natural order (caller frees each and the list); -1 and why on failure. */
static int list_slices(const char *dir, char ***names, char *why, size_t why_len) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(why, why_len, "cannot open the folder of PNG slices");
        return -1;
    }
    int n = 0, cap = 64;
    char **list = vx_malloc((size_t)cap * sizeof *list);
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_png(e->d_name)) continue;
        if (n == PNG_MAX_SLICES) {
            snprintf(why, why_len, "more than %d PNG slices", PNG_MAX_SLICES);
            n = -1;
            break;
        }
        if (n == cap) list = vx_realloc(list, (size_t)(cap *= 2) * sizeof *list);
        list[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n == 0) snprintf(why, why_len, "no .png slices in the folder");
    if (n <= 0) {
        for (int i = 0; i < (n > 0 ? n : 0); i++) free(list[i]);
        free(list);
        return n == 0 ? -1 : n;
    }
    qsort(list, (size_t)n, sizeof *list, natural);
    *names = list;
    return n;
}

/* One slice: its size, and (when px is not NULL) its w*h pixels as floats; when want_w > 0 a slice of another size
 * is refused before any pixel is read. 1, or 0 and why. */
static int read_slice(const char *path, int want_w, int want_h, int *w, int *h, float *px, char *why, size_t why_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_len, "cannot open it");
        return 0;
    }
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* volatile: libpng reports errors by longjmp to the setjmp below, after which only volatile locals keep the
     * values they were given since (the fuzz target found the row buffer leaking otherwise) */
    png_bytep volatile row = NULL;
    volatile int ok = 0;
    if (!png || !info) {
        snprintf(why, why_len, "out of memory starting libpng");
    } else if (setjmp(png_jmpbuf(png))) {
        snprintf(why, why_len, "not a readable PNG (bad signature, or truncated or damaged data)");
    } else {
        png_init_io(png, f);
        png_read_info(png, info);
        const int ct = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
        *w = (int)png_get_image_width(png, info);
        *h = (int)png_get_image_height(png, info);
        if (ct != PNG_COLOR_TYPE_GRAY) {
            snprintf(why, why_len, "colour type %d: a slice is a grey PNG without alpha", ct);
        } else if (*w > VOLUME_MAX_DIM || *h > VOLUME_MAX_DIM) {
            snprintf(why, why_len, "absurd size %d x %d", *w, *h);
        } else if (want_w > 0 && (*w != want_w || *h != want_h)) {
            snprintf(why, why_len, "it is %d x %d, the first slice %d x %d", *w, *h, want_w, want_h);
        } else if (!px) {
            ok = 1;
        } else {
            if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
            if (depth == 16) png_set_swap(png); /* PNG stores 16-bit big-endian */
            png_read_update_info(png, info);
            row = vx_malloc(png_get_rowbytes(png, info));
            for (int y = 0; y < *h; y++) {
                png_read_row(png, row, NULL);
                for (int x = 0; x < *w; x++)
                    px[(size_t)y * *w + x] = depth == 16 ? (float)((const uint16_t *)row)[x] : (float)row[x];
            }
            ok = 1;
        }
    }
    free(row);
    png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, NULL);
    fclose(f);
    return ok;
}

static int read_png_stack(const char *dir, int channels, int header_only, Volume *out, char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    if (channels != 1) {
        snprintf(why, why_len, "PNG slices are grey: one channel, the model takes %d (model.in_channels)", channels);
        return 0;
    }
    char **names;
    const int n = list_slices(dir, &names, why, why_len);
    if (n < 0) return 0;
    int ok = 1, w0 = 0, h0 = 0, w, h;
    char path[4096], inner[200];
    snprintf(path, sizeof path, "%s/%s", dir, names[0]);
    if (!read_slice(path, 0, 0, &w0, &h0, NULL, inner, sizeof inner)) {
        snprintf(why, why_len, "slice %s: %s", names[0], inner);
        ok = 0;
    } else if ((int64_t)n * w0 * h0 > VOLUME_MAX_VOXELS) {
        snprintf(why, why_len, "%d slices of %d x %d: more voxels than a training volume holds", n, w0, h0);
        ok = 0;
    }
    if (ok && !header_only) out->v = vx_malloc((size_t)n * w0 * h0 * sizeof(float));
    for (int z = 0; z < n && ok; z++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[z]);
        float *px = header_only ? NULL : out->v + (size_t)z * w0 * h0;
        if (!read_slice(path, w0, h0, &w, &h, px, inner, sizeof inner)) {
            snprintf(why, why_len, "slice %s: %s", names[z], inner);
            ok = 0;
        }
    }
    for (int z = 0; z < n; z++) free(names[z]);
    free(names);
    if (!ok) {
        free(out->v), memset(out, 0, sizeof *out);
        return 0;
    }
    out->d = n, out->h = h0, out->w = w0, out->c = 1;
    return 1;
}

static int claims_png_stack(const char *path, int is_dir) { return is_dir; }

const VolumeReader png_stack_reader = {.name = "png-stack", .claims = claims_png_stack, .read = read_png_stack};

/* png_stack.c: a volume from a folder of 2-D PNG slices (see reader.h): each PNG one z slice, in natural order of
 * their names (slice2.png before slice10.png), 8- or 16-bit grey (1, 2 and 4-bit grey are widened to 8), all of
 * one size and one bit depth. Pixel values are taken as they are stored (no gamma): a 16-bit CT slice keeps its
 * numbers. libpng's errors and warnings come back into our one line, never on stderr of their own. */
#include <dirent.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/util.h"
#include "data/png_image.h"
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

/* libpng's own reports: kept for our one line instead of printed on stderr (libpng's default handlers print
 * "libpng error: IDAT: CRC error" and its warnings there, before ours). An error longjmps back to read_slice. */
typedef struct {
    char error[160], warning[160];
} PngReport;

static void png_on_error(png_structp png, png_const_charp msg) {
    PngReport *r = png_get_error_ptr(png);
    snprintf(r->error, sizeof r->error, "%s", msg ? msg : "unknown error");
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    PngReport *r = png_get_error_ptr(png);
    if (!r->warning[0]) snprintf(r->warning, sizeof r->warning, "%s", msg ? msg : "");
}

/* What a slice is: its size and bit depth. */
typedef struct {
    int w, h, depth;
} SliceInfo;

/* One slice: its size and depth, and (when px is not NULL) its w*h pixels as floats; when want->w > 0 a slice of
 * another size or bit depth is refused before any pixel is read. 1, or 0 and why. */
static int read_slice(const char *path, const SliceInfo *want, SliceInfo *got, float *px, char *why,
                      size_t why_len) {
    char kind[160];
    if (!fs_input_kind(path, 0, NULL, kind, sizeof kind)) { /* a FIFO would block fopen forever */
        snprintf(why, why_len, "%s", kind);
        return 0;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_len, "cannot open it");
        return 0;
    }
    PngReport report = {{0}, {0}};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &report, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* volatile: libpng reports errors by longjmp to the setjmp below, after which only volatile locals keep the
     * values they were given since (the fuzz target found the row buffer leaking otherwise) */
    png_bytep volatile row = NULL;
    volatile int ok = 0;
    if (!png || !info) {
        snprintf(why, why_len, "out of memory starting libpng");
    } else if (setjmp(png_jmpbuf(png))) {
        snprintf(why, why_len, "not a readable PNG (libpng: %s%s%s)", report.error,
                 report.warning[0] ? "; " : "", report.warning);
    } else {
        png_init_io(png, f);
        png_read_info(png, info);
        const int ct = png_get_color_type(png, info);
        got->depth = png_get_bit_depth(png, info);
        got->w = (int)png_get_image_width(png, info);
        got->h = (int)png_get_image_height(png, info);
        if (ct != PNG_COLOR_TYPE_GRAY) {
            snprintf(why, why_len, "colour type %d: a slice is a grey PNG without alpha", ct);
        } else if (got->w > VOLUME_MAX_DIM || got->h > VOLUME_MAX_DIM) {
            snprintf(why, why_len, "absurd size %d x %d", got->w, got->h);
        } else if (want->w > 0 && (got->w != want->w || got->h != want->h)) {
            snprintf(why, why_len, "it is %d x %d, the first slice %d x %d", got->w, got->h, want->w, want->h);
        } else if (want->w > 0 && got->depth != want->depth) {
            /* an 8-bit slice among 16-bit ones would hold values on another scale (0..255 against 0..65535) */
            snprintf(why, why_len, "it is %d-bit, the first slice %d-bit: every slice of a volume has one bit depth",
                     got->depth, want->depth);
        } else if (!px) {
            ok = 1;
        } else {
            const int depth = got->depth, w = got->w, h = got->h;
            if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
            if (depth == 16) png_set_swap(png); /* PNG stores 16-bit big-endian */
            png_read_update_info(png, info);
            row = vx_malloc(png_get_rowbytes(png, info));
            for (int y = 0; y < h; y++) {
                png_read_row(png, row, NULL);
                for (int x = 0; x < w; x++)
                    px[(size_t)y * w + x] = depth == 16 ? (float)((const uint16_t *)row)[x] : (float)row[x];
            }
            png_read_end(png, NULL); /* the chunks after the pixels too: a damaged CRC there is damage */
            ok = 1;
        }
    }
    free(row);
    png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, NULL);
    fclose(f);
    return ok;
}

int png_read_grey(const char *path, int *w, int *h, int *depth, float **px, char *why, size_t why_len) {
    const SliceInfo none = {0, 0, 0};
    SliceInfo got, again;
    if (!read_slice(path, &none, &got, NULL, why, why_len)) return 0;
    *w = got.w, *h = got.h, *depth = got.depth;
    if (!px) return 1;
    /* the pixels on a second pass, refused if the file changed size or depth since the first */
    *px = vx_malloc((size_t)got.w * got.h * sizeof(float));
    if (read_slice(path, &got, &again, *px, why, why_len)) return 1;
    free(*px);
    *px = NULL;
    return 0;
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
    int ok = 1;
    const SliceInfo none = {0, 0, 0};
    SliceInfo first = none, got;
    char path[4096], inner[400];
    snprintf(path, sizeof path, "%s/%s", dir, names[0]);
    if (!read_slice(path, &none, &first, NULL, inner, sizeof inner)) {
        snprintf(why, why_len, "slice %s: %s", names[0], inner);
        ok = 0;
    } else if ((int64_t)n * first.w * first.h > VOLUME_MAX_VOXELS) {
        snprintf(why, why_len, "%d slices of %d x %d: more voxels than a training volume holds", n, first.w, first.h);
        ok = 0;
    }
    const size_t plane = (size_t)first.w * first.h;
    if (ok && !header_only) out->v = vx_malloc((size_t)n * plane * sizeof(float));
    for (int z = 0; z < n && ok; z++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[z]);
        float *px = header_only ? NULL : out->v + (size_t)z * plane;
        if (!read_slice(path, &first, &got, px, inner, sizeof inner)) {
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
    out->d = n, out->h = first.h, out->w = first.w, out->c = 1;
    return 1;
}

static int claims_png_stack(const char *path, int is_dir) { return is_dir; }

const VolumeReader png_stack_reader = {.name = "png-stack", .claims = claims_png_stack, .read = read_png_stack};

/* image2d_read.c: 2-D images as volumes of depth 1 (see reader.h), what chest X-ray datasets store:
 *   jpeg       .jpg/.jpeg through libjpeg-turbo's TurboJPEG API (Debian's libturbojpeg0-dev): baseline and
 *              progressive, grey or colour; with in_channels 1 a colour image is decoded to its luma (libjpeg's own
 *              YCbCr -> grey, what `djpeg -grayscale` writes), with 3 to RGB (a grey image repeated). Refused by
 *              name: CMYK/YCCK, 12-bit (libjpeg-turbo 2.1 decodes 8-bit samples only), and a damaged or truncated
 *              file (libjpeg's warnings stop the decode: a half-grey film must not train silently).
 *   png-image  one .png file: 8- or 16-bit grey (libpng, data/png_image.h), repeated over in_channels.
 * Pixel values are the stored ones (0..255, 0..65535); data.normalize scales them.
 * DCT scaling: a run that resizes (data.resize) asks for the smallest decode that is still at least min_h x min_w;
 * libjpeg-turbo then runs its reduced IDCT (1/2, 1/4, 1/8: SIMD paths) and never produces the full 2500 x 3000
 * film, which is most of a CXR loader's time. The result is exactly what `djpeg -scale 1/N` writes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <turbojpeg.h>

#include "core/fsutil.h"
#include "core/util.h"
#include "data/png_image.h"
#include "data/reader.h"

#define JPEG_MAX_BYTES ((size_t)256 << 20) /* a film is a few MiB; more is not one image */
#define JPEG_HEADER_BYTES ((size_t)64 << 10) /* enough for the markers before the frame header, EXIF included */

static int has_ext(const char *path, const char *ext) {
    const size_t n = strlen(path), e = strlen(ext);
    return n > e && strcasecmp(path + n - e, ext) == 0;
}

/* The first `max` bytes of path (all of it when shorter); NULL and why. */
static unsigned char *read_prefix(const char *path, size_t max, size_t *len, char *why, size_t why_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_len, "cannot open it (%s)", strerror(errno));
        return NULL;
    }
    unsigned char *buf = vx_malloc(max ? max : 1);
    *len = fread(buf, 1, max, f);
    fclose(f);
    return buf;
}

/* The libjpeg message of the last call, as one clause. */
static const char *tj_says(tjhandle tj) {
    const char *s = tjGetErrorStr2(tj);
    return s && *s ? s : "unknown error";
}

/* The frame header: size and colour space; 1, or 0 and why (12-bit and CMYK named, what to do said). */
static int jpeg_header(tjhandle tj, const unsigned char *buf, size_t len, int *w, int *h, int *cs, char *why,
                       size_t why_len) {
    int subsamp;
    if (len == 0) {
        snprintf(why, why_len, "an empty file, not a JPEG");
        return 0;
    }
    if (tjDecompressHeader3(tj, buf, (unsigned long)len, w, h, &subsamp, cs) != 0) {
        const char *s = tj_says(tj);
        if (strstr(s, "precision"))
            snprintf(why, why_len, "a %s JPEG: only 8-bit JPEGs are read (store 12-bit films as 16-bit PNG)",
                     strstr(s, "12") ? "12-bit" : "non-8-bit");
        else
            snprintf(why, why_len, "not a readable JPEG (libjpeg-turbo: %s)", s);
        return 0;
    }
    if (*cs == TJCS_CMYK || *cs == TJCS_YCCK) {
        snprintf(why, why_len, "a CMYK JPEG: store the film as grey or RGB (e.g. `convert in.jpg -colorspace Gray "
                 "out.jpg`)");
        return 0;
    }
    if (*w > 65500 || *h > 65500 || *w < 1 || *h < 1) {
        snprintf(why, why_len, "absurd size %d x %d", *w, *h);
        return 0;
    }
    return 1;
}

/* A JPEG decodes to grey or RGB: model.in_channels 1 or 3; 1, or 0 and why */
static int jpeg_channels_ok(int channels, char *why, size_t why_len) {
    if (channels == 1 || channels == 3) return 1;
    snprintf(why, why_len, "a JPEG is read as grey or RGB: model.in_channels 1 or 3, not %d", channels);
    return 0;
}

/* The smallest of libjpeg-turbo's 1/1, 1/2, 1/4, 1/8 scalings whose output is at least min_h x min_w (no minimum:
 * full size). */
static tjscalingfactor pick_scale(int w, int h, int min_h, int min_w) {
    tjscalingfactor best = {1, 1};
    if (min_h < 1 || min_w < 1) return best;
    int n;
    tjscalingfactor *sf = tjGetScalingFactors(&n);
    for (int i = 0; sf && i < n; i++) {
        const int num = sf[i].num, den = sf[i].denom;
        if (num != 1 || (den != 2 && den != 4 && den != 8)) continue; /* the SIMD-accelerated reductions */
        if (TJSCALED(w, sf[i]) >= min_w && TJSCALED(h, sf[i]) >= min_h && den > best.denom) best = sf[i];
    }
    return best;
}

static int read_jpeg_at_least(const char *path, int channels, int min_h, int min_w, Volume *out, char *why,
                              size_t why_len) {
    memset(out, 0, sizeof *out);
    if (!jpeg_channels_ok(channels, why, why_len)) return 0;
    size_t len;
    unsigned char *buf = (unsigned char *)fs_read_file(path, JPEG_MAX_BYTES, &len);
    if (!buf) {
        snprintf(why, why_len, errno == EFBIG ? "more than 256 MiB: not one image" : "cannot read it (%s)",
                 strerror(errno));
        return 0;
    }
    tjhandle tj = tjInitDecompress();
    int ok = 0, w, h, cs;
    if (!tj) {
        snprintf(why, why_len, "cannot start libjpeg-turbo (%s)", tjGetErrorStr2(NULL));
    } else if (jpeg_header(tj, buf, len, &w, &h, &cs, why, why_len)) {
        const tjscalingfactor s = pick_scale(w, h, min_h, min_w);
        const int sw = TJSCALED(w, s), sh = TJSCALED(h, s);
        if (sw > VOLUME_MAX_DIM || sh > VOLUME_MAX_DIM) {
            snprintf(why, why_len, "%d x %d decoded (scale 1/%d): more than %d pixels a side", sw, sh, s.denom,
                     VOLUME_MAX_DIM);
        } else {
            unsigned char *px = vx_malloc((size_t)sw * sh * channels);
            /* STOPONWARNING: a truncated or corrupt stream is a warning to libjpeg (it fills grey and goes on) */
            const int flags = TJFLAG_STOPONWARNING;
            if (tjDecompress2(tj, buf, (unsigned long)len, px, sw, 0, sh, channels == 1 ? TJPF_GRAY : TJPF_RGB,
                              flags) != 0) {
                snprintf(why, why_len, "a damaged or truncated JPEG (libjpeg-turbo: %s)", tj_says(tj));
            } else {
                const size_t n = (size_t)sw * sh * channels;
                out->v = vx_malloc(n * sizeof(float));
                for (size_t i = 0; i < n; i++) out->v[i] = (float)px[i];
                out->d = 1, out->h = sh, out->w = sw, out->c = channels;
                ok = 1;
            }
            free(px);
        }
    }
    if (tj) tjDestroy(tj);
    free(buf);
    return ok;
}

static int read_jpeg(const char *path, int channels, int header_only, Volume *out, char *why, size_t why_len) {
    if (!header_only) return read_jpeg_at_least(path, channels, 0, 0, out, why, why_len);
    memset(out, 0, sizeof *out);
    if (!jpeg_channels_ok(channels, why, why_len)) return 0;
    /* the header from the file's start: probing a dataset must not read every film whole */
    size_t len;
    unsigned char *buf = read_prefix(path, JPEG_HEADER_BYTES, &len, why, why_len);
    if (!buf) return 0;
    tjhandle tj = tjInitDecompress();
    int w = 0, h = 0, cs, ok = tj && jpeg_header(tj, buf, len, &w, &h, &cs, why, why_len);
    if (tj) tjDestroy(tj);
    free(buf);
    if (!ok && len == JPEG_HEADER_BYTES && strstr(why, "not a readable JPEG")) { /* markers beyond 64 KiB */
        Volume v;
        if (!read_jpeg_at_least(path, channels, 0, 0, &v, why, why_len)) return 0;
        w = v.w, h = v.h, ok = 1;
        free(v.v);
    }
    if (!ok) return 0;
    out->d = 1, out->h = h, out->w = w, out->c = channels;
    return 1;
}

static int claims_jpeg(const char *path, int is_dir) {
    return !is_dir && (has_ext(path, ".jpg") || has_ext(path, ".jpeg"));
}

const VolumeReader jpeg_reader = {.name = "jpeg", .claims = claims_jpeg, .read = read_jpeg,
                                  .read_at_least = read_jpeg_at_least};

static int read_png_image(const char *path, int channels, int header_only, Volume *out, char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    int w, h, depth;
    float *px = NULL;
    if (!png_read_grey(path, &w, &h, &depth, header_only ? NULL : &px, why, why_len)) return 0;
    out->d = 1, out->h = h, out->w = w, out->c = channels;
    if (header_only) return 1;
    if (channels == 1) {
        out->v = px;
        return 1;
    }
    const size_t n = (size_t)w * h;
    out->v = vx_malloc(n * channels * sizeof(float));
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < channels; c++) out->v[i * channels + c] = px[i];
    free(px);
    return 1;
}

static int claims_png_image(const char *path, int is_dir) { return !is_dir && has_ext(path, ".png"); }

const VolumeReader png_image_reader = {.name = "png-image", .claims = claims_png_image, .read = read_png_image};

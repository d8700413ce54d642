/* nifti_read.c: NIfTI-1 and NIfTI-2 volumes through libnifti (see reader.h).
 * libnifti prints its own complaints on stderr, unconditionally for some, and a hostile header sends it far: so
 * every header is checked here first (sizeof_hdr and magic, dims, datatype, vox_offset, whether name and content
 * agree on gzip, and whether the file holds the data the header promises), and libnifti parses only headers it will
 * read without a word. The voxels are read here (load_voxels), not by libnifti, which sets NaN and Inf floats to 0
 * without saying so: the caller counts them (data.nonfinite). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <nifti2_io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/fsutil.h"
#include "core/util.h"
#include "data/reader.h"

/* Voxel i of the image's data as a double, by datatype; 0 and `ok` cleared for one that is not a real scalar. */
static double voxel(const void *data, int datatype, int64_t i, int *ok) {
    switch (datatype) {
    case NIFTI_TYPE_UINT8: return ((const uint8_t *)data)[i];
    case NIFTI_TYPE_INT8: return ((const int8_t *)data)[i];
    case NIFTI_TYPE_INT16: return ((const int16_t *)data)[i];
    case NIFTI_TYPE_UINT16: return ((const uint16_t *)data)[i];
    case NIFTI_TYPE_INT32: return ((const int32_t *)data)[i];
    case NIFTI_TYPE_UINT32: return ((const uint32_t *)data)[i];
    case NIFTI_TYPE_INT64: return (double)((const int64_t *)data)[i];
    case NIFTI_TYPE_UINT64: return (double)((const uint64_t *)data)[i];
    case NIFTI_TYPE_FLOAT32: return ((const float *)data)[i];
    case NIFTI_TYPE_FLOAT64: return ((const double *)data)[i];
    default: *ok = 0; return 0;
    }
}

static int scalar_type(int dt) {
    return dt == NIFTI_TYPE_UINT8 || dt == NIFTI_TYPE_INT8 || dt == NIFTI_TYPE_INT16 || dt == NIFTI_TYPE_UINT16 ||
           dt == NIFTI_TYPE_INT32 || dt == NIFTI_TYPE_UINT32 || dt == NIFTI_TYPE_INT64 || dt == NIFTI_TYPE_UINT64 ||
           dt == NIFTI_TYPE_FLOAT32 || dt == NIFTI_TYPE_FLOAT64;
}

static int32_t swap32(int32_t v) { return (int32_t)__builtin_bswap32((uint32_t)v); }
static int16_t swap16(int16_t v) { return (int16_t)__builtin_bswap16((uint16_t)v); }
static int64_t swap64(int64_t v) { return (int64_t)__builtin_bswap64((uint64_t)v); }

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

/* path with its suffix `from` (before an optional .gz) replaced by `to`, in out: 1, or 0 when it has no such
 * suffix or the result does not fit. x.hdr.gz -> x.img.gz. */
static int swap_suffix(const char *path, const char *from, const char *to, char *out, size_t len) {
    const size_t n = strlen(path), f = strlen(from), gz = ends_with(path, ".gz") ? 3 : 0;
    if (n < f + gz || strncmp(path + n - gz - f, from, f) != 0 || n + strlen(to) - f >= len) return 0;
    snprintf(out, len, "%.*s%s%s", (int)(n - gz - f), path, to, gz ? ".gz" : "");
    return 1;
}

/* zlib's message for g without the "path: " it puts in front. */
static const char *zlib_reason(gzFile g, const char *path) {
    int err;
    const char *msg = gzerror(g, &err);
    const size_t n = strlen(path);
    return strncmp(msg, path, n) == 0 && strncmp(msg + n, ": ", 2) == 0 ? msg + n + 2 : msg;
}

/* 1 when the file starts with gzip's magic, 0 when it does not, -1 when it cannot be read. */
static int gzip_content(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char m[2] = {0, 0};
    const size_t n = fread(m, 1, 2, f);
    fclose(f);
    return n == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

/* A file's name and content must agree on gzip: libnifti opens a file by its name (.gz: through zlib), so a gzip
 * stream named .nii would be read as raw bytes and a plain file named .nii.gz fail. 1, or 0 and why. `what` names
 * the file in the reason ("it", "its data file x.img"). */
static int name_matches_content(const char *path, const char *what, char *why, size_t why_len) {
    char kind[256];
    if (!fs_input_kind(path, 0, NULL, kind, sizeof kind)) {
        snprintf(why, why_len, "%s is %s", what, strcmp(kind, "no such file") == 0 ? "missing" : kind);
        return 0;
    }
    const int gz = gzip_content(path), named = ends_with(path, ".gz");
    if (gz < 0) {
        snprintf(why, why_len, "%s cannot be opened (%s)", what, strerror(errno));
        return 0;
    }
    if (gz && !named) {
        snprintf(why, why_len, "%s is gzip-compressed but its name does not end in .gz (libnifti reads a file by its "
                 "name): rename it to end in .gz", what);
        return 0;
    }
    if (!gz && named) {
        snprintf(why, why_len, "%s is not gzip-compressed but its name ends in .gz: rename it without .gz", what);
        return 0;
    }
    return 1;
}

/* Bytes a gzip file decompresses to, counting every member (bgzip and some writers concatenate several; zlib reads
 * them all), or -1 and why when the stream is damaged or cut short. */
static int64_t gzip_length(const char *path, char *why, size_t why_len) {
    gzFile g = gzopen(path, "rb");
    if (!g) {
        snprintf(why, why_len, "cannot be opened (%s)", strerror(errno));
        return -1;
    }
    const int chunk = 1 << 16;
    char *buf = vx_malloc((size_t)chunk);
    int64_t total = 0;
    for (int n; (n = gzread(g, buf, (unsigned)chunk)) > 0;) total += n;
    free(buf);
    int err;
    gzerror(g, &err);
    if (err == Z_BUF_ERROR) { /* zlib's "unexpected end of file": no trailer */
        snprintf(why, why_len, "its gzip stream is cut short (it ends after %lld bytes, without its trailer)",
                 (long long)total);
        total = -1;
    } else if (err != Z_OK) {
        snprintf(why, why_len, "its gzip stream is damaged (zlib: %s)", zlib_reason(g, path));
        total = -1;
    }
    gzclose(g);
    return total;
}

/* Whether the file at path holds `need` bytes (header included), plain or once decompressed: the same rule for
 * .nii and .nii.gz. For gzip the last member's trailer (ISIZE, the size mod 2^32) answers at once when it matches;
 * otherwise (several members, trailing bytes, or damage) the stream is decompressed and counted. 1, or 0 and why;
 * `what` names the file ("the file", "its data file x.img"). */
static int holds(const char *path, const char *what, int64_t need, char *why, size_t why_len) {
    if (!name_matches_content(path, what, why, why_len)) return 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, why_len, "%s cannot be read (%s)", what, strerror(errno));
        return 0;
    }
    int64_t have = st.st_size;
    if (ends_with(path, ".gz")) {
        FILE *f = fopen(path, "rb");
        unsigned char t[4] = {0, 0, 0, 0};
        const int trailer = f && st.st_size >= 18 && fseek(f, -4, SEEK_END) == 0 && fread(t, 1, 4, f) == 4;
        if (f) fclose(f);
        const int64_t isize = (int64_t)t[0] | (int64_t)t[1] << 8 | (int64_t)t[2] << 16 | (int64_t)t[3] << 24;
        if (trailer && isize == (need & 0xFFFFFFFFLL)) return 1; /* one member of the promised size */
        char inner[200];
        have = gzip_length(path, inner, sizeof inner);
        if (have < 0) {
            snprintf(why, why_len, "%s: %s", what, inner);
            return 0;
        }
    }
    if (have < need) {
        snprintf(why, why_len, "its data is cut short: the header promises %lld bytes (header and voxels), %s holds "
                 "%lld%s", (long long)need, what, (long long)have, ends_with(path, ".gz") ? " once decompressed" : "");
        return 0;
    }
    return 1;
}

/* The first bad entry of dim[] by name (see the file comment): 1, or 0 and why. */
static int dims_ok(const int64_t dim[8], int64_t *voxels, char *why, size_t why_len) {
    if (dim[0] < 1 || dim[0] > 7) {
        snprintf(why, why_len, "absurd dimensions in its header: dim[0] = %lld, the number of dimensions, must be "
                 "1..7", (long long)dim[0]);
        return 0;
    }
    int64_t n = 1;
    for (int i = 1; i <= dim[0]; i++) {
        if (dim[i] < 1 || dim[i] > VOLUME_MAX_DIM) {
            snprintf(why, why_len, "absurd dimensions in its header: dim[%d] = %lld is outside 1..%d", i,
                     (long long)dim[i], VOLUME_MAX_DIM);
            return 0;
        }
        n *= dim[i]; /* < 4096^7 would overflow: checked each step */
        if (n > VOLUME_MAX_VOXELS) {
            snprintf(why, why_len, "absurd dimensions in its header: dim[1..%lld] hold more than 2^31 voxels",
                     (long long)dim[0]);
            return 0;
        }
    }
    *voxels = n;
    return 1;
}

/* The checks of the file header (see the file comment): 1, or 0 and why. */
static int precheck(const char *path, char *why, size_t why_len) {
    if (!name_matches_content(path, "it", why, why_len)) return 0;
    gzFile g = gzopen(path, "rb"); /* a plain file as it is, a .gz decompressed */
    if (!g) {
        snprintf(why, why_len, "cannot be opened (%s)", strerror(errno));
        return 0;
    }
    unsigned char buf[540];
    const int n = gzread(g, buf, sizeof buf);
    if (n < 0) {
        snprintf(why, why_len, "its gzip stream is damaged (zlib: %s)", zlib_reason(g, path));
        gzclose(g);
        return 0;
    }
    gzclose(g);
    int32_t sz = 0;
    if (n >= 4) memcpy(&sz, buf, 4);
    const int v1 = sz == 348 || swap32(sz) == 348, v2 = sz == 540 || swap32(sz) == 540, sw = sz != 348 && sz != 540;
    if (!v1 && !v2) {
        snprintf(why, why_len, "not a readable NIfTI file (no valid NIfTI-1/2 header: sizeof_hdr is not 348 or 540, or "
                 "the file is empty)");
        return 0;
    }
    const int hdr_bytes = v1 ? 348 : 540;
    if (n < hdr_bytes) {
        snprintf(why, why_len, "not a readable NIfTI file: its header is cut short (%d bytes)", n);
        return 0;
    }
    int64_t dim[8];
    double vox_offset;
    int datatype, onefile;
    if (v1) {
        nifti_1_header h;
        memcpy(&h, buf, sizeof h);
        for (int i = 0; i < 8; i++) dim[i] = sw ? swap16(h.dim[i]) : h.dim[i];
        datatype = sw ? swap16(h.datatype) : h.datatype;
        float off = h.vox_offset;
        if (sw) {
            uint32_t u;
            memcpy(&u, &off, 4);
            u = __builtin_bswap32(u);
            memcpy(&off, &u, 4);
        }
        vox_offset = off;
        onefile = NIFTI_ONEFILE(h);
        if (!NIFTI_VERSION(h) && !ends_with(path, ".hdr") && !ends_with(path, ".hdr.gz")) {
            snprintf(why, why_len, "not a readable NIfTI file (no NIfTI magic n+1 or ni1 in its header)");
            return 0;
        }
    } else {
        nifti_2_header h;
        memcpy(&h, buf, sizeof h);
        for (int i = 0; i < 8; i++) dim[i] = sw ? swap64(h.dim[i]) : h.dim[i];
        datatype = sw ? swap16(h.datatype) : h.datatype;
        vox_offset = (double)(sw ? swap64(h.vox_offset) : h.vox_offset);
        onefile = h.magic[1] == '+';
    }
    int64_t voxels;
    if (!dims_ok(dim, &voxels, why, why_len)) return 0;
    int nbyper = 0, swapsize;
    nifti_datatype_sizes(datatype, &nbyper, &swapsize);
    if (nbyper <= 0) {
        snprintf(why, why_len, "datatype %d is not a NIfTI datatype", datatype);
        return 0;
    }
    if (!scalar_type(datatype)) {
        snprintf(why, why_len, "datatype %d (%s) is not supported: a training volume is a real scalar (complex, RGB "
                 "and float128 are not read)", datatype, nifti_datatype_string(datatype));
        return 0;
    }
    /* the data starts after the header and its 4 extension bytes in a one-file NIfTI (.nii, .nii.gz); anywhere in
     * a pair's .img; always at a whole byte */
    const double first = onefile ? hdr_bytes + 4 : 0;
    if (!isfinite(vox_offset) || vox_offset != floor(vox_offset) || vox_offset < first || vox_offset > 1e12) {
        snprintf(why, why_len, "its header's vox_offset = %g is not where data can start (a whole byte position, at "
                 "least %g in a %s)", vox_offset, first, onefile ? "one-file NIfTI: after the header" : ".img");
        return 0;
    }
    const int64_t need = (int64_t)vox_offset + voxels * nbyper;
    if (onefile) return holds(path, "the file", need, why, why_len);
    /* a .hdr/.img pair: the data file beside it */
    char img[4096], what[4200];
    if (!swap_suffix(path, ".hdr", ".img", img, sizeof img)) {
        snprintf(why, why_len, "a two-file NIfTI header (magic ni1) not named .hdr: its .img cannot be found");
        return 0;
    }
    snprintf(what, sizeof what, "its data file %s", img);
    return holds(img, what, need, why, why_len);
}

/* The image's voxels as they are on disk, in native byte order: read here rather than by nifti_image_load, which
 * silently sets NaN and Inf floats to 0 (the caller must count them: data.nonfinite) and prints its own errors.
 * 1, or 0 and why; *data is malloc'd. */
static int load_voxels(const nifti_image *nim, void **data, char *why, size_t why_len) {
    const int64_t bytes = nim->nvox * nim->nbyper; /* < 2^31 voxels x 8 bytes: checked by the caller */
    gzFile g = gzopen(nim->iname, "rb"); /* a plain file as it is (its name said so: precheck) */
    if (!g) {
        snprintf(why, why_len, "its data file %s cannot be opened (%s)", nim->iname, strerror(errno));
        return 0;
    }
    char *buf = vx_malloc((size_t)(bytes ? bytes : 1));
    int64_t got = gzseek(g, (z_off_t)nim->iname_offset, SEEK_SET) == (z_off_t)nim->iname_offset ? 0 : -1;
    while (got >= 0 && got < bytes) {
        const int64_t want = bytes - got > (1 << 30) ? (1 << 30) : bytes - got;
        const int n = gzread(g, buf + got, (unsigned)want);
        if (n <= 0) break;
        got += n;
    }
    int err;
    gzerror(g, &err);
    if (got != bytes) {
        if (err != Z_OK && err != Z_BUF_ERROR)
            snprintf(why, why_len, "its gzip stream is damaged (zlib: %s)", zlib_reason(g, nim->iname));
        else
            snprintf(why, why_len, "its data is cut short: %lld of the %lld bytes of voxels are there%s",
                     (long long)(got > 0 ? got : 0), (long long)bytes, err == Z_BUF_ERROR ? " (the gzip stream ends "
                     "without its trailer)" : "");
        gzclose(g);
        free(buf);
        return 0;
    }
    /* the rest of a gzip stream is read too: its CRC, checked at the end, is what finds damage to the voxels */
    char tail[4096];
    while (gzread(g, tail, sizeof tail) > 0) {}
    gzerror(g, &err);
    if (err != Z_OK && err != Z_BUF_ERROR) {
        snprintf(why, why_len, "its gzip stream is damaged (zlib: %s)", zlib_reason(g, nim->iname));
        gzclose(g);
        free(buf);
        return 0;
    }
    gzclose(g);
    if (nim->swapsize > 1 && nim->byteorder != nifti_short_order())
        nifti_swap_Nbytes(nim->nvox, nim->swapsize, buf);
    *data = buf;
    return 1;
}

static int read_nifti(const char *path, int channels, int header_only, Volume *out, char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    nifti_set_debug_level(0); /* its own messages would duplicate ours, on stderr, unescaped */
    /* a pair named by its .img (a manifest row may): the header is the .hdr beside it, as libnifti finds it */
    char hdr[4096];
    if (swap_suffix(path, ".img", ".hdr", hdr, sizeof hdr) && access(hdr, F_OK) == 0) path = hdr;
    if (!precheck(path, why, why_len)) return 0;
    nifti_image *nim = nifti_image_read(path, 0);
    if (!nim) {
        snprintf(why, why_len, "not a readable NIfTI file (no valid NIfTI-1/2 header: wrong magic, truncated or "
                 "not gzip)");
        return 0;
    }
    int ok = 1;
    const int64_t nx = nim->nx, ny = nim->ny, nz = nim->nz, nt = nim->ndim >= 4 ? nim->nt : 1;
    /* each axis checked before any product: a hostile header's dims would overflow one (the fuzz target found it) */
    const int axes_ok = nx >= 1 && ny >= 1 && nz >= 1 && nt >= 1 && nx <= VOLUME_MAX_DIM && ny <= VOLUME_MAX_DIM &&
                        nz <= VOLUME_MAX_DIM && nt <= VOLUME_MAX_DIM;
    const int64_t voxels = axes_ok ? nx * ny * nz * nt : 0; /* < 2^48 */
    if (!axes_ok || voxels > VOLUME_MAX_VOXELS) {
        snprintf(why, why_len, "absurd dimensions %lld x %lld x %lld x %lld in its header (at most %d per axis, 2^31 "
                 "voxels)", (long long)nx, (long long)ny, (long long)nz, (long long)nt, VOLUME_MAX_DIM);
        ok = 0;
    } else if (nim->ndim > 4 || nim->nvox != voxels) {
        snprintf(why, why_len, "%lld dimensions: a training volume has 3, or 4 with the channels last", (long long)nim->ndim);
        ok = 0;
    } else if (nt != channels) {
        snprintf(why, why_len, "%lld channel(s) (its 4th dimension), the model takes %d (model.in_channels)",
                 (long long)nt, channels);
        ok = 0;
    } else if (!scalar_type(nim->datatype)) {
        snprintf(why, why_len, "datatype %s is not a real scalar (complex, RGB and float128 are not read)",
                 nifti_datatype_string(nim->datatype));
        ok = 0;
    }
    if (ok) out->d = (int)nz, out->h = (int)ny, out->w = (int)nx, out->c = (int)nt;
    void *data = NULL;
    if (ok && !header_only) ok = load_voxels(nim, &data, why, why_len);
    if (ok && !header_only) {
        const double slope = nim->scl_slope, inter = nim->scl_inter;
        const int scale = isfinite(slope) && slope != 0 && isfinite(inter);
        const int64_t plane = nx * ny * nz;
        out->v = vx_malloc((size_t)(plane * nt) * sizeof(float));
        /* NIfTI: x fastest, then y, z, t; ours: channels fastest */
        for (int64_t t = 0; t < nt; t++)
            for (int64_t i = 0; i < plane; i++) {
                double v = voxel(data, nim->datatype, t * plane + i, &ok);
                if (scale) v = v * slope + inter;
                /* beyond float32 (a float64 1e300, an int16 with scl_slope 1e38) is +-Inf, said so by the caller
                 * (volume_read counts it); a double out of float's range must not be converted as it is */
                out->v[i * nt + t] = fabs(v) <= FLT_MAX || isnan(v) ? (float)v : v > 0 ? INFINITY : -INFINITY;
            }
    }
    free(data);
    nifti_image_free(nim);
    if (!ok) free(out->v), memset(out, 0, sizeof *out);
    return ok;
}

static int claims_nifti(const char *path, int is_dir) { return !is_dir; }

const VolumeReader nifti_reader = {.name = "nifti", .claims = claims_nifti, .read = read_nifti};

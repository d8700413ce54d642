/* nifti_read.c: NIfTI-1 and NIfTI-2 volumes through libnifti (see reader.h).
 * libnifti prints its own complaints on stderr, unconditionally for some, and a hostile header sends it far: so
 * every header is checked here first (sizeof_hdr and magic, dims, datatype, and whether the file holds the data the
 * header promises), and libnifti reads only files it will read without a word. */
#include <math.h>
#include <nifti2_io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

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

/* Bytes the file at path holds once decompressed: its size, or for gzip its trailer's ISIZE (the size mod 2^32,
 * which also tells a gzip stream cut short, whose last 4 bytes are no trailer); -1 when it cannot be read. */
static int64_t content_bytes(const char *path, int64_t *mod32) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    *mod32 = -1;
    if (!ends_with(path, ".gz")) return st.st_size;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char t[4];
    const int ok = st.st_size >= 18 && fseek(f, -4, SEEK_END) == 0 && fread(t, 1, 4, f) == 4;
    fclose(f);
    if (!ok) return -1;
    *mod32 = (int64_t)t[0] | (int64_t)t[1] << 8 | (int64_t)t[2] << 16 | (int64_t)t[3] << 24;
    return -2; /* compressed: only the remainder mod 2^32 is known */
}

/* Whether `need` bytes (after any header) fit in file `path`: exactly, or modulo 2^32 for gzip. */
static int holds(const char *path, int64_t need, char *why, size_t why_len) {
    int64_t mod32;
    const int64_t have = content_bytes(path, &mod32);
    if (have == -1) {
        snprintf(why, why_len, "its data file %s cannot be read (gzip without a trailer: cut short?)", path);
        return 0;
    }
    if (have >= 0 ? have < need : mod32 != (need & 0xFFFFFFFFLL)) {
        snprintf(why, why_len, "its data is cut short: the header promises %lld bytes of it, the file has %s", (long long)need,
                 have >= 0 ? "fewer" : "another amount (the gzip stream is truncated or damaged)");
        return 0;
    }
    return 1;
}

/* The checks of the file header (see the file comment): 1, or 0 and why. */
static int precheck(const char *path, char *why, size_t why_len) {
    gzFile g = gzopen(path, "rb"); /* reads plain files as they are, too */
    if (!g) {
        snprintf(why, why_len, "cannot be opened");
        return 0;
    }
    unsigned char buf[540];
    const int n = gzread(g, buf, sizeof buf);
    gzclose(g);
    int32_t sz = 0;
    if (n >= 4) memcpy(&sz, buf, 4);
    const int v1 = sz == 348 || swap32(sz) == 348, v2 = sz == 540 || swap32(sz) == 540, sw = sz != 348 && sz != 540;
    if (!v1 && !v2) {
        snprintf(why, why_len, "not a readable NIfTI file (no valid NIfTI-1/2 header: sizeof_hdr is not 348 or 540, or "
                 "the file is empty or not gzip)");
        return 0;
    }
    if (n < (v1 ? 348 : 540)) {
        snprintf(why, why_len, "not a readable NIfTI file: its header is cut short (%d bytes)", n);
        return 0;
    }
    int64_t dim[8], vox_offset;
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
        vox_offset = isfinite(off) && off >= 0 && off < 1e12 ? (int64_t)off : -1;
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
        const int64_t off = sw ? swap64(h.vox_offset) : h.vox_offset;
        vox_offset = off >= 0 && off < (1LL << 40) ? off : -1;
        onefile = h.magic[1] == '+';
    }
    int64_t voxels = 1;
    for (int i = 1; i <= (dim[0] >= 1 && dim[0] <= 7 ? dim[0] : 0); i++) {
        if (dim[i] < 1 || dim[i] > VOLUME_MAX_DIM) voxels = VOLUME_MAX_VOXELS + 1;
        else if (voxels <= VOLUME_MAX_VOXELS) voxels *= dim[i];
    }
    if (dim[0] < 1 || dim[0] > 7 || voxels > VOLUME_MAX_VOXELS) {
        snprintf(why, why_len, "absurd dimensions in its header (dim[0] = %lld; at most %d per axis, 2^31 voxels)",
                 (long long)dim[0], VOLUME_MAX_DIM);
        return 0;
    }
    int nbyper = 0, swapsize;
    nifti_datatype_sizes(datatype, &nbyper, &swapsize);
    if (nbyper <= 0) {
        snprintf(why, why_len, "datatype %d is not a NIfTI datatype", datatype);
        return 0;
    }
    if (vox_offset < 0) {
        snprintf(why, why_len, "its header's vox_offset is not a valid file position");
        return 0;
    }
    if (onefile) return holds(path, vox_offset + voxels * nbyper, why, why_len);
    /* a .hdr/.img pair: the data file beside it */
    char img[4096];
    snprintf(img, sizeof img, "%s", path);
    char *dot = strstr(img, ".hdr");
    if (!dot) {
        snprintf(why, why_len, "a two-file NIfTI header not named .hdr: its .img cannot be found");
        return 0;
    }
    memcpy(dot, ".img", 4);
    return holds(img, vox_offset + voxels * nbyper, why, why_len);
}

static int read_nifti(const char *path, int channels, int header_only, Volume *out, char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    nifti_set_debug_level(0); /* its own messages would duplicate ours, on stderr, unescaped */
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
    if (ok) {
        out->d = (int)nz, out->h = (int)ny, out->w = (int)nx, out->c = (int)nt;
        if (!header_only && nifti_image_load(nim) != 0) {
            snprintf(why, why_len, "its data could not be read (the file is truncated or its gzip stream damaged)");
            ok = 0;
        }
    }
    if (ok && !header_only) {
        const double slope = nim->scl_slope, inter = nim->scl_inter;
        const int scale = isfinite(slope) && slope != 0 && isfinite(inter);
        const int64_t plane = nx * ny * nz;
        out->v = vx_malloc((size_t)(plane * nt) * sizeof(float));
        /* NIfTI: x fastest, then y, z, t; ours: channels fastest */
        for (int64_t t = 0; t < nt; t++)
            for (int64_t i = 0; i < plane; i++) {
                double v = voxel(nim->data, nim->datatype, t * plane + i, &ok);
                if (scale) v = v * slope + inter;
                out->v[i * nt + t] = (float)v;
            }
    }
    nifti_image_free(nim);
    if (!ok) free(out->v), memset(out, 0, sizeof *out);
    return ok;
}

static int claims_nifti(const char *path, int is_dir) { return !is_dir; }

const VolumeReader nifti_reader = {.name = "nifti", .claims = claims_nifti, .read = read_nifti};

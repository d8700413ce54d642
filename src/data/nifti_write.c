/* nifti_write.c: float32 NIfTI-1 files with a reference's header (see nifti_write.h). libnifti reads the reference's
 * header (already checked by nifti_read.c, which the volume was read through) and turns the edited image back into
 * a NIfTI-1 header; the bytes (and the gzip stream) are made here and written with core/outguard.h's out_write
 * (atomic; over nothing unless told), since libnifti's own writer writes in place. */
#include "data/nifti_write.h"

#include <nifti2_io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/outguard.h"
#include "core/util.h"

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

static int is_nifti(const char *path) {
    return path && (ends_with(path, ".nii") || ends_with(path, ".nii.gz") || ends_with(path, ".hdr") ||
                    ends_with(path, ".hdr.gz") || ends_with(path, ".img") || ends_with(path, ".img.gz"));
}

/* The header moved to grid g: world(new ijk) = A (step * ijk + off). The quaternion keeps its rotation, the voxel
 * sizes scale by step and the offset moves to the new corner; the sform is multiplied by the same index map. */
static void move_to_grid(nifti_image *nim, const NiftiGrid *g) {
    const double s = g->step, o[3] = {g->off[0], g->off[1], g->off[2]};
    if (nim->qform_code > 0) {
        const nifti_dmat44 q = nim->qto_xyz;
        nim->qoffset_x = q.m[0][0] * o[0] + q.m[0][1] * o[1] + q.m[0][2] * o[2] + q.m[0][3];
        nim->qoffset_y = q.m[1][0] * o[0] + q.m[1][1] * o[1] + q.m[1][2] * o[2] + q.m[1][3];
        nim->qoffset_z = q.m[2][0] * o[0] + q.m[2][1] * o[1] + q.m[2][2] * o[2] + q.m[2][3];
    }
    nim->dx *= s, nim->dy *= s, nim->dz *= s;
    nim->pixdim[1] = nim->dx, nim->pixdim[2] = nim->dy, nim->pixdim[3] = nim->dz;
    if (nim->qform_code > 0)
        nim->qto_xyz = nifti_quatern_to_dmat44(nim->quatern_b, nim->quatern_c, nim->quatern_d, nim->qoffset_x,
                                               nim->qoffset_y, nim->qoffset_z, nim->dx, nim->dy, nim->dz, nim->qfac);
    if (nim->sform_code > 0) {
        nifti_dmat44 map;
        memset(&map, 0, sizeof map);
        for (int a = 0; a < 3; a++) map.m[a][a] = s, map.m[a][3] = o[a];
        map.m[3][3] = 1;
        nim->sto_xyz = nifti_dmat44_mul(nim->sto_xyz, map);
    }
}

/* gzip of buf[n] (what a .nii.gz holds), malloc'd; NULL on zlib failure */
static unsigned char *gzip(const unsigned char *buf, size_t n, size_t *out_len) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return NULL;
    const size_t cap = deflateBound(&z, (uLong)n) + 64;
    unsigned char *out = vx_malloc(cap);
    z.next_in = (unsigned char *)buf;
    z.avail_in = (uInt)n; /* (a volume below 4 GiB: VOLUME_MAX_VOXELS x 4 bytes is checked by the caller's reader) */
    z.next_out = out;
    z.avail_out = (uInt)cap;
    const int rc = deflate(&z, Z_FINISH);
    *out_len = z.total_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(out);
        return NULL;
    }
    return out;
}

int nifti_write_float(const char *out_path, const char *like_path, const float *v, int d, int h, int w, int c,
                      const NiftiGrid *g, int overwrite, char *why, size_t why_len) {
    nifti_set_debug_level(0);
    nifti_image *nim = is_nifti(like_path) ? nifti_image_read(like_path, 0) : NULL;
    if (!nim) { /* a PNG stack has no geometry: 1 mm voxels at the origin */
        const int64_t dims[8] = {3, 1, 1, 1, 1, 1, 1, 1};
        nim = nifti_make_new_nim(dims, NIFTI_TYPE_FLOAT32, 0);
        if (!nim) {
            snprintf(why, why_len, "libnifti could not make a header");
            return 0;
        }
    }
    move_to_grid(nim, g);
    const int64_t dims[8] = {c > 1 ? 4 : 3, w, h, d, c, 1, 1, 1};
    for (int i = 0; i < 8; i++) nim->dim[i] = dims[i];
    nim->ndim = dims[0], nim->nx = w, nim->ny = h, nim->nz = d, nim->nt = c, nim->nu = nim->nv = nim->nw = 1;
    nim->nvox = (int64_t)w * h * d * c;
    nim->datatype = NIFTI_TYPE_FLOAT32;
    nim->nbyper = 4;
    nim->scl_slope = 1, nim->scl_inter = 0;
    nim->cal_min = nim->cal_max = 0;
    nim->nifti_type = NIFTI_FTYPE_NIFTI1_1;
    nim->iname_offset = 352;
    nifti_1_header hdr;
    const int ok = nifti_convert_nim2n1hdr(nim, &hdr) == 0;
    nifti_image_free(nim);
    if (!ok) {
        snprintf(why, why_len, "the reference's header does not fit NIfTI-1 (dims or values beyond its range)");
        return 0;
    }
    hdr.sizeof_hdr = 348;
    hdr.vox_offset = 352;
    memcpy(hdr.magic, "n+1\0", 4);
    const size_t vox = (size_t)w * h * d, bytes = 352 + vox * c * sizeof(float);
    unsigned char *buf = vx_calloc(1, bytes);
    memcpy(buf, &hdr, 348);
    float *out = (float *)(buf + 352); /* NIfTI's order: x fastest, channels (the 4th dimension) slowest */
    for (size_t i = 0; i < vox; i++)
        for (int k = 0; k < c; k++) out[(size_t)k * vox + i] = v[i * c + k];
    if (ends_with(out_path, ".gz")) {
        size_t zl;
        unsigned char *z = gzip(buf, bytes, &zl);
        free(buf);
        if (!z) {
            snprintf(why, why_len, "zlib could not compress it");
            return 0;
        }
        out_write(out_path, z, zl, overwrite, "output");
        free(z);
    } else {
        out_write(out_path, buf, bytes, overwrite, "output");
        free(buf);
    }
    return 1;
}

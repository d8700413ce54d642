/* volume.c: which reader a path needs (the first registered one that claims it), and freeing (see volume.h). */
#include "data/volume.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"

/* The readers, in the order they are asked. A new format is a reader file and a line here. */
static const VolumeReader *const READERS[] = {&png_stack_reader, &jpeg_reader, &png_image_reader, &nifti_reader};

static const VolumeReader *reader_for(const char *path, char *why, size_t why_len) {
    /* a FIFO, socket or device would block the reader forever (a FIFO's open waits for a writer): refused unopened */
    int is_dir;
    if (!fs_input_kind(path, 1, &is_dir, why, why_len)) {
        if (strcmp(why, "no such file") == 0)
            snprintf(why, why_len, "no such file (a relative path in a manifest is relative to the manifest's folder)");
        return NULL;
    }
    for (size_t i = 0; i < sizeof READERS / sizeof READERS[0]; i++)
        if (READERS[i]->claims(path, is_dir)) return READERS[i];
    snprintf(why, why_len, "no reader for this path (a NIfTI file, a folder of PNG slices, or one .jpg/.jpeg/.png image is expected)");
    return NULL;
}

/* Voxels of v that are not finite (NaN, +-Inf: in the file, or beyond float32 once scaled). */
static int64_t count_nonfinite(const Volume *v) {
    const int64_t n = (int64_t)v->d * v->h * v->w * v->c;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !isfinite(v->v[i]);
    return bad;
}

int volume_probe(const char *path, int channels, int dims[4], char *why, size_t why_len) {
    const VolumeReader *r = reader_for(path, why, why_len);
    Volume v;
    if (!r || !r->read(path, channels, 1, &v, why, why_len)) return 0;
    dims[0] = v.d, dims[1] = v.h, dims[2] = v.w, dims[3] = v.c;
    return 1;
}

int volume_read(const char *path, int channels, Volume *out, char *why, size_t why_len) {
    const VolumeReader *r = reader_for(path, why, why_len);
    if (!r || !r->read(path, channels, 0, out, why, why_len)) return 0;
    out->nonfinite = count_nonfinite(out);
    return 1;
}

int volume_read_at_least(const char *path, int channels, int min_h, int min_w, Volume *out, char *why,
                         size_t why_len) {
    const VolumeReader *r = reader_for(path, why, why_len);
    if (!r) return 0;
    const int ok = r->read_at_least ? r->read_at_least(path, channels, min_h, min_w, out, why, why_len)
                                    : r->read(path, channels, 0, out, why, why_len);
    if (!ok) return 0;
    out->nonfinite = count_nonfinite(out);
    return 1;
}

void volume_free(Volume *v) {
    free(v->v);
    memset(v, 0, sizeof *v);
}

/* volume.c: which reader a path needs (a folder: PNG slices; a file: NIfTI), and freeing (see volume.h). */
#include "data/volume.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int volume_probe(const char *path, int channels, int dims[4], char *why, size_t why_len) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, why_len, "no such file (a relative path in a manifest is relative to the manifest's folder)");
        return 0;
    }
    Volume v;
    const int ok = is_dir(path) ? volume_read_png_stack(path, channels, 1, &v, why, why_len)
                                : volume_read_nifti(path, channels, 1, &v, why, why_len);
    if (ok) dims[0] = v.d, dims[1] = v.h, dims[2] = v.w, dims[3] = v.c;
    return ok;
}

int volume_read(const char *path, int channels, Volume *out, char *why, size_t why_len) {
    return is_dir(path) ? volume_read_png_stack(path, channels, 0, out, why, why_len)
                        : volume_read_nifti(path, channels, 0, out, why, why_len);
}

void volume_free(Volume *v) {
    free(v->v);
    memset(v, 0, sizeof *v);
}

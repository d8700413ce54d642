/* volume.c: which reader a path needs (the first registered one that claims it), and freeing (see volume.h). */
#include "data/volume.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The readers, in the order they are asked. A new format is a reader file and a line here. */
static const VolumeReader *const READERS[] = {&png_stack_reader, &nifti_reader};

static const VolumeReader *reader_for(const char *path, char *why, size_t why_len) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, why_len, "no such file (a relative path in a manifest is relative to the manifest's folder)");
        return NULL;
    }
    for (size_t i = 0; i < sizeof READERS / sizeof READERS[0]; i++)
        if (READERS[i]->claims(path, S_ISDIR(st.st_mode))) return READERS[i];
    snprintf(why, why_len, "no reader for this path (a NIfTI file or a folder of PNG slices is expected)");
    return NULL;
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
    return r && r->read(path, channels, 0, out, why, why_len);
}

void volume_free(Volume *v) {
    free(v->v);
    memset(v, 0, sizeof *v);
}

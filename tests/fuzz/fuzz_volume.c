/* fuzz_volume.c: the volume readers on hostile files: the first byte picks the reader, the rest is the file.
 *   even: a NIfTI file (written as fuzz.nii, or fuzz.nii.gz when it starts with gzip's magic) through libnifti
 *   odd:  a folder of PNG slices, the rest cut at "SLICE" markers into up to 8 slices, through libpng
 * Every file must be read or refused with a reason (no exit, no crash, no read outside a buffer); a volume that is
 * read must have the dims its header promised (volume_probe). Files go to a private tmpfs folder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/volume.h"

static char dir[256];

static void put(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/dev/shm/vx_fuzz_volume_%d", (int)getpid());
        mkdir(dir, 0700);
    }
    if (size < 1) return 0;
    char path[512], why[512];
    Volume v;
    int dims[4];
    if ((data[0] & 1) == 0) {
        const int gz = size >= 3 && data[1] == 0x1f && data[2] == 0x8b;
        snprintf(path, sizeof path, "%s/fuzz.nii%s", dir, gz ? ".gz" : "");
        unlink(path);
        put(path, data + 1, size - 1);
    } else {
        snprintf(path, sizeof path, "%s/stack", dir);
        mkdir(path, 0700);
        for (int z = 0; z < 8; z++) { /* no slices left from the last input */
            char slice[600];
            snprintf(slice, sizeof slice, "%s/s%d.png", path, z);
            unlink(slice);
        }
        const uint8_t *p = data + 1, *end = data + size;
        for (int z = 0; z < 8 && p < end; z++) {
            const uint8_t *cut = memmem(p, (size_t)(end - p), "SLICE", 5);
            const uint8_t *stop = cut ? cut : end;
            char slice[600];
            snprintf(slice, sizeof slice, "%s/s%d.png", path, z);
            put(slice, p, (size_t)(stop - p));
            p = cut ? cut + 5 : end;
        }
    }
    const int probed = volume_probe(path, 1, dims, why, sizeof why);
    if (volume_read(path, 1, &v, why, sizeof why)) {
        if (!probed || v.d != dims[0] || v.h != dims[1] || v.w != dims[2] || v.c != dims[3]) abort();
        volume_free(&v);
    }
    return 0;
}

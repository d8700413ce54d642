/* fuzz_volume.c: the volume readers on hostile files: the first byte picks the reader, the rest is the file.
 *   even: a NIfTI file through libnifti and our own checks; bits 1-2 of the first byte name it:
 *         0 by its content (fuzz.nii.gz when it starts with gzip's magic, else fuzz.nii), 1 fuzz.nii and 2
 *         fuzz.nii.gz whatever the content (name and content disagree: issue 24's 8c), 3 a pair: the rest cut at the
 *         first "IMG!" into fuzz.hdr and fuzz.img (the .img missing when there is no marker)
 *   odd:  a folder of PNG slices, the rest cut at "SLICE" markers into up to 8 slices, through libpng; except
 *   3, 7 (the low two bits set): one 2-D image, the rest the file: 3 fuzz.jpg (libjpeg-turbo, read whole and at its
 *         1/8 scale), 7 fuzz.png (libpng)
 * Every file must be read or refused with a reason (no exit, no crash, no read outside a buffer, nothing of the
 * libraries' own on stderr); a volume that is read must have the dims its header promised (volume_probe) and count
 * at most all of its voxels as non-finite. Files go to a private tmpfs folder. */
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
        static const char *const NAMES[] = {"fuzz.nii", "fuzz.nii.gz", "fuzz.hdr", "fuzz.img"};
        for (int k = 0; k < 4; k++) { /* nothing left from the last input */
            snprintf(path, sizeof path, "%s/%s", dir, NAMES[k]);
            unlink(path);
        }
        const int naming = (data[0] >> 1) & 3, gz = size >= 3 && data[1] == 0x1f && data[2] == 0x8b;
        const uint8_t *p = data + 1, *end = data + size;
        if (naming == 3) {
            const uint8_t *cut = memmem(p, (size_t)(end - p), "IMG!", 4);
            snprintf(path, sizeof path, "%s/fuzz.img", dir);
            if (cut) put(path, cut + 4, (size_t)(end - cut - 4));
            snprintf(path, sizeof path, "%s/fuzz.hdr", dir);
            put(path, p, (size_t)((cut ? cut : end) - p));
        } else {
            snprintf(path, sizeof path, "%s/%s", dir, naming == 2 || (naming == 0 && gz) ? "fuzz.nii.gz" : "fuzz.nii");
            put(path, p, (size_t)(end - p));
        }
    } else if ((data[0] & 3) == 3) {
        snprintf(path, sizeof path, "%s/fuzz.%s", dir, data[0] & 4 ? "png" : "jpg");
        put(path, data + 1, size - 1);
        if (volume_read_at_least(path, 1, 1, 1, &v, why, sizeof why)) {
            if (v.d != 1 || v.h < 1 || v.w < 1 || v.c != 1) abort();
            volume_free(&v);
        }
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
        if (v.nonfinite < 0 || v.nonfinite > (int64_t)v.d * v.h * v.w * v.c) abort();
        volume_free(&v);
    }
    return 0;
}

/* reader.h: the interface every volume reader implements, and the type it produces. The readers (nifti_read.c,
 * png_stack.c, image2d_read.c) depend on this header alone; volume.c picks one from the registered list (volume_readers()), so
 * no reader knows of another and a new format is one file plus one line in that list.
 *   Volume      float32 [d][h][w][c] (NDHWC without N): w = NIfTI's x (fastest), h = y, d = z
 * Every failure is a reason in `why` (the caller decides: exit 2 or skip with data.skip_bad), never a crash, and
 * dimensions are checked from the header before any data is read. */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    float *v;
    int d, h, w, c;
    int64_t nonfinite; /* voxels that are NaN or +-Inf as read (volume_read counts them; data.nonfinite decides) */
} Volume;

#define VOLUME_MAX_DIM 4096            /* per axis: beyond any scanner */
#define VOLUME_MAX_VOXELS (1LL << 31)  /* 8 GiB of float32: more is not a training volume */

typedef struct {
    const char *name; /* "nifti", "png-stack": what errors and logs call it */
    /* 1 when this reader reads `path`; is_dir tells whether it is a folder (the caller has stat'ed it) */
    int (*claims)(const char *path, int is_dir);
    /* Reads the volume at path (header_only: only its dims, out->v left NULL); `channels` is the model's
     * in_channels, which a 4th dimension must match. 1, or 0 and why. */
    int (*read)(const char *path, int channels, int header_only, Volume *out, char *why, size_t why_len);
    /* Optional: reads it at the smallest size the format decodes cheaply that is still at least min_h x min_w (a
     * JPEG's DCT scaling), for a run that resizes anyway; NULL: read at full size. 1, or 0 and why. */
    int (*read_at_least)(const char *path, int channels, int min_h, int min_w, Volume *out, char *why,
                         size_t why_len);
} VolumeReader;

extern const VolumeReader nifti_reader;     /* nifti_read.c: .nii, .nii.gz, .hdr/.img */
extern const VolumeReader png_stack_reader; /* png_stack.c: a folder of 2-D PNG slices */
extern const VolumeReader jpeg_reader;      /* image2d_read.c: one .jpg/.jpeg image, depth 1 */
extern const VolumeReader png_image_reader; /* image2d_read.c: one .png image, depth 1 */

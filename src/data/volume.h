/* volume.h: a decoded medical volume from a path, through the registered readers (reader.h).
 *   NIfTI-1/2   .nii, .nii.gz, .hdr/.img through libnifti (Debian's libnifti2-dev): every scalar datatype, either
 *               byte order (libnifti swaps), scl_slope/scl_inter applied in double as the NIfTI standard and
 *               nibabel do (a slope of 0 or non-finite means none); a 4th dimension of size c is the channels
 *   PNG stack   a folder of 2-D PNG slices, 8 or 16 bit grey, sorted naturally (slice2 before slice10), through
 *               libpng; each slice is one z
 *   2-D image   one .jpg/.jpeg (libjpeg-turbo) or .png (libpng) file: depth 1, grey or RGB (image2d_read.c)
 * Every failure is a reason in `why` (the caller decides: exit 2 or skip with data.skip_bad), never a crash, and
 * dimensions are checked from the header before any data is read. */
#pragma once
#include "data/reader.h"

/* The dims of the volume at path (a NIfTI file, or a folder of PNG slices) from its header(s) alone: 1, or 0 and
 * why. `channels` is the model's in_channels, which a 4th dimension must match. */
int volume_probe(const char *path, int channels, int dims[4], char *why, size_t why_len);
/* Reads it whole; 1, or 0 and why. out->nonfinite counts its NaN and +-Inf voxels (the caller's policy decides:
 * data.nonfinite). Anything but a folder or a regular file (a FIFO, a socket, a device) is refused unopened. */
int volume_read(const char *path, int channels, Volume *out, char *why, size_t why_len);
/* The same, at the smallest size the format decodes cheaply that is still at least min_h x min_w (a JPEG's 1/2,
 * 1/4, 1/8 DCT scaling; other formats: full size): for a run that resizes (data.resize) anyway. */
int volume_read_at_least(const char *path, int channels, int min_h, int min_w, Volume *out, char *why,
                         size_t why_len);
void volume_free(Volume *v);

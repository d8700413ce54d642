/* nifti_write.h: float32 volumes written as NIfTI-1 (.nii or .nii.gz), what predict writes: the header of the volume
 * they were computed from kept (its qform and sform with their codes, units, intent, description; not its
 * extensions), with the dims, datatype (float32, no scaling) and the voxel-to-world transform of the new grid.
 * Written whole, atomically (core/outguard.h's out_write): a crash leaves no torn file, and without `overwrite` no
 * existing file is replaced (one there is refused, exit 2). */
#pragma once
#include <stddef.h>

/* The new grid in the reference's voxel indices: voxel (i, j, k) (x, y, z) of the written volume is voxel
 * (step*i + off[0], step*j + off[1], step*k + off[2]) of the reference: a crop (step 1) or a grid a factor `step`
 * coarser (a latent) starting at a crop's corner. */
typedef struct {
    int off[3]; /* x, y, z */
    int step;
} NiftiGrid;

/* Writes v [d][h][w][c] (channels fastest, our layout) to out_path (.nii.gz compressed), its header taken from the
 * NIfTI file like_path (NULL, or a PNG stack: an identity affine with 1 mm voxels) moved to grid g. 1, or 0 and why. */
int nifti_write_float(const char *out_path, const char *like_path, const float *v, int d, int h, int w, int c,
                      const NiftiGrid *g, int overwrite, char *why, size_t why_len);

/* transform.h: what a decoded volume goes through before training sees it (the CPU reference; flips and rotations
 * are kernels/augment/augment.h, which a GPU run applies after the upload):
 *   normalize  per volume and channel: "percentile" clips to the clip_low..clip_high percentiles (linear
 *              interpolation between order statistics, numpy.percentile's default) and scales to [0, 1];
 *              "zscore" subtracts the mean and divides by the standard deviation (population); "none" leaves it
 *   crop/pad   a window of the model's input size at offsets per axis: random in training, centred in
 *              validation; an axis shorter than the window is padded (data.pad) with the volume's minimum, the
 *              volume centred in it (or placed at random in training), else the volume is refused
 * Every random choice is a function of (seed, sample index): the same sample is the same crop on every run. */
#pragma once
#include <stdint.h>

#include "data/volume.h"

void transform_normalize(Volume *v, const char *how, double clip_low, double clip_high);
/* The smallest value of v (the padding value). */
float transform_min(const Volume *v);
/* Offsets of a size[0..2] window (d, h, w) into v: centred when bits is NULL, else uniform from bits[axis].
 * Negative offsets mean padding before the volume. */
void transform_window(const Volume *v, const int size[3], const uint64_t *bits, int off[3]);
/* out [size0][size1][size2][c] = v's window at off, pad outside v. */
void transform_crop(const Volume *v, const int off[3], const int size[3], float pad, float *out);

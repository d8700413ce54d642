/* phantom.h: the built-in training data: a synthetic 3D phantom generator.
 * A phantom volume is a pure function of (seed, index): random soft-edged ellipsoids of different intensities
 * under a smooth multiplicative bias field, plus Gaussian noise; values roughly in [0, 1]. Because a volume is
 * fully determined by its global sample index, the loader's position is one number, counted in samples (not
 * batches), and a run resumes exactly where it stopped whatever the batch size before and after. */
#pragma once
#include <stdint.h>


/* Writes volume `index` of stream `seed` into out [d][h][w][c] (NDHWC without N). */
void phantom_generate(uint64_t seed, uint64_t index, int d, int h, int w, int c, float noise, float *out);
/* Writes volumes first .. first+count-1 of stream `seed`, of size[3] x c and with noise `noise` (data.noise), into
 * out [count][D][H][W][C]. */
void phantom_batch(uint64_t seed, const int size[3], int c, float noise, int count, int64_t first, float *out);

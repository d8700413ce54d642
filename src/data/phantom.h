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

/* The labels of volume `index` of stream `seed` for a prediction head's task (model.task: "classification",
 * "multilabel", "regression", "survival"), a pure function of the phantom's shape, so a classifier trained on the
 * phantoms has something to learn and a run shows learning without data. With the body's size s in [0, 1) (its
 * mean radius, mapped through that mean's own distribution, so s is uniform), its brightness b in [0, 1), and their
 * score u = the CDF of s + b at s + b (uniform on [0, 1) too):
 *   classification  out[0] = the class, floor(num_classes * u): balanced classes
 *   multilabel      out[j] = 1 when the phantom has more than j structures inside the body, else 0
 *   regression      out[j] = u, b, (structures)/7, then again
 *   survival        out[0] = time, out[1] = event: an exponential event time of hazard exp(4 (u - 0.5)) censored by an
 *                   independent one (about 30% censored), both drawn by hash from (seed, index)
 * Writes num_classes values, or 1 (classification) or 2 (survival). */
void phantom_labels(uint64_t seed, uint64_t index, const char *task, int num_classes, float *out);

/* Chest films (data.phantom chest, phantom_chest.c): a frontal radiograph's lungs, heart and trunk with findings
 * (opacity, cardiomegaly, effusion, nodule, then again) each present with probability 0.4 and drawn when present;
 * image `index` of stream `seed` into out [h][w][c] (a film of depth 1), and its labels out[j] = 1 when finding j is
 * present (multilabel, num_classes of them). */
void phantom_chest_generate(uint64_t seed, uint64_t index, int h, int w, int c, float noise, int num_findings,
                            float *out);
void phantom_chest_labels(uint64_t seed, uint64_t index, int num_classes, float *out);

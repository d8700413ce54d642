/* dataset.h: the training sample stream and the validation volumes of a run, from any source (data.source):
 *   phantom   the built-in generator: sample i is phantom(seed, i), validation volume j is phantom(seed ^ salt, j)
 *   csv, dir  volumes listed by a manifest (manifest.h), read by volume.h, normalised and cropped by transform.h,
 *             flipped and rotated by kernels/augment/augment.h (on the loader's threads, or on the GPU after the upload)
 * Training sample i is a pure function of (seed, i, the file list): epoch e = i / E covers E samples, drawn in a
 * seeded order from the epoch's window of E files; each sample's crop and augmentation come from its own hash. So a
 * sample is the same whatever batch, rank or resume it falls in, and caching changes only the speed.
 *
 * The cache (MONAI's CacheDataset and SmartCacheDataset): data.cache_rate of the training files, E of them, form
 * the window an epoch draws from, decoded and normalised once and kept; data.replace_rate of the window is replaced
 * each epoch (the window slides along a seeded order of all files), the newcomers decoded ahead by a background
 * thread; cache_rate 0 keeps nothing and decodes every sample (an epoch is then every file). Each rank keeps its own
 * cache of the window (data.cache_max_gib bounds it), so that ranks draw the same samples as one process would.
 * Every file's header is read when the dataset opens: a missing file, a wrong magic, absurd dimensions or a volume
 * smaller than the input without data.pad is refused then (exit 2, naming the file and its manifest row), or, with
 * data.skip_bad, left out with a warning and counted; a file whose data turns out damaged later is treated alike:
 * each bad file is warned of once, then skipped unread (bad_reads counts the samples that met it). A decoded volume
 * with NaN or +-Inf voxels is refused, zeroed or left out as data.nonfinite says. */
#pragma once
#include <stdint.h>

#include "core/config_data.h"

typedef struct Dataset Dataset;

typedef struct {
    long hits, misses;   /* samples whose volume was in the cache / had to be decoded for them */
    long decoded;        /* volumes decoded, by the loader and ahead of time */
    long evicted;        /* volumes dropped from the cache when the window moved on */
    long skipped;        /* bad volumes left out (data.skip_bad, data.nonfinite=skip), each warned of once */
    long bad_reads;      /* samples that met a volume known to be bad and moved on to the next one */
    long epochs_entered; /* windows the cache has served */
} DatasetStats;

/* Opens the data section's source for volumes of `channels` channels (model.in_channels) cropped to `size`
 * (model.input_size, until dataset_set_size), each at most `max_size` (the largest of the run's stages: what padding
 * is checked against); `seed` (train.seed) seeds the file order, the validation draw, crops, augmentation and the
 * phantoms. Prints what it found when verbose. Exits 2 on bad input. */
Dataset *dataset_open(const DataConfig *cfg, int64_t seed, int channels, const int size[3], const int max_size[3],
                      int verbose);
void dataset_close(Dataset *ds);
/* Decodes every file this rank checks, on `threads` threads, before the run writes anything: on rank 0 every
 * validation file, and every world-th training file from `rank` (together the ranks check each training file
 * once). Damage past a header (a gzip stream, a PNG's CRC), non-finite voxels (data.nonfinite) and anything else a
 * decode finds is then refused (exit 2, naming the file and row) or, with data.skip_bad, warned of once and left
 * out, before a run directory exists. Decoded training volumes of the first cache window are kept. No-op for the
 * phantoms. */
void dataset_check_files(Dataset *ds, int rank, int world, int threads, int verbose);
/* The crop size from now on (a stage's input size). */
void dataset_set_size(Dataset *ds, const int size[3]);
/* Samples in one epoch; 0 for the phantoms (endless). */
int64_t dataset_epoch_samples(const Dataset *ds);
/* Validation volumes available; -1 for the phantoms (as many as asked). */
int dataset_val_count(const Dataset *ds);
/* Training sample i at the current size into out [d][h][w][c]; `augment`: apply its flips and rotation here
 * (the CPU path), else leave them to the caller (augment code below, applied on the GPU); its labels into labels
 * [dataset_labels(ds)] when both are set (labels may be NULL); its X-ray views into views [dataset_views(ds)] when
 * both are set, flipped and rotated as its volume is (always here: whichever side augments the volume). Thread-safe.
 * 0 when a volume turned out unusable without data.skip_bad: dataset_error says which, for the main thread to
 * report. */
int dataset_train_sample(Dataset *ds, int64_t i, int augment, float *out, float *labels, float *views);
/* A prediction head's labels from now on: model.task and model.num_classes (see phantom.h for the phantoms'; files
 * take them from the manifest's data.label_columns). Exits 2 naming the file, row and column of a missing or bad
 * label. Returns the floats per sample: 1 (classification), 2 (survival: time, event) or num_classes. */
int dataset_set_labels(Dataset *ds, const char *task, int num_classes, int verbose);
/* The X-ray views given beside each CT from now on (data.view_columns, views.h; "" = none: returns 0), each
 * img x img: the columns are looked up, every usable entry's two PNG headers read, and a missing column is one line
 * (exit 2); a missing cell or file, a view of another size than img, or a volume of another size than the input
 * (the views show the whole volume: it is neither cropped nor padded) is refused like a bad volume: one line naming
 * the file, row and column, exit 2, or with data.skip_bad the entry is left out with a warning. Their pixels are
 * decoded with the volume (dataset_check_files, the cache). Returns the floats per sample, 2 img^2. */
int dataset_set_views(Dataset *ds, int img, int verbose);
/* View floats per sample, [2][img][img] (0 when none are given). */
int dataset_views(const Dataset *ds);
/* Label floats per sample (0 before dataset_set_labels). */
int dataset_labels(const Dataset *ds);
/* A manifest's training split, per label: positives (>= 0.5) and negatives (in [0, 0.5)) into pos, neg
 * [dataset_labels(ds)], masked cells in neither; 0 (nothing written) for the phantoms. */
int dataset_label_counts(const Dataset *ds, long *pos, long *neg);
/* Validation volume j's labels (after dataset_set_labels). */
void dataset_val_labels(const Dataset *ds, int j, float *labels);
/* The first such failure's one-line message, or NULL. */
const char *dataset_error(Dataset *ds);
/* The augmentation code of sample i (augment.h), 0 when the source is not augmented. */
uint32_t dataset_augment_code(const Dataset *ds, int64_t i);
/* Validation volume j at the current size, centred, not augmented (and its given views into views when both are
 * set): 1, or 0 when it turned out unusable and data.skip_bad left it out (the caller skips it). */
int dataset_val_sample(Dataset *ds, int j, float *out, float *views);
/* The most host memory the cache will hold (the run's memory plan counts it). */
double dataset_cache_bytes(const Dataset *ds);
DatasetStats dataset_stats(Dataset *ds);

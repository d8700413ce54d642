/* views.h: a CT's two X-ray views given as files beside it (data.view_columns, model.family vit3d_diffusion): the
 * CSV manifest names two columns, the AP view's and the lateral view's; each row's two cells are paths of grey PNGs
 * (relative to the CSV's folder unless absolute), laid out as drr.h renders a volume [d][h][w]:
 *   AP (view 0)       the projection along h: PNG row i over d (row 0 = the first slice), column j over w
 *   lateral (view 1)  the projection along w: PNG row i over d, column j over h
 * Pixels are scaled to [0, 1] by the depth's full scale: 8-bit / 255, 16-bit / 65535 (1, 2, 4-bit: widened to 8
 * by libpng, / 255), what 1 - exp(-line integral) spans. Each PNG must be exactly xray.img_size square.
 * The dataset (dataset.c) reads their headers when the views are asked for, decodes them with the volume (the cache
 * keeps them together) and applies the volume's augmentation to them (views_augment), so a sample's views are a pure
 * function of (seed, index) like its volume. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/config_data.h"
#include "data/manifest.h"

/* The two column names of data.view_columns ("ap,lateral", checked by config_validate) into names[2][len]. */
void views_columns(const DataConfig *cfg, char names[2][CONFIG_STR]);
/* The path a view cell names, as the manifest resolves its path column (relative to the CSV's folder); caller
 * frees. */
char *views_path(const Manifest *man, const char *cell);
/* Reads the PNG at path as one view of img x img into out (NULL: only its header is checked): 1, or 0 and why
 * (no such file, not a grey PNG, damaged, another size than img x img). */
int views_read(const char *path, int img, float *out, char *why, size_t why_len);
/* A sample's views [2][img][img] after the augmentation `code` (augment.h) of its volume: the views of the flipped
 * and rotated volume are the given ones flipped, and swapped by an odd number of 90-degree turns in the (h, w)
 * plane (which needs h == w), since each ray's sum only changes order. in and out must not overlap. */
void views_augment(int img, uint32_t code, const float *in, float *out);

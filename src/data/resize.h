/* resize.h: resizing a 2-D image (a volume of depth 1) in the loader, before normalisation and the crop/pad window
 * (transform.h), as a chest X-ray pipeline does to its films (data.resize):
 *   none   as decoded
 *   fit    the whole image inside the model's input, aspect kept: one side equals the input's, the other is at most
 *          its; the window then pads the rest (data.pad 1) - a letterbox
 *   fill   the input covered, aspect kept: one side equals the input's, the other is at least its; the window then
 *          crops the rest (centred in validation, at random in training)
 * The resampling is bilinear with antialiasing, the weights of torch.nn.functional.interpolate(mode="bilinear",
 * antialias=True, align_corners=False) (which are PIL's and torchvision's Resize on tensors): when shrinking, the
 * triangle filter widens by the factor, so every input pixel counts, not only the four nearest. */
#pragma once
#include "data/volume.h"

/* The size (oh, ow) an h x w image takes under `mode` for an input of H x W (none: h x w). */
void resize_target(const char *mode, int h, int w, int H, int W, int *oh, int *ow);
/* out = in (depth 1, any channels) resampled to oh x ow; out->v is malloc'd, the caller frees it (volume_free). */
void resize_image(const Volume *in, int oh, int ow, Volume *out);
/* Reads the image at path, whose header says it is h x w, for a run with data.resize `mode` and an H x W input: the
 * size it takes (resize_target, from the header's size, so every read of it agrees), the read at least that large
 * (a JPEG's DCT scaling), then resized (v->nonfinite kept); an image that keeps its size is volume_read's. What the
 * dataset reads a file with, from the sizes it probed. 1, or 0 and why. */
int resize_read_sized(const char *path, int channels, const char *mode, int h, int w, int H, int W, Volume *out,
                      char *why, size_t why_len);
/* The same, the header read first (volume_probe); with "none", volume_read. What predict reads a file with. */
int resize_read(const char *path, int channels, const char *mode, int H, int W, Volume *out, char *why,
                size_t why_len);

/* affine.h: the small random affine of 2-D training images (data.affine [degrees, scale, shift]: what a chest X-ray
 * pipeline's RandomAffine does, since flips and 90-degree turns are wrong for chest films): a rotation by an angle in
 * [-degrees, degrees], a zoom in [1 - scale, 1 + scale] and a shift in [-shift, shift] of each side, about the
 * image's centre, drawn per sample from (seed, sample index) so a sample is the same image on every run.
 *   out(p) = in(A^-1 (p - c - t) + c), p and c in pixel coordinates (centres at i + 0.5, c the image's centre),
 *   A = scale * R(angle); bilinear between the four nearest pixels; a neighbour outside the image reads `pad` (the
 *   image's minimum, as the window's padding): torch.nn.functional.grid_sample(bilinear, align_corners=False) on
 *   (in - pad) with zero padding, plus pad (tests/integration/test_image2d.py checks it so). */
#pragma once
#include <stdint.h>

typedef struct {
    double angle;  /* radians, counter-clockwise in (x right, y down) image coordinates */
    double scale;  /* > 1 enlarges */
    double tx, ty; /* pixels */
} AffineParams;

/* The parameters of sample `index` of stream `seed` within bounds [degrees, scale, shift] */
AffineParams affine_draw(uint64_t seed, uint64_t index, const double bounds[3], int h, int w);
/* out [h][w][c] = in [h][w][c] under p (in and out distinct) */
void affine_apply(const float *in, int h, int w, int c, const AffineParams *p, float pad, float *out);

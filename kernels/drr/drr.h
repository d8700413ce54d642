/* drr.h: a digitally reconstructed radiograph (DRR) of a volume by a parallel-beam projection of attenuation
 * (Beer-Lambert), forward and backward (the projection loss's gradient flows into the predicted volume).
 *   volume  x [n][d][h][w] of shape.dtype (NDHWC with one channel); attenuation mu = mu_scale * x (linear, no clamp)
 *   view 0  (AP) projects along h: the line integrals over (d, w):  L[b][u][v] = spacing * sum_k mu[b][u][k][v]
 *   view 1  (lateral) projects along w: over (d, h):                L[b][u][v] = spacing * sum_k mu[b][u][v][k]
 *   rows u come from d, columns v from w (view 0) or h (view 1); L is [n][d][cols], cols = w or h
 *   resampled  Lr[b][i][j] = bilinear(L[b]) at [img][img], PyTorch's F.interpolate(mode='bilinear',
 *              align_corners=False): per axis (in -> out) src = (in/out)*(dst + 0.5) - 0.5, clamped below at 0;
 *              i0 = floor(src), i1 = min(i0 + 1, in - 1), weights 1 - (src - i0) and src - i0
 *   image      drr[b][i][j] = 1 - exp(-Lr[b][i][j])  (the fraction of the beam absorbed: 0 for air, towards 1 for bone),
 *              float32 [n][img][img]
 * The line integral is resampled, then Beer-Lambert applied: bilinear resampling commutes with the sum along the
 * ray, so Lr is the integral along the ray through the detector pixel's centre of the bilinearly interpolated volume.
 *   backward   g = dimg * exp(-Lr);  dL = the transpose of the resampling applied to g;
 *              dx[b][u][k][v] (view 0; [b][u][v][k] view 1) = [beta*dx +] mu_scale * spacing * dL[b][u][v]
 *              (from x, whose line integrals it recomputes: nothing saved from the forward)
 * backproject  the inverse lifting of both views of each sample, the conditioning channels of xray.backproject:
 *              views [n][2][img][img] float32 (AP then lateral, as the forward renders them) -> out [n][d][h][w][2]
 *              (storage dtype): per view the image's line integral L = -log(1 - min(img, 1 - 1e-6)) bilinearly
 *              resampled from [img][img] to [d][cols] (the same index map, in -> out), divided by mu_scale, and
 *              given to every voxel on its ray: channel 0 the AP ray's (d, w), channel 1 the lateral ray's (d, h).
 *              For a view rendered with spacing 1/along (the model's DRR) that is the mean of x along the ray; the
 *              shape's view and spacing are not read. No backward: the views are data.
 * Sums in fixed order (no atomics): each ray's sum in double along the ray, each resampled value and each gathered
 * transpose entry in a fixed order; the bits do not depend on the thread count. beta 0 overwrites dx without reading
 * it, 1 adds to it. CPU: float32 storage; CUDA: every storage type (float math, ray sums in double). */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, d, h, w;  /* the volume */
    int view;        /* 0: along h (AP, image over d x w); 1: along w (lateral, image over d x h) */
    int img;         /* the image's side */
    float mu_scale;  /* attenuation per unit of x */
    float spacing;   /* the step along the ray (voxel size) */
    DType dtype;     /* storage of x and dx; the image and its gradient are float32 */
} DrrShape;

/* The op's sub-table (kernels/backend/ops.def): be->drr->... */
enum { DRR_FORWARD, DRR_BACKWARD, DRR_BACKPROJECT }; /* its functions, for supports() */
typedef struct DrrOps {
    OpHead head;
    void (*forward)(const DrrShape *s, const void *x, float *img);
    void (*backward)(const DrrShape *s, const void *x, const float *dimg, void *dx, float beta);
    void (*backproject)(const DrrShape *s, const float *views, void *out);
} DrrOps;
extern const DrrOps drr_ops_cpu;
extern const DrrOps drr_ops_cuda; /* CUDA builds only */

static inline long drr_volume_count(const DrrShape *s) { return (long)s->n * s->d * s->h * s->w; }
static inline long drr_image_count(const DrrShape *s) { return (long)s->n * s->img * s->img; }
/* the image value backproject clamps to (the line integral at most -log(1e-6) = 13.8) */
#define DRR_IMAGE_MAX (1.0f - 1e-6f)
/* the line integrals' columns: w (view 0) or h (view 1) */
static inline int drr_cols(const DrrShape *s) { return s->view == 0 ? s->w : s->h; }
/* "" when s is valid, else what is wrong (one line) */
static inline const char *drr_shape_error(const DrrShape *s) {
    if (s->n < 0 || s->d < 1 || s->h < 1 || s->w < 1) return "empty or negative volume sizes";
    if (s->view != 0 && s->view != 1) return "a view other than 0 (AP) or 1 (lateral)";
    if (s->img < 1) return "an image side below 1";
    return "";
}

#ifdef __cplusplus
}
#endif

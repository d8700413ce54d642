/* evaluate.h: the held-out volumes of a run and what rank 0 does with them: validation (L1 and PSNR of their
 * deterministic reconstructions, z = mu) and the mid-slice pictures TensorBoard shows. The volumes come from the
 * dataset's validation set at the current stage's size (the phantoms: as many as asked; files: at most the held-out
 * files there are, bad ones left out with data.skip_bad).
 * A SIGINT/SIGTERM (core/stop_signal.h) ends each of these loops after the batch it is in, so that a stop is
 * honoured within a batch's forward however many volumes there are: what they return is then incomplete, and the
 * caller (trainer_validate) logs none of it. */
#pragma once
#include "data/dataset.h"
#include "graph/model.h"

typedef struct {
    float *vols; /* [count][D][H][W][C] */
    float *labels; /* the dataset's labels, [count][labels] (NULL when it has none: ae3d) */
    float *views;  /* the X-ray views given beside each CT, [count][2][img][img] (NULL: none, the model renders) */
    int count;   /* held: the larger of val and shown, at most what the dataset has */
    int shown;   /* pictured: the first output.image_samples when output.image_every is on */
    int val;     /* how many are validated */
} HeldOut;

typedef struct {
    float l1, psnr;
} ValResult;

/* A head's validation figures (metrics.h), NaN where the task has none */
typedef struct {
    float loss, accuracy, auroc, cindex;
    float *auroc_class; /* classification and multilabel: each class's (label's) AUROC, [classes]; the caller frees */
    int classes;        /* 0 for the other tasks */
    int n;
} HeadValResult;

/* The first volumes of ds's validation set at m's input size: `val_samples` (train.val_samples) to validate on and
 * `shown` (output.image_samples, 0 when output.image_every is off) to picture, as many as there are. */
void heldout_build(HeldOut *h, Dataset *ds, const Model *m, int val_samples, int shown);
void heldout_free(HeldOut *h);
/* Reconstructions of `count` host volumes (deterministic forward, z = mu), in micro-batches of the model's size;
 * host memory shaped like vols (caller frees). views: their given X-ray views (HeldOut.views; NULL: none). */
float *evaluate_reconstruct(Model *m, const float *vols, const float *views, int count);
/* L1 and PSNR (peak 1.0) of the reconstructions of the first h->val volumes. */
ValResult evaluate(Model *m, const HeldOut *h);
/* vit3d_diffusion's validation: the diffusion loss and the projection loss, means over the first h->val volumes
 * (every one: a partial last batch's samples too, its padding left out), each at the timestep and noise its held-out
 * index keys (VAL_FIRST_SAMPLE + index): the same draws at every validation and any batch, so the figures compare
 * along the run. */
typedef struct {
    float loss, projection;
    int n;
} DiffValResult;
DiffValResult evaluate_diffusion(Model *m, const HeldOut *h);

/* A head's figures over the first h->val volumes, in evaluation mode (running statistics, no dropout), from their
 * logits: the task's loss (the mean over every volume, whatever the batch; survival's Cox loss over all of them at
 * once), then from the probabilities predict writes accuracy (classification) and AUROC, macro and per class or
 * label (classification, multilabel), and from the risk scores Harrell's C (survival); see metrics.h. */
HeadValResult evaluate_head(Model *m, const HeldOut *h);

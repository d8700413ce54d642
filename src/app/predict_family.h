/* predict_family.h: what `voxscale predict` makes of a model's outputs, one table entry per family (predict_family.c):
 *   resnet3d  a row of predictions.csv per volume: the class probabilities (softmax) and the predicted class, the
 *             labels' probabilities (sigmoid), the regression targets, or the survival risk score
 *   ae3d      the reconstruction and the latent mean as NIfTI files beside predictions.csv (the input's header and
 *             affine kept, moved to the crop and, for the latent, to its coarser grid), and a row with the
 *             reconstruction's L1 and PSNR against the input crop (the trainer's validation figures) and the names
 *   vit3d_diffusion  a volume sampled by DDIM (diffusion_sample.h) from the two views of the input crop (rendered
 *             with training's DRR), as NIfTI on the crop's grid, and a row with the mean squared error of the
 *             sample's DRRs against those views, the same for the constant volume at the crop's mean intensity (the
 *             baseline), and both volumes' MSE against the crop
 * The driver (cmd_predict.c) lists, checks, decodes, crops and batches the volumes, runs the evaluation forward, then
 * hands each batch to its family's `batch`; each rank's rows are summed into rank 0's table, which writes the CSV
 * through `header` and `format`. A new family is one entry here. */
#pragma once
#include <stddef.h>
#include <stdio.h>

#include "core/config_base.h"
#include "graph/model.h"

typedef struct {
    const char *path;        /* the input volume, as listed */
    char stem[CONFIG_STR];   /* what its output files are named after (unique in the run) */
    int off[3];              /* the crop's corner in the volume (d, h, w; negative: padding before it) */
    int index;               /* its place in the input list (what keys a sampler's noise) */
} PredictItem;

typedef struct {
    Model *m;                /* after model_forward(m, 0) on the batch (none for a family that samples) */
    const char *out_dir;
    int overwrite;           /* --overwrite: files there may be replaced (cmd_predict.c checked them first) */
    const PredictItem *items; /* the batch's volumes */
    int used;                /* how many of the batch's slots hold one */
    const float *inputs;     /* their normalised crops, host memory [used][D][H][W][C] */
} PredictBatch;

typedef struct {
    const char *family; /* model.family */
    /* floats of a volume's row (what the ranks gather) */
    int (*row_floats)(const Model *m);
    /* predictions.csv's header after "path" (",prob_0,...") */
    void (*header)(const Model *m, FILE *f);
    /* rows[used][row_floats] from the batch's outputs, and the batch's files; 1, or 0 and why (a file not
     * written), or -1 and why (a volume's outputs not finite: nothing of the batch written) */
    int (*batch)(const PredictBatch *b, float *rows, char *why, size_t why_len);
    /* one row's fields after the path (",0.25,...") */
    void (*format)(const Model *m, const PredictItem *it, const float *row, FILE *f);
    /* 1: `batch` runs the model itself (a sampler, many forwards from its own x_t), so the driver runs no forward */
    int samples;
    /* what `batch` writes per volume: <stem> followed by each of these (NULL-terminated), checked before anything is
     * written */
    const char *const *files;
} PredictFamily;

/* The entry of model m's family (every family has one). */
const PredictFamily *predict_family(const Model *m);

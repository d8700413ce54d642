/* config_data.h: the config's "data" section: where training and validation volumes come from and how they are
 * read, normalised, cropped, augmented and cached (what data/ implements). */
#pragma once
#include "core/config_base.h"

typedef struct {
    char source[CONFIG_STR]; /* "phantom" | "csv" | "dir" */
    char phantom[CONFIG_STR]; /* source phantom: "ellipsoids" (volumes) | "chest" (2-D films, phantom.h) */
    double noise;            /* the phantoms' Gaussian noise */
    int prefetch;            /* batches the loader prepares ahead */
    char csv[CONFIG_STR];    /* source csv: the manifest */
    char dir[CONFIG_STR];    /* source dir: the folder */
    char glob[CONFIG_STR];   /* source dir: which entries are volumes */
    char path_column[CONFIG_STR], split_column[CONFIG_STR];
    char label_columns[CONFIG_STR]; /* resnet3d: the label columns, comma-separated ("": the task's default) */
    char uncertain[CONFIG_STR];     /* multilabel: what a -1 cell becomes (data/label_policy.h) */
    char blank[CONFIG_STR];         /* multilabel: what an empty cell becomes */
    char view_columns[CONFIG_STR];  /* vit3d_diffusion: the two DRR PNG columns "ap,lateral" ("": rendered) */
    double val_fraction;     /* held out by a seeded draw when there is no split column */
    char normalize[CONFIG_STR]; /* "percentile" | "zscore" | "none" */
    char resize[CONFIG_STR];    /* 2-D images: "none" | "fit" | "fill" (data/resize.h) */
    double clip_low, clip_high; /* percentiles of the percentile normalisation */
    int pad;                 /* pad volumes smaller than the input (else: an error) */
    int augment;             /* random flips and 90-degree rotations in training */
    ConfigList affine;       /* 2-D films: [degrees, scale, shift] of a random affine in training ([]: none) */
    double cache_rate, replace_rate, cache_max_gib;
    int workers;             /* decoding threads; 0 = from the core count */
    int skip_bad;            /* skip unreadable volumes with a warning instead of exit 2 */
    char nonfinite[CONFIG_STR]; /* "error" | "zero" | "skip": volumes with NaN or Inf voxels */
} DataConfig;

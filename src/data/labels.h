/* labels.h: a prediction head's labels from a CSV manifest's columns (data.label_columns; by default "label" for
 * classification, "time,event" for survival; multilabel and regression name theirs, one per output), checked as
 * they are read: a missing column, an empty, non-numeric or non-finite value, a class outside 0..num_classes-1, a
 * negative time, an event other than 0 or 1, a multilabel value outside [0, 1] is one line naming the file, row and
 * column, exit 2 (before the run directory is taken). */
#pragma once
#include "core/config_data.h"
#include "data/manifest.h"

/* Label floats per sample of a task: 1 (classification), 2 (survival) or num_classes. */
int labels_per_sample(const char *task, int num_classes);
/* Every entry's labels, [man->n][labels_per_sample] (caller frees), read and checked as above. */
float *labels_read(const Manifest *man, const DataConfig *cfg, const char *task, int num_classes);
/* The sets as a run would learn and validate on them: a survival training set of censored rows only is exit 2 (the
 * Cox loss and its gradient would be 0: a run that trains nothing); a validation set that leaves a figure undefined
 * (every row censored; one class only; a multilabel label without both values) is one warning, when verbose. train and
 * val: the entries' indices. */
void labels_check_sets(const float *labels, const int *train, int n_train, const int *val, int n_val, const char *task,
                       int num_classes, const char *origin, int verbose);
/* One line for rank 0 about the labels of the entries listed in idx[n] (the training files): the count per class
 * (classification), positives per label (multilabel), events and censored samples (survival), the range
 * (regression). */
void labels_describe(const float *labels, const int *idx, int n, const char *task, int num_classes, const char *what);
/* CheXpert's competition labels (Atelectasis, Cardiomegaly, Consolidation, Edema, Pleural Effusion): their indices
 * among data.label_columns into idx[5] and 5 when all five are label columns, else 0. */
int labels_competition(const DataConfig *cfg, int idx[5]);

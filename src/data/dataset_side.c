/* dataset_side.c: what each sample carries beside its volume (see dataset.h): a prediction head's labels (from the
 * manifest's columns, or the phantoms' own) and the X-ray views given beside each CT (data.view_columns: two PNGs per
 * row, checked when they are set). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "data/dataset_state.h"
#include "data/labels.h"
#include "data/phantom.h"
#include "data/views.h"

/* ---- labels ----------------------------------------------------------------------------------------------- */

int dataset_set_labels(Dataset *ds, const char *task, int num_classes, int verbose) {
    snprintf(ds->task, sizeof ds->task, "%s", task);
    ds->num_classes = num_classes;
    ds->n_labels = labels_per_sample(task, num_classes);
    if (!ds->files) return ds->n_labels; /* the phantoms': a function of each one's shape (phantom.h) */
    if (!ds->man.header)
        vx_usage_error("%s: model.task %s needs labels, which a folder source (data.source dir) does not have; list "
                       "the volumes and their labels in a CSV manifest (data.source csv)", ds->man.origin, task);
    free(ds->entry_labels);
    ds->entry_labels = labels_read(&ds->man, &ds->cfg, task, num_classes);
    labels_check_sets(ds->entry_labels, ds->train, ds->n_train, ds->val, ds->n_val, task, num_classes, ds->man.origin,
                      verbose);
    if (verbose) {
        labels_describe(ds->entry_labels, ds->train, ds->n_train, task, num_classes, "training files");
        labels_describe(ds->entry_labels, ds->val, ds->n_val, task, num_classes, "validation files");
    }
    return ds->n_labels;
}

int dataset_labels(const Dataset *ds) { return ds->n_labels; }

int dataset_label_counts(const Dataset *ds, long *pos, long *neg) {
    if (!ds->files || !ds->entry_labels) return 0;
    const int L = ds->n_labels;
    for (int c = 0; c < L; c++) pos[c] = neg[c] = 0;
    for (int i = 0; i < ds->n_train; i++)
        for (int c = 0; c < L; c++) {
            const float v = ds->entry_labels[(long)ds->train[i] * L + c];
            if (v >= 0.5f) pos[c]++;
            else if (v >= 0.0f) neg[c]++; /* a masked cell is neither */
        }
    return L;
}

void dataset_val_labels(const Dataset *ds, int j, float *labels) {
    if (!ds->files) {
        dataset_phantom_labels(ds, (uint64_t)ds->seed ^ VAL_SEED_SALT, (uint64_t)j, labels);
        return;
    }
    memcpy(labels, ds->entry_labels + (size_t)ds->val[j] * ds->n_labels, (size_t)ds->n_labels * sizeof(float));
}

/* ---- the X-ray views given beside each CT ------------------------------------------------------------------ */

int dataset_set_views(Dataset *ds, int img, int verbose) {
    if (!ds->cfg.view_columns[0]) return 0;
    VX_CHECK(ds->files && ds->man.header, "data.view_columns without a CSV manifest (config_validate refuses it)");
    views_columns(&ds->cfg, ds->view_col);
    int col[2];
    for (int k = 0; k < 2; k++)
        if ((col[k] = manifest_column(&ds->man, ds->view_col[k])) < 0)
            vx_usage_error("%s:1: no column \"%s\" in the header row; data.view_columns names the %s view's column",
                           ds->man.origin, ds->view_col[k], k ? "lateral" : "AP");
    ds->view_img = img;
    ds->view_file = vx_calloc(2 * (size_t)ds->man.n, sizeof(char *));
    /* every usable entry's views, their headers read now: a missing cell or file and a view of the wrong size are
     * refused before anything is decoded (or, with data.skip_bad, the entry is left out like a bad volume) */
    for (int list = 0; list < 2; list++)
        for (int i = 0; i < (list ? ds->n_val : ds->n_train); i++) {
            const int m = list ? ds->val[i] : ds->train[i], *d = ds->dims + 3 * m;
            char why[512];
            if (d[0] != ds->size[0] || d[1] != ds->size[1] || d[2] != ds->size[2]) {
                snprintf(why, sizeof why, "%d x %d x %d is not the input %d x %d x %d: with data.view_columns a volume "
                         "is read whole, as its views show it (a crop or padding would no longer match them)", d[0],
                         d[1], d[2], ds->size[0], ds->size[1], ds->size[2]);
                dataset_bad_file(ds, m, NULL, -1, why, NULL, 0, 1);
                continue;
            }
            for (int k = 0; k < 2 && !(ds->noted[m] & NOTED_BAD); k++) {
                const char *cell = manifest_field(&ds->man, m, col[k]);
                if (!cell[0]) {
                    snprintf(why, sizeof why, "no X-ray view in column \"%s\" (data.view_columns): each CT needs its "
                             "two views", ds->view_col[k]);
                    dataset_bad_file(ds, m, NULL, -1, why, NULL, 0, 1);
                    continue;
                }
                ds->view_file[2 * m + k] = views_path(&ds->man, cell);
                if (!views_read(ds->view_file[2 * m + k], img, NULL, why, sizeof why))
                    dataset_bad_file(ds, m, ds->view_file[2 * m + k], k, why, NULL, 0, 1);
            }
        }
    ds->vol_bytes += 2.0 * img * img * sizeof(float); /* cached with their volume */
    dataset_check_cache_bound(ds);
    if (verbose)
        vx_log("data: X-ray views given beside each CT (columns \"%s\" AP, \"%s\" lateral): %d x %d PNGs\n",
               ds->view_col[0], ds->view_col[1], img, img);
    return dataset_views(ds);
}



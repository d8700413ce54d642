/* labels.c: a head's labels from a manifest's columns, checked as they are read (see labels.h). */
#include "data/labels.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "data/label_policy.h"

/* CheXpert's 14 observations in its CSVs' column order: data.label_columns "chexpert" names them */
static const char CHEXPERT_COLUMNS[] =
    "No Finding,Enlarged Cardiomediastinum,Cardiomegaly,Lung Opacity,Lung Lesion,Edema,Consolidation,Pneumonia,"
    "Atelectasis,Pneumothorax,Pleural Effusion,Pleural Other,Fracture,Support Devices";

int labels_per_sample(const char *task, int num_classes) {
    return strcmp(task, "classification") == 0 ? 1 : strcmp(task, "survival") == 0 ? 2 : num_classes;
}

/* The label columns' names into names[want] (pointers into buf): data.label_columns split at commas, or the task's
 * default. */
/* data.label_columns' names (chexpert: CheXpert's 14), split at commas into names[max] (pointers into buf, leading
 * spaces taken off); returns how many it names, beyond max too. */
static int split_columns(const DataConfig *cfg, char *buf, size_t len, char **names, int max) {
    snprintf(buf, len, "%s", strcmp(cfg->label_columns, "chexpert") == 0 ? CHEXPERT_COLUMNS : cfg->label_columns);
    int n = 0;
    for (char *p = buf, *tok; (tok = strsep(&p, ",")) != NULL; n++) {
        while (*tok == ' ') tok++;
        if (n < max) names[n] = tok;
    }
    return n;
}

static void column_names(const DataConfig *cfg, const char *task, int want, char *buf, size_t len, char **names,
                         const char *origin) {
    DataConfig named = *cfg; /* with the task's default columns where data.label_columns is "" */
    if (!named.label_columns[0]) {
        const char *given = strcmp(task, "classification") == 0 ? "label" : strcmp(task, "survival") == 0 ? "time,event"
                                                                                                          : NULL;
        if (!given)
            vx_usage_error("%s: model.task %s reads %d label column(s) from the manifest: name them, in order, with "
                           "data.label_columns (e.g. \"a,b,c\")", origin, task, want);
        snprintf(named.label_columns, sizeof named.label_columns, "%s", given);
    }
    const int n = split_columns(&named, buf, len, names, want);
    if (n != want)
        vx_usage_error("%s: data.label_columns \"%s\" names %d column(s); model.task %s with model.num_classes %d reads "
                       "%d", origin, strcmp(named.label_columns, "chexpert") == 0 ? CHEXPERT_COLUMNS : named.label_columns,
                       n, task, want == 2 && strcmp(task, "survival") == 0 ? 1 : want, want);
}

/* One value of the CSV as a finite number within float32's range (labels are held and trained in float32: 1e39
 * became inf, and a regression run "diverged"), or exit 2 naming where it is. */
static double number(const Manifest *man, int i, const char *col, const char *text) {
    char *end;
    errno = 0;
    const double v = strtod(text, &end);
    while (*end == ' ') end++;
    if (!text[0] || *end || errno == ERANGE || !isfinite(v))
        vx_usage_error("%s:%d: column \"%s\" is \"%s\", not a finite number; give every row its label (or leave the "
                       "row out)", man->origin, man->e[i].row, col, text);
    if (fabs(v) > FLT_MAX)
        vx_usage_error("%s:%d: column \"%s\" is \"%s\", beyond float32's range (+-%.4g), in which labels are held "
                       "and trained; give it in other units", man->origin, man->e[i].row, col, text, (double)FLT_MAX);
    return v;
}

float *labels_read(const Manifest *man, const DataConfig *cfg, const char *task, int num_classes) {
    const int L = labels_per_sample(task, num_classes);
    char buf[CONFIG_STR], *names[CONFIG_MAX_LIST] = {0};
    if (L > CONFIG_MAX_LIST)
        vx_usage_error("%s: model.task %s with %d outputs reads more label columns than %d", man->origin, task, L,
                       CONFIG_MAX_LIST);
    column_names(cfg, task, L, buf, sizeof buf, names, man->origin);
    int col[CONFIG_MAX_LIST];
    for (int k = 0; k < L; k++)
        if ((col[k] = manifest_column(man, names[k])) < 0)
            vx_usage_error("%s:1: no label column \"%s\" in the header row (model.task %s reads it; "
                           "data.label_columns names the columns)", man->origin, names[k], task);
    float *out = vx_malloc((size_t)(man->n ? man->n : 1) * L * sizeof(float));
    const int cls = strcmp(task, "classification") == 0, surv = strcmp(task, "survival") == 0,
              multi = strcmp(task, "multilabel") == 0;
    LabelPolicy uncertain[CONFIG_MAX_LIST];
    const LabelPolicy blank = label_blank_policy(cfg);
    for (int k = 0; k < L && multi; k++) uncertain[k] = label_uncertain_policy(cfg, names[k], names, L, man->origin);
    for (int i = 0; i < man->n; i++)
        for (int k = 0; k < L; k++) {
            const char *text = manifest_field(man, i, col[k]);
            if (multi) { /* CheXpert's cells: empty (not mentioned) and -1 (uncertain) by data.blank, data.uncertain */
                const char *t = text;
                while (*t == ' ') t++;
                if (!*t && blank != LABEL_KEEP_ERROR) {
                    out[(long)i * L + k] = label_policy_value(blank);
                    continue;
                }
                if (!*t)
                    vx_usage_error("%s:%d: column \"%s\" is empty: set data.blank zero (not mentioned = negative) or "
                                   "ignore (masked), or give every row its label", man->origin, man->e[i].row,
                                   names[k]);
            }
            const double v = number(man, i, names[k], text);
            if (multi && v == -1.0) {
                if (uncertain[k] == LABEL_KEEP_ERROR)
                    vx_usage_error("%s:%d: column \"%s\" is %s (uncertain): choose data.uncertain u_ignore, u_zeros or "
                                   "u_ones (for all labels, or per label: \"%s=u_ones,u_zeros\")", man->origin,
                                   man->e[i].row, names[k], text, names[k]);
                out[(long)i * L + k] = label_policy_value(uncertain[k]);
                continue;
            }
            if (cls && (v != floor(v) || v < 0 || v >= num_classes))
                vx_usage_error("%s:%d: column \"%s\" is \"%s\": a class index 0..%d is expected (model.num_classes "
                               "%d)", man->origin, man->e[i].row, names[k], text, num_classes - 1, num_classes);
            if (surv && k == 0 && v < 0)
                vx_usage_error("%s:%d: column \"%s\" is \"%s\": a survival time is not negative", man->origin,
                               man->e[i].row, names[k], text);
            if (surv && k == 1 && v != 0 && v != 1)
                vx_usage_error("%s:%d: column \"%s\" is \"%s\": the event is 1 (observed) or 0 (censored)", man->origin,
                               man->e[i].row, names[k], text);
            if (multi && (v < 0 || v > 1))
                vx_usage_error("%s:%d: column \"%s\" is \"%s\": a multilabel target is 0 or 1 (or between; -1 is "
                               "uncertain: data.uncertain)",
                               man->origin, man->e[i].row, names[k], text);
            out[(long)i * L + k] = (float)v;
        }
    return out;
}

void labels_describe(const float *labels, const int *idx, int n, const char *task, int num_classes, const char *what) {
    const int L = labels_per_sample(task, num_classes);
    char line[1024] = "";
    size_t at = 0;
#define ADD(...) (at += (size_t)snprintf(line + at, at < sizeof line ? sizeof line - at : 0, __VA_ARGS__))
    if (strcmp(task, "classification") == 0 || strcmp(task, "multilabel") == 0) {
        const int cls = strcmp(task, "classification") == 0;
        ADD("%s per %s:", cls ? "samples" : "positives", cls ? "class" : "label");
        for (int c = 0; c < num_classes && at < sizeof line - 32; c++) {
            long count = 0;
            long masked = 0;
            for (int i = 0; i < n; i++) {
                count += cls ? labels[(long)idx[i] * L] == (float)c : labels[(long)idx[i] * L + c] >= 0.5f;
                masked += !cls && labels[(long)idx[i] * L + c] < 0.0f;
            }
            if (masked) ADD(" %d: %ld (%ld masked)", c, count, masked);
            else ADD(" %d: %ld", c, count);
        }
    } else if (strcmp(task, "survival") == 0) {
        long events = 0;
        for (int i = 0; i < n; i++) events += labels[(long)idx[i] * 2 + 1] == 1.0f;
        ADD("%ld events, %ld censored", events, (long)n - events);
    } else {
        double lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < L; k++) {
                const double v = labels[(long)idx[i] * L + k];
                lo = v < lo ? v : lo, hi = v > hi ? v : hi;
            }
        ADD("targets in [%g, %g]", lo, hi);
    }
#undef ADD
    vx_log("labels (%s, %d %s): %s\n", task, n, what, line);
}

void labels_check_sets(const float *labels, const int *train, int n_train, const int *val, int n_val, const char *task,
                       int num_classes, const char *origin, int verbose) {
    const int L = labels_per_sample(task, num_classes);
    if (strcmp(task, "survival") == 0) {
        long events = 0;
        for (int i = 0; i < n_train; i++) events += labels[(long)train[i] * 2 + 1] == 1.0f;
        if (n_train > 0 && events == 0)
            vx_usage_error("%s: every one of the %d training rows is censored (event 0): the Cox loss has no death to "
                           "rank the others against, so it and its gradient are 0 and the run would train nothing; "
                           "give rows with observed events (event 1)", origin, n_train);
        events = 0;
        for (int i = 0; i < n_val; i++) events += labels[(long)val[i] * 2 + 1] == 1.0f;
        if (verbose && n_val > 0 && events == 0)
            vx_log("warning: %s: every one of the %d validation rows is censored: Harrell's C has no comparable pair "
                   "and is not logged, and the validation loss is 0 (so train.best_metric cindex keeps no best.ckpt)\n",
                   origin, n_val);
        return;
    }
    if (!verbose || n_val == 0 || strcmp(task, "regression") == 0) return;
    if (strcmp(task, "classification") == 0) {
        int one = 1;
        for (int i = 1; i < n_val; i++) one &= labels[(long)val[i]] == labels[(long)val[0]];
        if (one)
            vx_log("warning: %s: every one of the %d validation rows is of class %g: AUROC needs both positives and "
                   "negatives of a class and is not logged, and accuracy says little\n", origin, n_val,
                   (double)labels[(long)val[0]]);
        return;
    }
    char list[256] = ""; /* multilabel: the labels whose validation rows are all positive or all negative */
    int n = 0;
    for (int c = 0; c < L; c++) {
        int pos = 0, known = 0; /* masked cells (data.uncertain u_ignore, data.blank ignore) are neither */
        for (int i = 0; i < n_val; i++) {
            const float v = labels[(long)val[i] * L + c];
            pos += v >= 0.5f, known += v >= 0.0f;
        }
        if (pos == 0 || pos == known) {
            if (strlen(list) < sizeof list - 16)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", n ? ", " : "", c);
            n++;
        }
    }
    if (n)
        vx_log("warning: %s: in the %d validation rows label(s) %s are all positive or all negative: their AUROC is "
               "undefined and not logged%s\n", origin, n_val, list, n == L ? " (so is the macro AUROC)" : "");
}

int labels_competition(const DataConfig *cfg, int idx[5]) {
    static const char *const FIVE[5] = {"Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion"};
    char buf[CONFIG_STR], *names[CONFIG_MAX_LIST];
    const int n = split_columns(cfg, buf, sizeof buf, names, CONFIG_MAX_LIST);
    int found = 0;
    for (int k = 0; k < n && k < CONFIG_MAX_LIST; k++)
        for (int f = 0; f < 5; f++)
            if (strcmp(names[k], FIVE[f]) == 0) idx[f] = k, found |= 1 << f;
    return found == 31 ? 5 : 0;
}

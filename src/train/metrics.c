/* metrics.c: accuracy, AUROC and Harrell's C over a validation set (see metrics.h). */
#include "train/metrics.h"

#include <math.h>
#include <stdlib.h>

#include "core/util.h"

double metric_accuracy(const float *scores, const float *labels, int n, int k) {
    if (n <= 0) return NAN;
    int right = 0;
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int c = 1; c < k; c++)
            if (scores[(long)i * k + c] > scores[(long)i * k + best]) best = c;
        right += best == (int)lrintf(labels[i]);
    }
    return (double)right / n;
}

typedef struct {
    float score;
    int positive;
} Scored;

static int by_score(const void *a, const void *b) {
    const float x = ((const Scored *)a)->score, y = ((const Scored *)b)->score;
    return x < y ? -1 : x > y;
}

double metric_auroc(const float *scores, const float *labels, int n, int stride) {
    Scored *s = vx_malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    long pos = 0;
    for (int i = 0; i < n; i++) {
        s[i] = (Scored){scores[(long)i * stride], labels[(long)i * stride] >= 0.5f};
        pos += s[i].positive;
    }
    const long neg = n - pos;
    if (pos == 0 || neg == 0) {
        free(s);
        return NAN;
    }
    qsort(s, (size_t)n, sizeof *s, by_score);
    /* the positives' rank sum, tied scores sharing their average rank (1-based) */
    double rank_sum = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && s[j].score == s[i].score) j++;
        const double avg = (i + 1 + j) / 2.0;
        for (int q = i; q < j; q++)
            if (s[q].positive) rank_sum += avg;
        i = j;
    }
    free(s);
    return (rank_sum - pos * (pos + 1) / 2.0) / ((double)pos * neg);
}

double metric_auroc_ovr(const float *scores, const float *labels, int n, int k, int multilabel, double *per_class) {
    float *onehot = NULL;
    if (!multilabel) { /* the class index as one 0/1 column per class */
        onehot = vx_calloc((size_t)(n > 0 ? n : 1) * k, sizeof(float));
        for (int i = 0; i < n; i++) {
            const int c = (int)lrintf(labels[i]);
            if (c >= 0 && c < k) onehot[(long)i * k + c] = 1.0f;
        }
        labels = onehot;
    }
    double sum = 0;
    int defined = 0;
    for (int c = 0; c < k; c++) {
        const double a = metric_auroc(scores + c, labels + c, n, k);
        if (per_class) per_class[c] = a;
        if (!isnan(a)) sum += a, defined++;
    }
    free(onehot);
    return defined ? sum / defined : NAN;
}

double metric_cindex(const float *risk, const float *target, int n) {
    double concordant = 0;
    long comparable = 0;
    for (int i = 0; i < n; i++) {
        if (target[2 * i + 1] < 0.5f) continue; /* censored: not the earlier of a comparable pair */
        const float ti = target[2 * i];
        for (int j = 0; j < n; j++) {
            if (!(target[2 * j] > ti)) continue;
            comparable++;
            concordant += risk[i] > risk[j] ? 1.0 : risk[i] == risk[j] ? 0.5 : 0.0;
        }
    }
    return comparable ? concordant / comparable : NAN;
}

double metric_cox_loss(const float *risk, const float *target, int n) {
    double loss = 0;
    int events = 0;
    for (int i = 0; i < n; i++) {
        if (target[2 * i + 1] < 0.5f) continue;
        double at_risk = 0; /* sum of exp(risk) over j with t_j >= t_i, in a stable shifted form */
        double top = -INFINITY;
        for (int j = 0; j < n; j++)
            if (target[2 * j] >= target[2 * i] && risk[j] > top) top = risk[j];
        for (int j = 0; j < n; j++)
            if (target[2 * j] >= target[2 * i]) at_risk += exp((double)risk[j] - top);
        loss -= (double)risk[i] - (top + log(at_risk));
        events++;
    }
    return events ? loss / events : 0;
}

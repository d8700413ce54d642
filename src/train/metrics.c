/* metrics.c: a head's validation figures over a whole validation set, as the reference libraries compute them (see
 * metrics.h). */
#include "train/metrics.h"

#include <math.h>
#include <stdlib.h>

#include "core/util.h"
#include "head_loss/head_loss_math.h"

static int any_nan(const float *v, long n, long stride) {
    for (long i = 0; i < n; i++)
        if (isnan(v[i * stride])) return 1;
    return 0;
}

void metric_probabilities(const float *logits, int n, int k, int multilabel, float *probs) {
    for (long i = 0; i < n; i++) {
        const float *o = logits + i * k;
        float *p = probs + i * k;
        if (multilabel) {
            for (int c = 0; c < k; c++) p[c] = (float)head_sigmoid((double)o[c]);
            continue;
        }
        double mx = o[0], sum = 0; /* (a NaN logit makes every probability of its row NaN) */
        for (int c = 1; c < k; c++) mx = o[c] > mx ? o[c] : mx;
        for (int c = 0; c < k; c++) sum += exp((double)o[c] - mx);
        for (int c = 0; c < k; c++) p[c] = (float)(exp((double)o[c] - mx) / sum);
    }
}

double metric_accuracy(const float *scores, const float *labels, int n, int k) {
    if (n <= 0 || any_nan(scores, (long)n * k, 1)) return NAN;
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
    /* NaN orders with nothing: sorted, it would leave the ranks undefined (and a tie loop that compares a NaN with
     * itself never advances), so it makes the figure NaN first */
    if (any_nan(scores, n, stride)) return NAN;
    Scored *s = vx_malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    long pos = 0;
    const int all = n;
    n = 0;
    for (int i = 0; i < all; i++) {
        const float t = labels[(long)i * stride];
        if (t < 0.0f) continue; /* a masked cell (data.uncertain u_ignore, data.blank ignore): not ranked */
        s[n] = (Scored){scores[(long)i * stride], t >= 0.5f};
        pos += s[n++].positive;
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
        int j = i + 1;
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
    double *per = per_class ? per_class : vx_malloc((size_t)k * sizeof *per);
    double sum = 0;
    int defined = 0, nan_score = 0;
    for (int c = 0; c < k; c++) {
        per[c] = metric_auroc(scores + c, labels + c, n, k);
        if (!isnan(per[c])) sum += per[c], defined++;
        nan_score |= any_nan(scores + c, n, k);
    }
    /* a NaN score makes the set's figure NaN too, not the mean of the columns without one */
    const double macro = nan_score ? NAN : !multilabel && k == 2 ? per[1] : defined ? sum / defined : NAN;
    if (per != per_class) free(per);
    free(onehot);
    return macro;
}

double metric_cindex(const float *risk, const float *target, int n) {
    if (any_nan(risk, n, 1)) return NAN;
    double concordant = 0;
    long comparable = 0;
    for (int i = 0; i < n; i++) {
        if (target[2 * i + 1] < 0.5f) continue; /* censored: not the earlier of a comparable pair */
        const float ti = target[2 * i];
        for (int j = 0; j < n; j++) {
            const float tj = target[2 * j];
            if (!(tj > ti || (tj == ti && target[2 * j + 1] < 0.5f))) continue;
            comparable++;
            concordant += risk[i] > risk[j] ? 1.0 : risk[i] == risk[j] ? 0.5 : 0.0;
        }
    }
    return comparable ? concordant / comparable : NAN;
}

double metric_cox_loss(const float *risk, const float *target, int n) {
    if (any_nan(risk, n, 1)) return NAN;
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

double metric_cross_entropy(const float *logits, const float *labels, int n, int k, const float *weight) {
    double loss = 0, weights = 0;
    for (long i = 0; i < n; i++) {
        const float *o = logits + i * k;
        const int y = head_class(labels[i], k);
        if (y < 0) return NAN; /* (the manifest's labels are checked when read) */
        double mx = o[0], sum = 0;
        for (int c = 1; c < k; c++) mx = o[c] > mx ? o[c] : mx;
        for (int c = 0; c < k; c++) sum += exp((double)o[c] - mx);
        const double w = weight ? (double)weight[y] : 1.0;
        loss += w * (mx + log(sum) - (double)o[y]);
        weights += w;
    }
    return n > 0 ? loss / weights : NAN;
}

double metric_bce(const float *logits, const float *labels, int n, int k, const float *pos_weight) {
    double loss = 0;
    for (long i = 0; i < (long)n * k; i++)
        loss += head_bce((double)logits[i], (double)labels[i], pos_weight ? (double)pos_weight[i % k] : 1.0);
    return n > 0 && k > 0 ? loss / ((double)n * k) : NAN;
}

double metric_mse(const float *pred, const float *target, long count) {
    double se = 0;
    for (long i = 0; i < count; i++) {
        const double d = (double)pred[i] - (double)target[i];
        se += d * d;
    }
    return count > 0 ? se / (double)count : NAN;
}

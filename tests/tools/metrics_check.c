/* metrics_check.c: the validation metrics of src/train/metrics.c on numbers given on stdin ("nan" reads as NaN), for
 * tests/integration/test_metrics.py to hold against scikit-learn, lifelines and PyTorch.
 *   metrics_check auroc N K MULTI      then N*K scores and N (MULTI 0: class indices) or N*K labels: prints the
 *                                      macro AUROC, then each class's
 *   metrics_check accuracy N K         then N*K scores and N labels
 *   metrics_check cindex N             then N risks and N (time, event) pairs
 *   metrics_check cox N                then the same: the Cox loss (Breslow)
 *   metrics_check probs N K MULTI      then N*K logits: the probabilities (softmax, or sigmoid for MULTI 1)
 *   metrics_check ce N K W             then N*K logits, N class indices and, for W 1, K class weights
 *   metrics_check bce N K W            then N*K logits, N*K 0/1 labels and, for W 1, K positive weights
 *   metrics_check mse N                then N predictions and N targets */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/metrics.h"

static float *read_floats(long n) {
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (long i = 0; i < n; i++)
        if (scanf("%f", &v[i]) != 1) {
            fprintf(stderr, "metrics_check: expected %ld numbers on stdin\n", n);
            exit(2);
        }
    return v;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: metrics_check auroc|accuracy|cindex|cox|probs|ce|bce|mse N [K [MULTI|W]]\n");
        return 2;
    }
    const char *what = argv[1];
    const int n = atoi(argv[2]), k = argc > 3 ? atoi(argv[3]) : 1, flag = argc > 4 && atoi(argv[4]);
    if (strcmp(what, "auroc") == 0) {
        float *s = read_floats((long)n * k), *l = read_floats(flag ? (long)n * k : n);
        double *per = malloc((size_t)k * sizeof(double));
        printf("%.17g", metric_auroc_ovr(s, l, n, k, flag, per));
        for (int c = 0; c < k; c++) printf(" %.17g", per[c]);
        printf("\n");
    } else if (strcmp(what, "accuracy") == 0) {
        float *s = read_floats((long)n * k), *l = read_floats(n);
        printf("%.17g\n", metric_accuracy(s, l, n, k));
    } else if (strcmp(what, "probs") == 0) {
        float *s = read_floats((long)n * k), *p = malloc((size_t)(n > 0 ? n : 1) * k * sizeof(float));
        metric_probabilities(s, n, k, flag, p);
        for (long i = 0; i < (long)n * k; i++) printf("%.9g%c", p[i], i + 1 < (long)n * k ? ' ' : '\n');
    } else if (strcmp(what, "ce") == 0 || strcmp(what, "bce") == 0) {
        const int ce = strcmp(what, "ce") == 0;
        float *z = read_floats((long)n * k), *l = read_floats(ce ? n : (long)n * k), *w = flag ? read_floats(k) : NULL;
        printf("%.17g\n", ce ? metric_cross_entropy(z, l, n, k, w) : metric_bce(z, l, n, k, w));
    } else if (strcmp(what, "mse") == 0) {
        float *p = read_floats(n), *t = read_floats(n);
        printf("%.17g\n", metric_mse(p, t, n));
    } else if (strcmp(what, "cindex") == 0 || strcmp(what, "cox") == 0) {
        float *r = read_floats(n), *t = read_floats(2L * n);
        printf("%.17g\n", strcmp(what, "cox") == 0 ? metric_cox_loss(r, t, n) : metric_cindex(r, t, n));
    } else {
        fprintf(stderr, "metrics_check: unknown metric %s\n", what);
        return 2;
    }
    return 0;
}

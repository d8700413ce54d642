/* metrics_check.c: the validation metrics of src/train/metrics.c on numbers given on stdin, for
 * tests/integration/test_metrics.py to hold against scikit-learn and a reference written in the test.
 *   metrics_check auroc N K MULTI      then N*K scores and N (MULTI 0: class indices) or N*K labels: prints the
 *                                      macro AUROC, then each class's
 *   metrics_check accuracy N K         then N*K scores and N labels
 *   metrics_check cindex N             then N risks and N (time, event) pairs
 *   metrics_check cox N                then the same: the Cox loss (Breslow) */
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
        fprintf(stderr, "usage: metrics_check auroc|accuracy|cindex|cox N [K [MULTI]]\n");
        return 2;
    }
    const int n = atoi(argv[2]), k = argc > 3 ? atoi(argv[3]) : 1;
    if (strcmp(argv[1], "auroc") == 0) {
        const int multi = argc > 4 && atoi(argv[4]);
        float *s = read_floats((long)n * k), *l = read_floats(multi ? (long)n * k : n);
        double *per = malloc((size_t)k * sizeof(double));
        printf("%.17g", metric_auroc_ovr(s, l, n, k, multi, per));
        for (int c = 0; c < k; c++) printf(" %.17g", per[c]);
        printf("\n");
    } else if (strcmp(argv[1], "accuracy") == 0) {
        float *s = read_floats((long)n * k), *l = read_floats(n);
        printf("%.17g\n", metric_accuracy(s, l, n, k));
    } else {
        float *r = read_floats(n), *t = read_floats(2L * n);
        printf("%.17g\n", strcmp(argv[1], "cox") == 0 ? metric_cox_loss(r, t, n) : metric_cindex(r, t, n));
    }
    return 0;
}

/* histogram.c: bucketing of float values into TensorFlow's default exponential histogram edges. */
#include "tb/histogram.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static double *default_limits;
static size_t n_default_limits;
static pthread_once_t default_limits_once = PTHREAD_ONCE_INIT;

/* The edges TensorFlow's histogram.cc uses by default: 1e-12 growing by 10% up to 1e20, mirrored for negative
 * values, 0 in the middle and DBL_MAX as the last edge so that every finite value lands in a bucket. */
static void default_limits_init(void) {
    size_t n_pos = 0;
    for (double v = 1e-12; v < 1e20; v *= 1.1) n_pos++;
    size_t n = 2 * n_pos + 2; /* negatives, 0, positives, DBL_MAX */
    double *lim = vx_malloc(n * sizeof *lim);
    double v = 1e-12;
    for (size_t i = 0; i < n_pos; i++, v *= 1.1) {
        lim[n_pos - 1 - i] = -v;
        lim[n_pos + 1 + i] = v;
    }
    lim[n_pos] = 0.0;
    lim[n - 1] = DBL_MAX;
    default_limits = lim;
    n_default_limits = n;
}

const double *tb_histogram_default_limits(size_t *n) {
    pthread_once(&default_limits_once, default_limits_init);
    if (n) *n = n_default_limits;
    return default_limits;
}

/* Index of the first limit greater than v: the bucket whose half-open range [limits[i-1], limits[i]) holds v. */
static size_t bucket_index(const double *limits, size_t n, double v) {
    size_t lo = 0, hi = n - 1; /* v < DBL_MAX = limits[n-1] unless v == DBL_MAX, which goes to the last bucket */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (limits[mid] > v) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

int tb_histogram_build(TbHistogram *h, const float *values, size_t count) {
    if (!h || (!values && count)) return -1;
    memset(h, 0, sizeof *h);
    size_t n_lim;
    const double *limits = tb_histogram_default_limits(&n_lim);
    double *all = vx_calloc(n_lim, sizeof *all);

    double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0;
    size_t finite = 0;
    for (size_t i = 0; i < count; i++) {
        double v = values[i];
        if (!isfinite(v)) {
            h->nonfinite++;
            continue;
        }
        finite++;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
        sum_sq += v * v;
        all[bucket_index(limits, n_lim, v)] += 1;
    }
    h->num = (double)finite;
    h->min = finite ? lo : 0.0;
    h->max = finite ? hi : 0.0;
    h->sum = sum;
    h->sum_squares = sum_sq;

    /* Most of the ~1550 buckets are empty. Like TensorFlow, an empty bucket is kept only when the next one is not
     * empty (or it is the last one): a run of empty buckets becomes one bucket ending at the run's last edge,
     * which covers the same range, so the counts and their edges stay exact. */
    h->limits = vx_malloc(n_lim * sizeof *h->limits);
    h->counts = vx_malloc(n_lim * sizeof *h->counts);
    size_t k = 0;
    for (size_t i = 0; i < n_lim; i++) {
        if (all[i] == 0 && i + 1 < n_lim && all[i + 1] == 0) continue;
        h->limits[k] = limits[i];
        h->counts[k] = all[i];
        k++;
    }
    h->n_buckets = k;
    free(all);
    return 0;
}

void tb_histogram_free(TbHistogram *h) {
    if (!h) return;
    free(h->limits);
    free(h->counts);
    h->limits = h->counts = NULL;
    h->n_buckets = 0;
}

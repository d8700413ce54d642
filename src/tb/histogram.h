/* histogram.h: TensorBoard-style histograms of float values for the event writer.
 * Buckets are TensorFlow's default exponential ones: edges +-1e-12 * 1.1^k up to 1e20 and 0 in between, so one
 * set of edges fits weights, gradients and activations of any scale. NaN and +-Inf are left out and counted. */
#pragma once
#include <stddef.h>

typedef struct {
    double min, max;    /* of the finite values; 0 when there are none */
    double num;         /* number of finite values, equal to the sum of counts[] */
    double sum, sum_squares;
    size_t nonfinite;   /* NaN and +-Inf values left out */
    size_t n_buckets;   /* after runs of empty buckets were merged */
    double *limits;     /* bucket i holds values v with limits[i-1] <= v < limits[i] (the first from -inf) */
    double *counts;
} TbHistogram;

/* Fills h from values[0..count). values may be NULL only when count is 0. Returns 0, or -1 for bad arguments.
 * Free with tb_histogram_free. */
int tb_histogram_build(TbHistogram *h, const float *values, size_t count);
void tb_histogram_free(TbHistogram *h);

/* The default bucket edges (ascending, the last is DBL_MAX); *n gets their number. Shared and read-only. */
const double *tb_histogram_default_limits(size_t *n);

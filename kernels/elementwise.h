/* elementwise.h: the small vector ops the graph needs: residual add and gradient accumulation. */
#pragma once

/* y = a + b */
void add_forward_cpu(long count, const float *a, const float *b, float *y);
/* dst = beta*dst + src  (beta in {0,1}; with beta 0 dst is overwritten even if it held NaN) */
void accumulate_cpu(long count, const float *src, float *dst, float beta);
/* x *= scale */
void scale_cpu(long count, float *x, float scale);

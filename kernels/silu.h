/* silu.h: SiLU (x * sigmoid(x)) elementwise over `count` floats. Backward reads the forward input x. */
#pragma once

void silu_forward_cpu(long count, const float *x, float *y);
/* dx = beta*dx + dy * silu'(x) */
void silu_backward_cpu(long count, const float *x, const float *dy, float *dx, float beta);

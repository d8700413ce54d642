/* timestep_math.h: one element of the sinusoidal embedding (timestep.h), in double, for the CPU and the GPU (VX_HD). */
#pragma once
#include <math.h>

#include "common/vx_hd.h"

VX_HD double timestep_value(double t, int j, int dim, double max_period) {
    const int half = dim / 2;
    if (j >= 2 * half) return 0.0; /* the odd width's last column */
    const int f = j < half ? j : j - half;
    const double a = t * exp(-log(max_period) * (double)f / (double)half);
    return j < half ? cos(a) : sin(a);
}

/* kernel_count.h: bench kernels' instruction-count mode for ci/regress (kernel_count.c). */
#pragma once
#include "backend/backend.h"
#include "backend/spec_table.h"

/* VX_KERNELS_CALLGRIND=1 */
int bench_kernels_count_mode(void);
/* Runs each wanted case once between callgrind client requests (one dump per case, named "case <op> <shape>"). */
void bench_kernels_count(const Backend *be, const KernelCase *cases, int n, const int *want);

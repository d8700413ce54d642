/* require_gpu.h: VX_REQUIRE_GPU=1 (set by ci/gpu.sh on a GPU machine) turns a GPU test's "skipped: no GPU" into a
 * failure, so a CUDA start-up problem there (a missing cuDNN sub-library, a driver mismatch) cannot pass as a
 * machine without a GPU. */
#pragma once
#include <stdlib.h>
#include <string.h>

static inline int vx_require_gpu(void) {
    const char *v = getenv("VX_REQUIRE_GPU");
    return v && v[0] && strcmp(v, "0") != 0;
}

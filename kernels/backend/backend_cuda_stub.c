/* backend_cuda_stub.c: the CUDA backend's entry points in a build without CUDA (make CUDA=0, or no nvcc and
 * cuDNN found): init reports why there is no GPU backend, there is no table, and no table. CUDA builds compile
 * common/backend_cuda.cu instead and this file to nothing. */
#include "backend/backend.h"

#ifndef VX_CUDA
#include <stdio.h>

void backend_cuda_set_options(const BackendOptions *o) { (void)o; }

int backend_cuda_init(int device, char *reason, size_t reason_len) {
    (void)device;
    if (reason && reason_len)
        snprintf(reason, reason_len, "this build has no CUDA (built with CUDA=0 or without nvcc and cuDNN)");
    return 0;
}

const Backend *backend_cuda(void) { return NULL; }

void backend_cuda_shutdown(void) {}

#else
typedef int backend_cuda_stub_unused; /* keeps the translation unit non-empty */
#endif

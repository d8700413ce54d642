/* backend_cuda_stub.c: the CUDA backend's entry points in a build without CUDA (make CUDA=0, or no nvcc and
 * cuDNN found): init reports why there is no GPU backend, there is no table, and no cuDNN to describe convolutions to. CUDA builds compile
 * kernels/backend_cuda.cu instead and this file to nothing. */
#include "backend.h"

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

#include "conv3d.h"
static int no_cuda(char *why, size_t why_len) {
    if (why && why_len) snprintf(why, why_len, "this build has no CUDA");
    return 0;
}
int conv3d_cuda_describe(const Conv3dShape *s, int *chunk_n, char *why, size_t why_len) {
    (void)s;
    (void)chunk_n;
    return no_cuda(why, why_len);
}
int conv3d_cuda_describe_layout(const Conv3dShape *s, int i, Conv3dCudnnLayout *out, char *why, size_t why_len) {
    (void)s;
    (void)i;
    (void)out;
    return no_cuda(why, why_len);
}
int conv3d_cuda_layouts(const Conv3dShape *s) {
    (void)s;
    return 0;
}
int conv3d_cuda_usable(const Conv3dShape *s, int data_grad, char *why, size_t why_len) {
    (void)s;
    (void)data_grad;
    return no_cuda(why, why_len);
}
int conv3d_cuda_tf32_broken(size_t cudnn_version) {
    (void)cudnn_version;
    return 0;
}
#else
typedef int backend_cuda_stub_unused; /* keeps the translation unit non-empty */
#endif

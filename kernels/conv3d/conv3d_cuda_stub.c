/* conv3d_cuda_stub.c: conv3d.h's cuDNN questions in a build without CUDA (make CUDA=0): there is no cuDNN to describe
 * a convolution to, so each answers "no" with the reason. CUDA builds compile conv3d_cudnn_plan.cu instead and this
 * file to nothing. */
#include "conv3d/conv3d.h"

#ifndef VX_CUDA
#include <stdio.h>

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
typedef int conv3d_cuda_stub_unused; /* keeps the translation unit non-empty */
#endif

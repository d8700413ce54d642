/* attention_cuda_stub.c: attention.h's cuDNN entries in a build without CUDA (make CUDA=0): there is no cuDNN to
 * describe the graph to, so the check answers "no" with the reason. CUDA builds compile attention_cudnn*.cu instead
 * and this file to nothing. */
#include "attention/attention.h"

#ifndef VX_CUDA
#include <stdio.h>

int attention_cuda_describe(const AttentionShape *s, int backward, int dq_accum, int *n_ops, char *why,
                            size_t why_len) {
    (void)s, (void)backward, (void)dq_accum;
    if (n_ops) *n_ops = 0;
    if (why && why_len) snprintf(why, why_len, "this build has no CUDA");
    return 0;
}
void attention_cuda_cache_clear(void) {}
#else
typedef int attention_cuda_stub_unused; /* keeps the translation unit non-empty */
#endif

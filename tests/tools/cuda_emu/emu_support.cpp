// emu_support.cpp: the backend state the kernels reach (stream, scratch) for the host emulation of
// tests/tools/cuda_emu/run.sh.
#include "common/cuda_check.h"
#include <cstring>
int vx_cuda_sync_launches = 0;
static BackendOptions opts = {0, 0};
static void *scratch;
cudaStream_t vx_cuda_stream(void) { return 0; }
cudnnHandle_t vx_cudnn_handle(void) { return 0; }
const BackendOptions *vx_cuda_options(void) { return &opts; }
void *vx_cuda_scratch(void);
void emu_poison_scratch(void) { memset(vx_cuda_scratch(), 0xFF, VX_SCRATCH_BYTES); }
void *vx_cuda_scratch(void) {
    if (!scratch) { scratch = aligned_alloc(256, VX_SCRATCH_BYTES); emu_poison_scratch(); }
    return scratch;
}
const char *vx_cuda_hint(cudaError_t) { return ""; }
const char *vx_cudnn_hint(cudnnStatus_t) { return ""; }
void vx_cuda_fail(const char *file, int line, const char *what, const char *, const char *, const char *) {
    fprintf(stderr, "fail %s:%d %s\n", file, line, what); abort();
}
// vx_reduce_finalize and its kernel: run.sh compiles them from common/cuda_device.cu itself (finalize_emu.cpp).
int vx_cuda_capturing = 0;
// attention_cudnn.cu (cuDNN's fused attention) is not emulated: its dispatch always answers "the own kernel runs it".
#include "attention/attention_cudnn.h"
int attention_cudnn_forward(const AttentionShape *, const void *, const void *, const void *, void *, float *, void *,
                            AttOwnForward) {
    return 0;
}
int attention_cudnn_backward(const AttentionShape *, const void *, const void *, const void *, const void *,
                             const void *, const float *, float *, void *, void *, void *, float, void *,
                             AttOwnBackward) {
    return 0;
}
size_t attention_cudnn_workspace_bytes(const AttentionShape *) { return 0; }

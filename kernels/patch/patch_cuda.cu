/* patch_cuda.cu: patchify / unpatchify (patch.h) on the GPU: a grid-stride loop over the token elements, one
 * element moved per thread through patch_volume_index (the CPU's map); storage T, the beta-1 add in float. Every
 * output element has one writer. */
#include "common/cuda_check.h"
#include "patch/patch.h"

template <typename T, bool TO_TOKENS, bool ACC>
__global__ void patch_kernel(PatchShape s, size_t n, const T *__restrict__ src, T *__restrict__ dst, float beta) {
    for (size_t e = vx_global_thread(); e < n; e += vx_grid_threads()) {
        const size_t v = (size_t)patch_volume_index(&s, (long)e);
        const size_t from = TO_TOKENS ? v : e, to = TO_TOKENS ? e : v;
        const float x = vx_f32(src[from]);
        dst[to] = vx_to<T>(ACC ? beta * vx_f32(dst[to]) + x : x);
    }
}

template <bool TO_TOKENS> static void run(const PatchShape *s, const void *src, void *dst, float beta) {
    const char *bad = patch_shape_error(s);
    if (*bad)
        vx_fatal("patch: %s (volume %dx%dx%d, patch %dx%dx%d)", bad, s->d, s->h, s->w, s->p[0], s->p[1], s->p[2]);
    const size_t n = (size_t)patch_count(s);
    if (!n) return;
    const unsigned blocks = vx_ew_blocks(n);
    cudaStream_t st = vx_cuda_stream();
    const PatchShape p = *s;
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (beta != 0.0f) patch_kernel<T, TO_TOKENS, true><<<blocks, VX_THREADS, 0, st>>>(p, n, (const T *)src, (T *)dst, beta);
        else patch_kernel<T, TO_TOKENS, false><<<blocks, VX_THREADS, 0, st>>>(p, n, (const T *)src, (T *)dst, beta);
    });
    LAUNCH_CHECK("patch_kernel");
}

static void patch_to_tokens_cuda(const PatchShape *s, const void *volume, void *tokens, float beta) {
    run<true>(s, volume, tokens, beta);
}
static void patch_to_volume_cuda(const PatchShape *s, const void *tokens, void *volume, float beta) {
    run<false>(s, tokens, volume, beta);
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const PatchOps patch_ops_cuda = {{op_supports_all_types}, patch_to_tokens_cuda, patch_to_volume_cuda};

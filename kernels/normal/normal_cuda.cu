/* normal_cuda.cu: normal_fill (normal.h) on the GPU: out[i] = vx_normal(seed, stream, offset + i), the same
 * counter-based function the CPU uses (integer hash and uniforms bit-identical; the normals agree to the
 * rounding of logf/cosf/sqrtf, a few ulp: built without fast-math, these are CUDA's accurate versions).
 *   out [count]   float4 stores when count % 4 == 0 and out is 16-byte aligned.
 *   offset [1]    device memory, read by every thread (a captured graph replays with the value of its time). */
#include "common/cuda_check.h"
#include "common/rng.h"
#include "normal/normal.h"

template <int V> __global__ void normal_fill_kernel(size_t nvec, uint64_t seed, uint64_t stream,
                                                    const uint64_t *__restrict__ offset_p, float *__restrict__ out) {
    const uint64_t offset = *offset_p;
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float r[V];
#pragma unroll
        for (int k = 0; k < V; k++) r[k] = vx_normal(seed, stream, offset + (uint64_t)(i * V + k));
        vx_store<V>(out, i, r);
    }
}

extern "C" void normal_fill_cuda(long count, uint64_t seed, uint64_t stream, const uint64_t *offset, float *out) {
    if (count <= 0) return;
    const size_t n = (size_t)count;
    if (vx_vec4_ok(n, out))
        normal_fill_kernel<4>
            <<<vx_ew_blocks(n / 4), VX_THREADS, 0, vx_cuda_stream()>>>(n / 4, seed, stream, offset, out);
    else normal_fill_kernel<1><<<vx_ew_blocks(n), VX_THREADS, 0, vx_cuda_stream()>>>(n, seed, stream, offset, out);
    LAUNCH_CHECK("normal_fill_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const NormalOps normal_ops_cuda = {{op_supports_f32}, normal_fill_cuda};

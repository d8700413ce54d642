/* gelu_cuda.cu: GELU (gelu.h) on the GPU with the formulas of gelu_math.h (CUDA's expf and erff), elementwise:
 *   x, y, dy, dx [count]   storage type T (dtype_cuda.cuh), computed in float; vectors of 4 when count % 4 == 0 and
 *                          every pointer is 16-byte aligned, else scalar
 * beta 0 overwrites dx without reading it (dx may hold NaN); beta 1 adds. */
#include "common/cuda_check.h"
#include "gelu/gelu.h"
#include "gelu/gelu_math.h"

template <typename T, int V, int KIND>
__global__ void gelu_forward_kernel(size_t nvec, const T *__restrict__ x, T *__restrict__ y) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float a[V];
        vx_load<V>(x, i, a);
#pragma unroll
        for (int k = 0; k < V; k++) a[k] = gelu_value(KIND, a[k]);
        vx_store<V>(y, i, a);
    }
}

template <typename T, int V, int KIND, bool ACC>
__global__ void gelu_backward_kernel(size_t nvec, const T *__restrict__ x, const T *__restrict__ dy,
                                     T *__restrict__ dx, float beta) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        float a[V], g[V], r[V];
        vx_load<V>(x, i, a);
        vx_load<V>(dy, i, g);
        if constexpr (ACC) vx_load<V>(dx, i, r);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float d = g[k] * gelu_grad(KIND, a[k]);
            if constexpr (ACC) r[k] = beta * r[k] + d;
            else r[k] = d;
        }
        vx_store<V>(dx, i, r);
    }
}

static void check(const GeluShape *s) {
    if (s->count < 0 || (s->kind != GELU_TANH && s->kind != GELU_ERF))
        vx_fatal("gelu: invalid shape count=%ld kind=%d", s->count, s->kind);
}

template <typename T, int KIND>
static void launch_forward(size_t n, const void *x, void *y) {
    cudaStream_t st = vx_cuda_stream();
    if (vx_vec4_ok(n, x, y))
        gelu_forward_kernel<T, 4, KIND><<<vx_ew_blocks(n / 4), VX_THREADS, 0, st>>>(n / 4, (const T *)x, (T *)y);
    else gelu_forward_kernel<T, 1, KIND><<<vx_ew_blocks(n), VX_THREADS, 0, st>>>(n, (const T *)x, (T *)y);
    LAUNCH_CHECK("gelu_forward_kernel");
}

template <typename T, int KIND, bool ACC>
static void launch_backward(size_t n, const void *x, const void *dy, void *dx, float beta) {
    cudaStream_t st = vx_cuda_stream();
    const T *tx = (const T *)x, *tdy = (const T *)dy;
    T *tdx = (T *)dx;
    if (vx_vec4_ok(n, x, dy, dx))
        gelu_backward_kernel<T, 4, KIND, ACC><<<vx_ew_blocks(n / 4), VX_THREADS, 0, st>>>(n / 4, tx, tdy, tdx, beta);
    else gelu_backward_kernel<T, 1, KIND, ACC><<<vx_ew_blocks(n), VX_THREADS, 0, st>>>(n, tx, tdy, tdx, beta);
    LAUNCH_CHECK("gelu_backward_kernel");
}

static void gelu_forward_cuda(const GeluShape *s, const void *x, void *y) {
    check(s);
    if (s->count == 0) return;
    const size_t n = (size_t)s->count;
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (s->kind == GELU_TANH) launch_forward<T, GELU_TANH>(n, x, y);
        else launch_forward<T, GELU_ERF>(n, x, y);
    });
}

static void gelu_backward_cuda(const GeluShape *s, const void *x, const void *dy, void *dx, float beta) {
    check(s);
    if (s->count == 0) return;
    const size_t n = (size_t)s->count;
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (s->kind == GELU_TANH) {
            if (beta != 0.0f) launch_backward<T, GELU_TANH, true>(n, x, dy, dx, beta);
            else launch_backward<T, GELU_TANH, false>(n, x, dy, dx, beta);
        } else {
            if (beta != 0.0f) launch_backward<T, GELU_ERF, true>(n, x, dy, dx, beta);
            else launch_backward<T, GELU_ERF, false>(n, x, dy, dx, beta);
        }
    });
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const GeluOps gelu_ops_cuda = {{op_supports_all_types}, gelu_forward_cuda, gelu_backward_cuda};

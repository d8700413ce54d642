/* linear_cuda.cu: the fully connected layer of linear.h on the GPU with own kernels (the heads are small: training
 * needs no cuBLAS), one output element per thread, every sum in double in a fixed order (no atomics):
 *   forward          y[r][o] = sum_i x[r][i] w[o][i] (+ b[o])                       thread per (r, o)
 *   backward_data    dx[r][i] = [beta*dx +] sum_o dy[r][o] w[o][i]                   thread per (r, i)
 *   backward_filter  dw[o][i] = [beta*dw +] sum_r dy[r][o] x[r][i]                    thread per (o, i)
 *                    db[o] = [beta*db +] sum_r dy[r][o]                              threads after those
 *   x, w, y, dy, dx of storage type T (dtype_cuda.cuh); b, dw, db float32. Consecutive threads take consecutive
 *   o (forward) or i (the backward passes), so the backward passes read rows of w, x and dx contiguously. */
#include "common/cuda_check.h"
#include "linear/linear.h"

template <typename T>
__global__ void linear_forward_kernel(size_t items, int in, int out, const T *__restrict__ x, const T *__restrict__ w,
                                      const float *__restrict__ b, T *__restrict__ y) {
    for (size_t t = vx_global_thread(); t < items; t += vx_grid_threads()) {
        const size_t r = t / (size_t)out, o = t % (size_t)out;
        const T *xr = x + r * in, *wr = w + o * in;
        double acc = 0.0;
        for (int i = 0; i < in; i++) acc += (double)vx_f32(xr[i]) * (double)vx_f32(wr[i]);
        float v = (float)acc;
        if (b) v += b[o];
        y[t] = vx_to<T>(v);
    }
}

template <typename T, bool ACC>
__global__ void linear_data_kernel(size_t items, int in, int out, const T *__restrict__ dy, const T *__restrict__ w,
                                   T *__restrict__ dx, float beta) {
    for (size_t t = vx_global_thread(); t < items; t += vx_grid_threads()) {
        const size_t r = t / (size_t)in, i = t % (size_t)in;
        const T *dyr = dy + r * out;
        double acc = 0.0;
        for (int o = 0; o < out; o++) acc += (double)vx_f32(dyr[o]) * (double)vx_f32(w[(size_t)o * in + i]);
        const float v = (float)acc;
        dx[t] = vx_to<T>(ACC ? beta * vx_f32(dx[t]) + v : v);
    }
}

/* threads [0, out*in): dw; [out*in, out*in + out): db (when db is given) */
template <typename T, bool ACC>
__global__ void linear_filter_kernel(size_t items, int n, int in, int out, const T *__restrict__ x,
                                     const T *__restrict__ dy, float *__restrict__ dw, float *__restrict__ db,
                                     float beta) {
    const size_t nw = (size_t)out * in;
    for (size_t t = vx_global_thread(); t < items; t += vx_grid_threads()) {
        double acc = 0.0;
        if (t < nw) {
            const size_t o = t / (size_t)in, i = t % (size_t)in;
            for (int r = 0; r < n; r++) acc += (double)vx_f32(dy[(size_t)r * out + o]) * (double)vx_f32(x[(size_t)r * in + i]);
            dw[t] = ACC ? beta * dw[t] + (float)acc : (float)acc;
        } else {
            const size_t o = t - nw;
            for (int r = 0; r < n; r++) acc += (double)vx_f32(dy[(size_t)r * out + o]);
            db[o] = ACC ? beta * db[o] + (float)acc : (float)acc;
        }
    }
}

static void check(const LinearShape *s) {
    if (s->n < 0 || s->in < 1 || s->out < 1) vx_fatal("linear: invalid shape n=%d in=%d out=%d", s->n, s->in, s->out);
}

static void linear_forward_cuda(const LinearShape *s, const void *x, const void *w, const float *b, void *y) {
    check(s);
    const size_t items = (size_t)s->n * s->out;
    if (!items) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        linear_forward_kernel<T><<<vx_ew_blocks(items), VX_THREADS, 0, st>>>(items, s->in, s->out, (const T *)x,
                                                                            (const T *)w, b, (T *)y);
    });
    LAUNCH_CHECK("linear_forward_kernel");
}

static void linear_backward_data_cuda(const LinearShape *s, const void *dy, const void *w, void *dx, float beta) {
    check(s);
    const size_t items = (size_t)s->n * s->in;
    if (!items) return;
    const unsigned blocks = vx_ew_blocks(items);
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tdy = (const T *)dy, *tw = (const T *)w;
        T *tdx = (T *)dx;
        if (beta != 0.0f)
            linear_data_kernel<T, true><<<blocks, VX_THREADS, 0, st>>>(items, s->in, s->out, tdy, tw, tdx, beta);
        else linear_data_kernel<T, false><<<blocks, VX_THREADS, 0, st>>>(items, s->in, s->out, tdy, tw, tdx, beta);
    });
    LAUNCH_CHECK("linear_data_kernel");
}

static void linear_backward_filter_cuda(const LinearShape *s, const void *x, const void *dy, float *dw, float *db,
                                        float beta) {
    check(s);
    const size_t items = (size_t)s->out * s->in + (db ? (size_t)s->out : 0);
    const unsigned blocks = vx_ew_blocks(items);
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tx = (const T *)x, *tdy = (const T *)dy;
        if (beta != 0.0f)
            linear_filter_kernel<T, true><<<blocks, VX_THREADS, 0, st>>>(items, s->n, s->in, s->out, tx, tdy, dw, db, beta);
        else linear_filter_kernel<T, false><<<blocks, VX_THREADS, 0, st>>>(items, s->n, s->in, s->out, tx, tdy, dw, db, beta);
    });
    LAUNCH_CHECK("linear_filter_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const LinearOps linear_ops_cuda = {{op_supports_all_types}, linear_forward_cuda, linear_backward_data_cuda,
                                              linear_backward_filter_cuda};

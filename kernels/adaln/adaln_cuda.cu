/* adaln_cuda.cu: adaLN-Zero's modulation and gated residual (adaln.h) on the GPU, the expressions of adaln_cpu.c:
 *   modulate, gate            elementwise, grid-stride over [n][tokens][c]
 *   their backwards           one pass: block (blk, b) takes tokens [blk*SB, (blk+1)*SB) of sample b, thread t the
 *                             columns t, t + 256, ...: it writes d_in for those elements and sums dy (and dy*w) over
 *                             its tokens in order, in double, into the scratch part[b][blk][2][c]; then one thread per
 *                             (b, channel) adds the blocks' partials in order. A fixed partition, no atomics.
 * Every array of storage type T, computed in float; beta 0 overwrites without reading. */
#include "adaln/adaln.h"
#include "common/cuda_check.h"

#define ADA_TARGET_BLOCKS 1024 /* partial-pass blocks over all samples, about */
#define ADA_MIN_TOKENS 32      /* tokens per partial-pass block, at least */

/* y = x*(1 + v[b]) + (shift ? shift[b] : 0): modulate with v = scale; the gate's out = res + gate*h is the same form
 * with x = h, add1 = 0 and `shift` replaced by the residual (per element, not per sample) */
template <typename T, bool GATE>
__global__ void ada_forward_kernel(size_t items, long tokens, int c, long mod_stride, const T *x, const T *add,
                                   const T *__restrict__ v, T *out) { /* out may be add (in place): no restrict */
    for (size_t i = vx_global_thread(); i < items; i += vx_grid_threads()) {
        const size_t b = i / ((size_t)tokens * c), j = i % (size_t)c, m = b * mod_stride + j;
        const float xv = vx_f32(x[i]), vv = vx_f32(v[m]);
        const float r = GATE ? vx_f32(add[i]) + vv * xv : xv * (1.0f + vv) + vx_f32(add[m]);
        out[i] = vx_to<T>(r);
    }
}

/* d_in = [beta_in*d_in +] dy*(add1 + v[b]); part[b][blk][0][j] = sum dy, part[b][blk][1][j] = sum dy*w */
template <typename T, bool ACC>
__global__ void ada_backward_partial_kernel(long tokens, int c, long mod_stride, size_t SB, float add1,
                                            const T *__restrict__ dy, const T *__restrict__ w, const T *__restrict__ v,
                                            T *__restrict__ d_in, float beta_in, double *__restrict__ part) {
    const size_t b = blockIdx.y, blk = blockIdx.x, nblk = gridDim.x;
    const size_t t0 = blk * SB, t1 = t0 + SB < (size_t)tokens ? t0 + SB : (size_t)tokens;
    for (int j = threadIdx.x; j < c; j += VX_THREADS) {
        const float vj = add1 + vx_f32(v[b * mod_stride + j]);
        double s0 = 0.0, s1 = 0.0;
        for (size_t t = t0; t < t1; t++) {
            const size_t o = (b * tokens + t) * c + j;
            const float g = vx_f32(dy[o]);
            s0 += g;
            s1 += (double)g * vx_f32(w[o]);
            const float d = g * vj;
            d_in[o] = vx_to<T>(ACC ? beta_in * vx_f32(d_in[o]) + d : d);
        }
        double *p = part + (b * nblk + blk) * 2 * c;
        p[j] = s0;
        p[c + j] = s1;
    }
}

template <typename T, bool ACC>
__global__ void ada_backward_final_kernel(int n, int c, long mod_stride, int nblk, const double *__restrict__ part,
                                          T *__restrict__ sum0, T *__restrict__ sum1, float beta_mod) {
    const size_t bj = vx_global_thread();
    if (bj >= (size_t)n * c) return;
    const size_t b = bj / c, j = bj % c;
    double a0 = 0.0, a1 = 0.0;
    for (int blk = 0; blk < nblk; blk++) {
        const double *p = part + (b * nblk + blk) * 2 * c;
        a0 += p[j], a1 += p[c + j];
    }
    const size_t o = b * mod_stride + j;
    if (sum0) sum0[o] = vx_to<T>(ACC ? beta_mod * vx_f32(sum0[o]) + (float)a0 : (float)a0);
    sum1[o] = vx_to<T>(ACC ? beta_mod * vx_f32(sum1[o]) + (float)a1 : (float)a1);
}

static void check(const AdaLNShape *s) {
    if (s->n < 0 || s->tokens < 0 || s->c < 1 || s->mod_stride < s->c || s->n > 65535)
        vx_fatal("adaln: invalid shape n=%d tokens=%ld c=%d mod_stride=%ld (n at most 65535 on CUDA)", s->n, s->tokens,
                 s->c, s->mod_stride);
}

static void forward(const AdaLNShape *s, bool gate, const void *x, const void *add, const void *v, void *out) {
    check(s);
    const size_t items = (size_t)s->n * s->tokens * s->c;
    if (!items) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (gate)
            ada_forward_kernel<T, true><<<vx_ew_blocks(items), VX_THREADS, 0, st>>>(items, s->tokens, s->c, s->mod_stride, (const T *)x, (const T *)add, (const T *)v, (T *)out);
        else
            ada_forward_kernel<T, false><<<vx_ew_blocks(items), VX_THREADS, 0, st>>>(items, s->tokens, s->c, s->mod_stride, (const T *)x, (const T *)add, (const T *)v, (T *)out);
    });
    LAUNCH_CHECK("ada_forward_kernel");
}

static void ada_modulate_cuda(const AdaLNShape *s, const void *x, const void *shift, const void *scale, void *y) {
    forward(s, false, x, shift, scale, y);
}
static void ada_gate_cuda(const AdaLNShape *s, const void *res, const void *h, const void *gate, void *out) {
    forward(s, true, h, res, gate, out);
}

static void backward(const AdaLNShape *s, const void *dy, const void *w, const void *v, float add1, void *d_in,
                     void *sum0, void *sum1, float beta_in, float beta_mod) {
    check(s);
    if (s->n == 0) return;
    const size_t cap = VX_SCRATCH_BYTES / sizeof(double), per = 2 * (size_t)s->c * s->n;
    if (per > cap) vx_fatal("adaln: %d samples of %d channels do not fit the reduction scratch", s->n, s->c);
    size_t nb = ((size_t)s->tokens + ADA_MIN_TOKENS - 1) / ADA_MIN_TOKENS;
    const size_t target = ADA_TARGET_BLOCKS / s->n > 0 ? ADA_TARGET_BLOCKS / s->n : 1;
    if (nb > target) nb = target;
    if (nb > cap / per) nb = cap / per;
    if (nb < 1) nb = 1;
    const size_t SB = ((size_t)s->tokens + nb - 1) / nb;
    const int nblk = s->tokens > 0 ? (int)(((size_t)s->tokens + SB - 1) / SB) : 0;
    double *part = (double *)vx_cuda_scratch();
    cudaStream_t st = vx_cuda_stream();
    const dim3 grid((unsigned)nblk, (unsigned)s->n);
    const unsigned fb = (unsigned)(((size_t)s->n * s->c + VX_THREADS - 1) / VX_THREADS);
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tdy = (const T *)dy, *tw = (const T *)w, *tv = (const T *)v;
        if (nblk > 0) {
            if (beta_in != 0.0f)
                ada_backward_partial_kernel<T, true><<<grid, VX_THREADS, 0, st>>>(s->tokens, s->c, s->mod_stride, SB, add1, tdy, tw, tv, (T *)d_in, beta_in, part);
            else
                ada_backward_partial_kernel<T, false><<<grid, VX_THREADS, 0, st>>>(s->tokens, s->c, s->mod_stride, SB, add1, tdy, tw, tv, (T *)d_in, beta_in, part);
            LAUNCH_CHECK("ada_backward_partial_kernel");
        }
        if (beta_mod != 0.0f)
            ada_backward_final_kernel<T, true><<<fb, VX_THREADS, 0, st>>>(s->n, s->c, s->mod_stride, nblk, part, (T *)sum0, (T *)sum1, beta_mod);
        else
            ada_backward_final_kernel<T, false><<<fb, VX_THREADS, 0, st>>>(s->n, s->c, s->mod_stride, nblk, part, (T *)sum0, (T *)sum1, beta_mod);
        LAUNCH_CHECK("ada_backward_final_kernel");
    });
}

static void ada_modulate_backward_cuda(const AdaLNShape *s, const void *dy, const void *x, const void *scale, void *dx,
                                       void *dshift, void *dscale, float beta_dx, float beta_mod) {
    backward(s, dy, x, scale, 1.0f, dx, dshift, dscale, beta_dx, beta_mod);
}
static void ada_gate_backward_cuda(const AdaLNShape *s, const void *dout, const void *h, const void *gate, void *dh,
                                   void *dgate, float beta_dh, float beta_mod) {
    backward(s, dout, h, gate, 0.0f, dh, NULL, dgate, beta_dh, beta_mod);
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const AdaLNOps adaln_ops_cuda = {{op_supports_all_types}, ada_modulate_cuda, ada_modulate_backward_cuda,
                                            ada_gate_cuda, ada_gate_backward_cuda};

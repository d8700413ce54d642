/* upconv_phase_cuda.cu: the phase decomposition's parts on the GPU (upconv_phase.h): one thread per output element,
 * sums in the header's order (the CPU's), every storage type, float32 math. */
#include "common/cuda_check.h"
#include "upconv_phase/upconv_phase.h"

template <typename T>
__global__ void up_weights_kernel(UpconvPhaseShape s, const float *__restrict__ w, T *__restrict__ pw, size_t total) {
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const int c = (int)(i % (size_t)s.c_in);
        const size_t r = i / (size_t)s.c_in;
        const int t = (int)(r % 8), o = (int)(r / 8 % (size_t)s.c_out), p = (int)(r / 8 / (size_t)s.c_out);
        const int a = p >> 2, e = p >> 1 & 1, f = p & 1, ti = t >> 2, tj = t >> 1 & 1, tk = t & 1;
        float acc = 0.0f;
        for (int kd = upconv_phase_tap_lo(a, ti); kd <= upconv_phase_tap_hi(a, ti); kd++)
            for (int kh = upconv_phase_tap_lo(e, tj); kh <= upconv_phase_tap_hi(e, tj); kh++)
                for (int kw = upconv_phase_tap_lo(f, tk); kw <= upconv_phase_tap_hi(f, tk); kw++)
                    acc += w[((((size_t)o * 3 + kd) * 3 + kh) * 3 + kw) * s.c_in + c];
        pw[i] = vx_to<T>(acc);
    }
}

__global__ void up_bias_kernel(UpconvPhaseShape s, const float *__restrict__ b, float *__restrict__ pb) {
    for (size_t i = vx_global_thread(); i < (size_t)8 * s.c_out; i += vx_grid_threads()) pb[i] = b[i % (size_t)s.c_out];
}

template <bool ACC>
__global__ void up_fold_kernel(UpconvPhaseShape s, const float *__restrict__ dpw, float *__restrict__ dw, float beta,
                               size_t total) {
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const int c = (int)(i % (size_t)s.c_in);
        const size_t r = i / (size_t)s.c_in;
        const int kw = (int)(r % 3), kh = (int)(r / 3 % 3), kd = (int)(r / 9 % 3), o = (int)(r / 27);
        float acc = 0.0f;
        for (int p = 0; p < 8; p++) {
            const int t = upconv_phase_tap_of(p >> 2, kd) * 4 + upconv_phase_tap_of(p >> 1 & 1, kh) * 2 +
                          upconv_phase_tap_of(p & 1, kw);
            acc += dpw[(((size_t)p * s.c_out + o) * 8 + t) * s.c_in + c];
        }
        if constexpr (ACC) acc = beta * dw[i] + acc;
        dw[i] = acc;
    }
}

template <bool ACC>
__global__ void up_fold_bias_kernel(UpconvPhaseShape s, const float *__restrict__ dpb, float *__restrict__ db,
                                    float beta) {
    for (size_t o = vx_global_thread(); o < (size_t)s.c_out; o += vx_grid_threads()) {
        float acc = 0.0f;
        for (int p = 0; p < 8; p++) acc += dpb[(size_t)p * s.c_out + o];
        if constexpr (ACC) acc = beta * db[o] + acc;
        db[o] = acc;
    }
}

template <typename T>
__global__ void up_shuffle_kernel(UpconvPhaseShape s, const T *__restrict__ z, T *__restrict__ y, size_t total) {
    const int D = 2 * s.d, H = 2 * s.h, W = 2 * s.w;
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const int o = (int)(i % (size_t)s.c_out);
        const size_t r = i / (size_t)s.c_out;
        const int x = (int)(r % (size_t)W), yy = (int)(r / (size_t)W % (size_t)H);
        const int zz = (int)(r / ((size_t)W * H) % (size_t)D);
        const size_t b = r / ((size_t)W * H * D);
        const int a = zz & 1, e = yy & 1, f = x & 1, p = a * 4 + e * 2 + f;
        const size_t zr = ((b * (s.d + 1) + zz / 2 + a) * (s.h + 1) + yy / 2 + e) * (s.w + 1) + x / 2 + f;
        y[i] = z[(zr * 8 + p) * s.c_out + o];
    }
}

template <typename T>
__global__ void up_unshuffle_kernel(UpconvPhaseShape s, const T *__restrict__ dy, T *__restrict__ dz, size_t total) {
    const int D = s.d + 1, H = s.h + 1, W = s.w + 1;
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const int o = (int)(i % (size_t)s.c_out);
        const int p = (int)(i / (size_t)s.c_out % 8);
        const size_t r = i / ((size_t)s.c_out * 8);
        const int x = (int)(r % (size_t)W), yy = (int)(r / (size_t)W % (size_t)H);
        const int zz = (int)(r / ((size_t)W * H) % (size_t)D);
        const size_t b = r / ((size_t)W * H * D);
        const int a = p >> 2, e = p >> 1 & 1, f = p & 1;
        const int ii = zz - a, j = yy - e, k = x - f;
        if (ii < 0 || ii >= s.d || j < 0 || j >= s.h || k < 0 || k >= s.w) {
            dz[i] = vx_to<T>(0.0f);
            continue;
        }
        const size_t yr = ((b * 2 * s.d + 2 * ii + a) * 2 * s.h + 2 * j + e) * (size_t)(2 * s.w) + 2 * k + f;
        dz[i] = dy[yr * s.c_out + o];
    }
}

static void up_weights_cuda(const UpconvPhaseShape *s, const float *w, const float *b, void *pw, float *pb) {
    const size_t total = (size_t)upconv_phase_phase_weight_count(s);
    if (total == 0) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        up_weights_kernel<T><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(*s, w, (T *)pw, total);
    });
    LAUNCH_CHECK("up_weights_kernel");
    if (b && pb) {
        up_bias_kernel<<<vx_ew_blocks((size_t)8 * s->c_out), VX_THREADS, 0, st>>>(*s, b, pb);
        LAUNCH_CHECK("up_bias_kernel");
    }
}

static void up_fold_cuda(const UpconvPhaseShape *s, const float *dpw, const float *dpb, float *dw, float *db,
                         float beta) {
    const size_t total = (size_t)upconv_phase_weight_count(s);
    if (total == 0) return;
    cudaStream_t st = vx_cuda_stream();
    if (beta != 0.0f) up_fold_kernel<true><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(*s, dpw, dw, beta, total);
    else up_fold_kernel<false><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(*s, dpw, dw, beta, total);
    LAUNCH_CHECK("up_fold_kernel");
    if (db && dpb) {
        if (beta != 0.0f) up_fold_bias_kernel<true><<<vx_ew_blocks((size_t)s->c_out), VX_THREADS, 0, st>>>(*s, dpb, db, beta);
        else up_fold_bias_kernel<false><<<vx_ew_blocks((size_t)s->c_out), VX_THREADS, 0, st>>>(*s, dpb, db, beta);
        LAUNCH_CHECK("up_fold_bias_kernel");
    }
}

static void up_shuffle_cuda(const UpconvPhaseShape *s, const void *z, void *y) {
    const size_t total = (size_t)upconv_phase_y_count(s);
    if (total == 0) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        up_shuffle_kernel<T><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(*s, (const T *)z, (T *)y, total);
    });
    LAUNCH_CHECK("up_shuffle_kernel");
}

static void up_unshuffle_cuda(const UpconvPhaseShape *s, const void *dy, void *dz) {
    const size_t total = (size_t)upconv_phase_z_count(s);
    if (total == 0) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        up_unshuffle_kernel<T><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(*s, (const T *)dy, (T *)dz, total);
    });
    LAUNCH_CHECK("up_unshuffle_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const UpconvPhaseOps upconv_phase_ops_cuda = {{op_supports_all_types}, up_weights_cuda, up_fold_cuda,
                                                         up_shuffle_cuda, up_unshuffle_cuda};

/* drr_cuda.cu: the DRR (drr.h) on the GPU, the expressions of drr_cpu.c (drr_math.h is the code both run):
 *   integrals  one thread per ray (b, u, v), summing along it in double in order; view 0's neighbouring threads read
 *              neighbouring voxels (coalesced), view 1's each read a contiguous row
 *   image      one thread per output pixel: the resampled integral, then 1 - exp(-Lr) (forward) or dimg*exp(-Lr)
 *   gather     one thread per source pixel: the transpose of the resampling in a fixed order (no atomics)
 *   dx         one thread per voxel: its ray's dL, times mu_scale * spacing, [beta*dx +]
 *   backproject one thread per voxel and view: its ray's value from the view (drr_ray_value), into its channel
 * The line integrals and g live in the backend's reduction scratch, [nb][d][cols] then [nb][img][img] floats, for as
 * many samples at a time (nb) as fit; the volume is storage type T, the image float32, all math in float. */
#include "common/cuda_check.h"
#include "drr/drr.h"
#include "drr/drr_math.h"

template <typename T>
__global__ void drr_integral_kernel(size_t rays, int d, int h, int w, int cols, int view, double k,
                                    const T *__restrict__ x, float *__restrict__ L) {
    for (size_t r = vx_global_thread(); r < rays; r += vx_grid_threads()) {
        const size_t v = r % cols, bu = r / cols;
        const T *xs = x + bu * h * w;
        double a = 0.0;
        if (view == 0)
            for (int y = 0; y < h; y++) a += vx_f32(xs[(size_t)y * w + v]);
        else
            for (int z = 0; z < w; z++) a += vx_f32(xs[v * w + z]);
        L[r] = (float)(k * a);
    }
}

/* forward (dimg NULL): out = 1 - exp(-Lr); backward: out = dimg * exp(-Lr) */
__global__ void drr_image_kernel(size_t items, int d, int cols, int m, const float *__restrict__ L,
                                 const float *__restrict__ dimg, float *__restrict__ out) {
    for (size_t o = vx_global_thread(); o < items; o += vx_grid_threads()) {
        const size_t b = o / ((size_t)m * m);
        const int i = (int)(o / m % m), j = (int)(o % m);
        const float lr = drr_resample(L + b * d * cols, d, cols, m, i, j);
        out[o] = dimg ? dimg[o] * expf(-lr) : -expm1f(-lr);
    }
}

__global__ void drr_gather_kernel(size_t items, int d, int cols, int m, float k, const float *__restrict__ g,
                                  float *__restrict__ dL) {
    for (size_t o = vx_global_thread(); o < items; o += vx_grid_threads()) {
        const size_t b = o / ((size_t)d * cols);
        const int u = (int)(o / cols % d), v = (int)(o % cols);
        dL[o] = k * drr_gather(g + b * m * m, d, cols, m, u, v);
    }
}

template <typename T, bool ACC>
__global__ void drr_dx_kernel(size_t items, int h, int w, int cols, int view, const float *__restrict__ dL,
                              T *__restrict__ dx, float beta) {
    for (size_t o = vx_global_thread(); o < items; o += vx_grid_threads()) {
        const size_t bu = o / ((size_t)h * w);
        const int y = (int)(o / w % h), z = (int)(o % w);
        const float g = dL[bu * cols + (view == 0 ? z : y)];
        dx[o] = vx_to<T>(ACC ? beta * vx_f32(dx[o]) + g : g);
    }
}

template <typename T>
__global__ void drr_backproject_kernel(size_t items, int d, int h, int w, int m, float mu_scale,
                                       const float *__restrict__ views, T *__restrict__ out) {
    for (size_t o = vx_global_thread(); o < items; o += vx_grid_threads()) { /* o = voxel * 2 + view */
        const int view = (int)(o % 2);
        const size_t voxel = o / 2, b = voxel / ((size_t)d * h * w);
        const int u = (int)(voxel / ((size_t)h * w) % d), y = (int)(voxel / w % h), z = (int)(voxel % w);
        const float *image = views + (2 * b + view) * m * m;
        const float v = view == 0 ? drr_ray_value(image, m, d, w, u, z, mu_scale) : drr_ray_value(image, m, d, h, u, y, mu_scale);
        out[o] = vx_to<T>(v);
    }
}

static void check(const DrrShape *s) {
    const char *e = drr_shape_error(s);
    if (*e) vx_fatal("drr: %s (n=%d %dx%dx%d view %d img %d)", e, s->n, s->d, s->h, s->w, s->view, s->img);
}

/* samples per pass: as many as their scratch (floats per sample) allows */
static int chunk(const DrrShape *s, size_t per) {
    const size_t cap = VX_SCRATCH_BYTES / sizeof(float);
    if (per > cap)
        vx_fatal("drr: one sample's line integrals and image (%dx%dx%d, img %d) do not fit the scratch", s->d, s->h,
                 s->w, s->img);
    const size_t nb = cap / per;
    return nb < (size_t)s->n ? (int)nb : s->n;
}

static void integrate(const DrrShape *s, int nb, const void *x, float *L) {
    const size_t rays = (size_t)nb * s->d * drr_cols(s);
    const double k = (double)s->mu_scale * (double)s->spacing;
    VX_DTYPE_SWITCH(s->dtype, T, {
        drr_integral_kernel<T><<<vx_ew_blocks(rays), VX_THREADS, 0, vx_cuda_stream()>>>(rays, s->d, s->h, s->w, drr_cols(s), s->view, k, (const T *)x, L);
    });
    LAUNCH_CHECK("drr_integral_kernel");
}

static void drr_forward_cuda(const DrrShape *s, const void *x, float *img) {
    check(s);
    const int cols = drr_cols(s), m = s->img;
    const size_t vol = (size_t)s->d * s->h * s->w, per = (size_t)s->d * cols, pix = (size_t)m * m;
    if (s->n == 0) return;
    const int nb = chunk(s, per);
    float *L = (float *)vx_cuda_scratch();
    const char *xb = (const char *)x;
    for (int b0 = 0; b0 < s->n; b0 += nb) {
        const int k = s->n - b0 < nb ? s->n - b0 : nb;
        integrate(s, k, xb + (size_t)b0 * vol * dtype_size(s->dtype), L);
        const size_t items = (size_t)k * pix;
        drr_image_kernel<<<vx_ew_blocks(items), VX_THREADS, 0, vx_cuda_stream()>>>(items, s->d, cols, m, L, NULL, img + (size_t)b0 * pix);
        LAUNCH_CHECK("drr_image_kernel");
    }
}

static void drr_backward_cuda(const DrrShape *s, const void *x, const float *dimg, void *dx, float beta) {
    check(s);
    const int cols = drr_cols(s), m = s->img;
    const size_t vol = (size_t)s->d * s->h * s->w, per = (size_t)s->d * cols, pix = (size_t)m * m;
    if (s->n == 0) return;
    const int nb = chunk(s, per + pix);
    float *L = (float *)vx_cuda_scratch(), *g = L + (size_t)nb * per; /* dL goes into L once g is made */
    cudaStream_t st = vx_cuda_stream();
    const size_t esz = dtype_size(s->dtype);
    for (int b0 = 0; b0 < s->n; b0 += nb) {
        const int k = s->n - b0 < nb ? s->n - b0 : nb;
        integrate(s, k, (const char *)x + (size_t)b0 * vol * esz, L);
        const size_t items = (size_t)k * pix, rays = (size_t)k * per, voxels = (size_t)k * vol;
        drr_image_kernel<<<vx_ew_blocks(items), VX_THREADS, 0, st>>>(items, s->d, cols, m, L, dimg + (size_t)b0 * pix, g);
        LAUNCH_CHECK("drr_image_kernel");
        drr_gather_kernel<<<vx_ew_blocks(rays), VX_THREADS, 0, st>>>(rays, s->d, cols, m, s->mu_scale * s->spacing, g, L);
        LAUNCH_CHECK("drr_gather_kernel");
        VX_DTYPE_SWITCH(s->dtype, T, {
            T *o = (T *)((char *)dx + (size_t)b0 * vol * esz);
            if (beta != 0.0f)
                drr_dx_kernel<T, true><<<vx_ew_blocks(voxels), VX_THREADS, 0, st>>>(voxels, s->h, s->w, cols, s->view, L, o, beta);
            else
                drr_dx_kernel<T, false><<<vx_ew_blocks(voxels), VX_THREADS, 0, st>>>(voxels, s->h, s->w, cols, s->view, L, o, beta);
        });
        LAUNCH_CHECK("drr_dx_kernel");
    }
}

static void drr_backproject_cuda(const DrrShape *s, const float *views, void *out) {
    check(s);
    const size_t items = (size_t)s->n * s->d * s->h * s->w * 2;
    if (items == 0) return;
    VX_DTYPE_SWITCH(s->dtype, T, {
        drr_backproject_kernel<T><<<vx_ew_blocks(items), VX_THREADS, 0, vx_cuda_stream()>>>(items, s->d, s->h, s->w, s->img, s->mu_scale, views, (T *)out);
    });
    LAUNCH_CHECK("drr_backproject_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const DrrOps drr_ops_cuda = {{op_supports_all_types}, drr_forward_cuda, drr_backward_cuda, drr_backproject_cuda};

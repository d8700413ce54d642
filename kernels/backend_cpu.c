/* backend_cpu.c: the float32 CPU backend's op table (backend.h): host memory (64-byte aligned so AVX-512 loads
 * never split a cache line) and the *_cpu kernels, plus the thread-count setting shared by OpenMP and OpenBLAS. */
#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rng.h"
#include "silu.h"
#include "upsample.h"
#include "util.h"

static void *cpu_alloc(size_t bytes) {
    void *p = NULL;
    int rc = posix_memalign(&p, 64, bytes ? bytes : 64);
    if (rc != 0) {
        errno = rc; /* posix_memalign reports through its return value, vx_fatal prints errno */
        vx_fatal("out of host memory allocating %zu bytes; lower batch_size or input_size", bytes);
    }
    return p;
}

static void cpu_release(void *ptr) { free(ptr); }
static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}
static void cpu_zero(void *ptr, size_t bytes) {
    if (bytes) memset(ptr, 0, bytes);
}
static void cpu_synchronize(void) {} /* every CPU op has finished when it returns */

static const Backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .copy_to_device = cpu_copy,
    .copy_to_host = cpu_copy,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .conv3d_workspace_bytes = conv3d_workspace_bytes_cpu,
    .conv3d_forward = conv3d_forward_cpu,
    .conv3d_backward_data = conv3d_backward_data_cpu,
    .conv3d_backward_filter = conv3d_backward_filter_cpu,
    .groupnorm_forward = groupnorm_forward_cpu,
    .groupnorm_backward = groupnorm_backward_cpu,
    .silu_forward = silu_forward_cpu,
    .silu_backward = silu_backward_cpu,
    .upsample2x_forward = upsample2x_forward_cpu,
    .upsample2x_backward = upsample2x_backward_cpu,
    .add_forward = add_forward_cpu,
    .accumulate = accumulate_cpu,
    .scale = scale_cpu,
    .recon_loss = recon_loss_cpu,
    .latent_forward = latent_forward_cpu,
    .latent_backward = latent_backward_cpu,
    .normal_fill = normal_fill_cpu,
    .adamw = adamw_cpu,
    .sumsq = sumsq_cpu,
};

const Backend *backend_cpu(void) { return &cpu_backend; }

void backend_cpu_set_threads(int threads) {
    if (threads <= 0) threads = omp_get_num_procs();
    omp_set_num_threads(threads);
    /* the GEMMs run on OpenBLAS's own thread pool, which does not follow omp_set_num_threads */
    openblas_set_num_threads(threads);
}

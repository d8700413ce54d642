/* test_cuda_backend.c: cmocka tests of the CUDA backend beyond what its ops compute (the op table's float64 checks
 * of every op in every storage type are tests/unit/test_backend_ops.c): device memory accounting, uploads and their
 * order against compute (also double-buffered, after an event), the cross-stream events (each direction able to
 * fail), the timers, CUDA Graph capture and replay (a replay reads the per-step values written before it, as the
 * captured training step does), the optimizer's state decided on the device exactly as on the host (the OptimState
 * layout nvcc and gcc share), normal_fill against the CPU to a few ulp, keyed dropout's mask and values against the
 * CPU bit for bit, and, under BackendOptions.deterministic,
 * bitwise-identical reruns of conv backward-filter (float32 and bfloat16) and GroupNorm backward.
 * Without a usable GPU (always in a CPU-only build) it prints exactly one line, "skipped: no CUDA device
 * (<reason>)", and exits 0 without running cmocka; with VX_REQUIRE_GPU=1 (ci/gpu.sh on a GPU machine) that is a
 * failure instead, exit 1. `test_cuda_backend --list` prints the test names; `test_cuda_backend PATTERN...` runs
 * only the tests whose names match one of the shell patterns, so each test can run in a process of its own and a
 * fatal CUDA error in one does not hide the others. Every buffer is released and the backend shut down, so the
 * binary runs clean under compute-sanitizer --tool memcheck --leak-check full. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/spec_table.h"
#include "conv3d/conv3d.h"
#include "dropout/dropout.h"
#include "elementwise/elementwise.h"
#include "groupnorm/groupnorm.h"
#include "latent/latent.h"
#include "loss/loss.h"
#include "normal/normal.h"
#include "optim/optim.h"
#include "augment/augment.h"
#include "require_gpu.h"
#include "test_select.h"
#ifdef VX_CUDA
#include <cuda_runtime.h> /* a second stream, as the NCCL communicator has, for the cross-stream events */
#endif
#include "common/rng.h"

#define TOL 1e-4        /* relative norm error, GPU vs CPU */
#define NORMAL_MAX_ULP 16 /* normal_fill: logf/cosf/sqrtf rounding on each side */

static const Backend *cpu, *gpu;

/* ---- helpers ---------------------------------------------------------------------------------------------- */

#define TEST_RNG_SEED 0x5EED0C0DAull
#include "test_random.h"
#include "silu/silu.h"
#include "upsample/upsample.h"

static float *fcopy(const float *f, long n) {
    float *p = fnew(n);
    memcpy(p, f, sizeof(float) * (size_t)n);
    return p;
}

/* Device buffers: dalloc(n, off) allocates n + off floats and returns the base + off (off 1 makes a pointer that
 * is 4- but not 16-byte aligned, forcing the scalar paths); dfree takes the same off. */
static float *dalloc(long n, int off) {
    return (float *)gpu->alloc(sizeof(float) * (size_t)(n + off > 0 ? n + off : 1)) + off;
}
static void dfree(float *d, int off) { gpu->release(d - off); }
static float *dput_off(const float *h, long n, int off) {
    float *d = dalloc(n, off);
    if (n > 0) gpu->copy_to_device(d, h, sizeof(float) * (size_t)n);
    return d;
}
static float *dput(const float *h, long n) { return dput_off(h, n, 0); }
static float *dget(const float *d, long n) {
    float *h = fnew(n);
    if (n > 0) gpu->copy_to_host(h, d, sizeof(float) * (size_t)n);
    return h;
}

/* ||got - ref|| / ||ref|| (absolute when ref is 0; infinite when got has a NaN) */
static double rel_err(const float *got, const float *ref, long n) {
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        const double e = (double)got[i] - (double)ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    if (num != num) return INFINITY;
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* The device buffer d_gpu (n floats) against the CPU result. */
static void expect_close(const char *what, const float *d_gpu, const float *cpu_ref, long n, double tol) {
    float *g = dget(d_gpu, n);
    const double e = rel_err(g, cpu_ref, n);
    if (!(e <= tol)) print_error("%s: GPU vs CPU relative error %.3g > %.3g\n", what, e, tol);
    free(g);
    assert_true(e <= tol);
}

static void expect_bitwise(const char *what, const float *d_a, const float *d_b, long n) {
    float *a = dget(d_a, n), *b = dget(d_b, n);
    const int same = memcmp(a, b, sizeof(float) * (size_t)n) == 0;
    if (!same) print_error("%s: two runs differ\n", what);
    free(a);
    free(b);
    assert_true(same);
}

static void set_options(int deterministic, int tf32) {
    const BackendOptions o = {.deterministic = deterministic, .allow_tf32 = tf32};
    backend_cuda_set_options(&o);
}

/* ---- noise from device memory, graphs, the optimizer's state ----------------------------------------------- */

static long ulp_distance(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia; /* monotone integer order */
    if (ib < 0) ib = INT32_MIN - ib;
    return labs((long)ia - (long)ib);
}

/* a uint64 in device memory, as the model keeps its noise offset */
static uint64_t *doffset(uint64_t v) {
    uint64_t *d = gpu->alloc(sizeof v);
    gpu->copy_to_device(d, &v, sizeof v);
    return d;
}

static void check_normal(long n, uint64_t offset, int off) {
    float *h = fnew(n), *D = dalloc(n, off);
    uint64_t *O = doffset(offset);
    cpu->normal->fill(n, 42, 7, &offset, h);
    gpu->normal->fill(n, 42, 7, O, D);
    gpu->release(O);
    float *g = dget(D, n);
    long worst = 0;
    for (long i = 0; i < n; i++) {
        const long u = ulp_distance(g[i], h[i]);
        if (u > worst) worst = u;
    }
    if (worst > NORMAL_MAX_ULP) print_error("normal_fill: GPU and CPU differ by %ld ulp\n", worst);
    assert_true(worst <= NORMAL_MAX_ULP); /* a different integer hash would give unrelated values */
    free(h), free(g);
    dfree(D, off);
}

static void test_normal_fill(void **state) {
    check_normal(100003, 777, 0); /* scalar */
    check_normal(100000, 0, 0);   /* float4 */
    check_normal(4096, 5, 1);     /* misaligned */
    /* offset k is the tail of a longer fill, bit for bit, on the GPU too */
    const long n = 10000, k = 333;
    float *A = dalloc(n + k, 0), *B = dalloc(n, 0);
    uint64_t *O0 = doffset(0), *OK = doffset(k);
    gpu->normal->fill(n + k, 9, 3, O0, A);
    gpu->normal->fill(n, 9, 3, OK, B);
    expect_bitwise("normal_fill offset", A + k, B, n);
    dfree(A, 0), dfree(B, 0);
    gpu->release(O0), gpu->release(OK);
}

/* Keyed dropout (dropout.h): the GPU drops exactly the values the CPU drops and scales the kept ones to the same
 * float32 bits (integer hashing, one comparison, one multiply on both sides), forward and backward (beta 0), on the
 * scalar, float4 and misaligned paths, with the batch's first sample read from device memory. */
static void check_dropout(int n, long per_sample, float p, uint64_t first, int off) {
    const DropoutShape s = {.n = n, .per_sample = per_sample, .p = p, .seed = 77, .stream = 5, .dtype = DT_F32};
    const long count = (long)n * per_sample;
    float *x = frand(count, -1, 1), *y = fnew(count), *dx = fnew(count);
    cpu->dropout->forward(&s, &first, x, y);
    cpu->dropout->backward(&s, &first, x, dx, 0.0f);
    float *X = dput_off(x, count, off), *Y = dalloc(count, off), *DX = dalloc(count, off);
    uint64_t *F = doffset(first);
    gpu->dropout->forward(&s, F, X, Y);
    gpu->dropout->backward(&s, F, X, DX, 0.0f);
    float *gy = dget(Y, count), *gdx = dget(DX, count);
    const int same = memcmp(gy, y, sizeof(float) * (size_t)count) == 0 && memcmp(gdx, dx, sizeof(float) * (size_t)count) == 0;
    if (!same) print_error("dropout n=%d x%ld p=%g: GPU and CPU differ\n", n, per_sample, (double)p);
    assert_true(same);
    free(x), free(y), free(dx), free(gy), free(gdx);
    dfree(X, off), dfree(Y, off), dfree(DX, off);
    gpu->release(F);
}

static void test_dropout_matches_cpu(void **state) {
    check_dropout(3, 1001, 0.3f, 12345, 0);    /* scalar */
    check_dropout(4, 4096, 0.5f, 1ull << 40, 0); /* float4, a first sample past 2^32 */
    check_dropout(2, 4096, 0.1f, 7, 1);        /* misaligned */
}

/* A captured graph replays what was enqueued, and reads device memory when it runs: a per-step value written with
 * write_async before each replay (here the noise offset; in training the learning rate and the sample index) is
 * the one the replay uses, as the captured training step needs. Each replay must equal the eager op at its value. */
static void test_graph_replay_reads_device_values(void **state) {
    assert_non_null(gpu->graph_capture_begin);
    const long n = 50000;
    uint64_t *O = doffset(0);
    float *D = dalloc(n, 0), *E = dalloc(n, 0), *F = dalloc(n, 0);
    gpu->graph_capture_begin();
    gpu->normal->fill(n, 5, 11, O, D);
    gpu->elementwise->accumulate(DT_F32, n, D, E, 0.0f); /* E = D: a second kernel depending on the first */
    gpu->elementwise->scale(n, E, 2.0f);
    char why[256];
    void *graph = gpu->graph_capture_end(why, sizeof why);
    if (!graph) print_error("capture failed: %s\n", why);
    assert_non_null(graph);
    for (uint64_t step = 1; step <= 3; step++) {
        const uint64_t offset = 1000 * step;
        gpu->write_async(O, &offset, sizeof offset); /* the host's value, read by this replay */
        gpu->graph_launch(graph);
        uint64_t *Oe = doffset(offset);
        gpu->normal->fill(n, 5, 11, Oe, F);
        gpu->elementwise->scale(n, F, 2.0f);
        expect_bitwise("graph replay vs eager", E, F, n);
        gpu->release(Oe);
    }
    gpu->graph_destroy(graph);
    gpu->release(O);
    dfree(D, 0), dfree(E, 0), dfree(F, 0);
}

/* The optimizer's decisions (optim.h) made in one GPU thread equal the host's: same code, and the OptimState layout
 * nvcc and gcc agree on (a mismatch would scramble the fields). Finite and non-finite norms, with dynamic scaling:
 * the skip, the clip, AdamW's t, the loss scale's halving and growth. */
static void test_optim_prepare_matches_host(void **state) {
    const OptimConfig cfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .grad_clip = 1.0,
                             .dynamic_scale = 1, .growth_interval = 2, .growth = 2.0, .backoff = 0.5};
    OptimState host = {.lr = 3e-4, .loss_scale = 1024.0f}, back;
    OptimState *D = gpu->alloc(sizeof host);
    float *S = dalloc(1, 0);
    gpu->copy_to_device(D, &host, sizeof host);
    const float sums[] = {4.0e6f, 9.0e5f, INFINITY, 1.0e6f, 2.5e5f, NAN, 1.0f};
    for (size_t i = 0; i < sizeof sums / sizeof sums[0]; i++) {
        gpu->copy_to_device(S, &sums[i], sizeof(float));
        gpu->optim->prepare(&cfg, S, D);
        optim_prepare_step(&cfg, sums[i], &host);
        gpu->copy_to_host(&back, D, sizeof back);
        assert_int_equal(back.skip, host.skip);
        assert_int_equal(back.adam_step, host.adam_step);
        assert_int_equal(back.skipped_steps, host.skipped_steps);
        assert_int_equal(back.growth_tracker, host.growth_tracker);
        assert_true(back.loss_scale == host.loss_scale);
        assert_true(back.clip == host.clip);
        if (!host.skip) { /* the constants come from double pow/sqrt on each side: equal after rounding to float */
            assert_true(fabsf(back.c.neg_step - host.c.neg_step) <= 1e-6f * fabsf(host.c.neg_step));
            assert_true(back.c.bc2_sqrt == host.c.bc2_sqrt && back.c.gs == host.c.gs && back.c.decay == host.c.decay);
        }
    }
    assert_int_equal(host.skipped_steps, 2);
    gpu->release(D);
    dfree(S, 0);
}

/* ---- memory, uploads, timers ------------------------------------------------------------------------------ */

static void test_memory_accounting(void **state) {
    const size_t before = gpu->bytes_in_use();
    void *a = gpu->alloc(12345), *b = gpu->alloc(1 << 20);
    assert_int_equal(gpu->bytes_in_use(), before + 12345 + (1 << 20));
    assert_true(gpu->peak_bytes() >= before + 12345 + (1 << 20));
    gpu->release(a);
    assert_int_equal(gpu->bytes_in_use(), before + (1 << 20));
    const size_t peak = gpu->peak_bytes();
    gpu->release(b);
    assert_int_equal(gpu->bytes_in_use(), before);
    assert_int_equal(gpu->peak_bytes(), peak); /* the peak stays */
    gpu->release(NULL);                       /* a no-op */
}

static void test_upload(void **state) {
    const long n = 1 << 22;
    const size_t bytes = sizeof(float) * (size_t)n;
    float *host = gpu->alloc_host(bytes), *ref = frand(n, -1, 1), *ref2 = frand(n, -1, 1);
    memcpy(host, ref, bytes);
    float *D = dalloc(n, 0), *E = dalloc(n, 0);
    /* compute enqueued after the upload sees the data */
    gpu->upload_async(D, host, bytes, NULL);
    gpu->elementwise->scale(n, D, 2.0f);
    gpu->upload_wait();
    memset(host, 0xFF, bytes); /* the host buffer is free once upload_wait returns */
    float *twice = fcopy(ref, n);
    for (long i = 0; i < n; i++) twice[i] *= 2.0f;
    expect_close("upload then compute", D, twice, n, 0.0);
    /* the upload starts after compute enqueued before it: E gets D's old values, D the new ones */
    memcpy(host, ref2, bytes);
    gpu->elementwise->accumulate(DT_F32, n, D, E, 0.0f);
    gpu->upload_async(D, host, bytes, NULL);
    gpu->upload_wait();
    gpu->synchronize();
    expect_close("compute before the upload", E, twice, n, 0.0);
    expect_close("second upload", D, ref2, n, 0.0);
    /* after an event: the copy waits for the reader recorded before it (E = D copied), not for later compute */
    float *F = dalloc(n, 0);
    void *read = gpu->event_create();
    gpu->elementwise->accumulate(DT_F32, n, D, F, 0.0f); /* F = ref2 */
    gpu->event_record(read);
    for (int i = 0; i < 50; i++) gpu->elementwise->scale(n, E, 1.0f); /* later compute the upload need not wait for */
    memcpy(host, ref, bytes);
    gpu->upload_async(D, host, bytes, read);
    gpu->upload_wait();
    gpu->synchronize();
    expect_close("reader before the event", F, ref2, n, 0.0);
    expect_close("upload after the event", D, ref, n, 0.0);
    gpu->event_destroy(read);
    dfree(F, 0);
    gpu->upload_async(D, host, 0, NULL); /* nothing */
    gpu->upload_wait();
    gpu->release_host(host);
    free(ref), free(ref2), free(twice);
    dfree(D, 0), dfree(E, 0);
}

/* The events that order the NCCL communicator's stream against the compute stream: a copy on a side stream waits
 * for the compute work recorded before it, and compute work after event_wait sees the copy. Each direction fails
 * visibly if broken: the compute stream is busy for a while before the record (a copy that did not wait would read
 * D undoubled), and a long copy goes first on the side stream (a compute stream that did not wait would halve E
 * before the ordered copy overwrote it with 2 x ref). */
static void test_cross_stream_events(void **state) {
#ifdef VX_CUDA
    const long n = 1 << 22, big = 1L << 26;
    const size_t bytes = sizeof(float) * (size_t)n;
    float *ref = frand(n, -1, 1), *D = dalloc(n, 0), *E = dalloc(n, 0), *B = dalloc(big, 0), *BC = dalloc(big, 0);
    cudaStream_t side;
    assert_int_equal(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    void *computed = gpu->event_create(), *copied = gpu->event_create();
    gpu->zero(B, sizeof(float) * (size_t)big);
    for (int round = 0; round < 3; round++) {
        gpu->copy_to_device(D, ref, bytes);
        gpu->zero(E, bytes);
        for (int i = 0; i < 100; i++) gpu->elementwise->scale(n, D, 1.0f); /* keeps the compute stream busy for a while */
        gpu->elementwise->scale(n, D, 2.0f);
        gpu->event_record(computed);
        assert_int_equal(cudaStreamWaitEvent(side, (cudaEvent_t)computed, 0), cudaSuccess);
        assert_int_equal(cudaMemcpyAsync(BC, B, sizeof(float) * (size_t)big, cudaMemcpyDeviceToDevice, side),
                         cudaSuccess); /* the side stream's long head start */
        assert_int_equal(cudaMemcpyAsync(E, D, bytes, cudaMemcpyDeviceToDevice, side), cudaSuccess);
        assert_int_equal(cudaEventRecord((cudaEvent_t)copied, side), cudaSuccess);
        gpu->event_wait(copied);
        gpu->elementwise->scale(n, E, 0.5f); /* runs after the copy: E = D / 2 = ref */
        gpu->synchronize();
        expect_close("side-stream copy ordered by events", E, ref, n, 0.0);
    }
    gpu->event_destroy(computed);
    gpu->event_destroy(copied);
    cudaStreamDestroy(side);
    free(ref);
    dfree(D, 0), dfree(E, 0), dfree(B, 0), dfree(BC, 0);
#else
    (void)state;
#endif
}

static void test_timer(void **state) {
    const long n = 1 << 24;
    float *D = dalloc(n, 0), *E = dalloc(n, 0);
    gpu->zero(D, sizeof(float) * (size_t)n);
    gpu->timer_mark(0);
    for (int i = 0; i < 10; i++) gpu->silu->forward(DT_F32, n, D, E);
    gpu->timer_mark(1);
    gpu->elementwise->scale(n, E, 0.5f);
    gpu->timer_mark(BACKEND_TIMER_SLOTS - 1);
    const double a = gpu->timer_elapsed_ms(0, 1), b = gpu->timer_elapsed_ms(0, BACKEND_TIMER_SLOTS - 1);
    assert_true(isfinite(a) && a > 0.0 && a < 60000.0);
    assert_true(b >= a);
    dfree(D, 0), dfree(E, 0);
}

static void test_backend_table(void **state) {
    assert_non_null(gpu);
    assert_ptr_equal(gpu, backend_cuda());
    assert_string_equal(gpu->name, "cuda");
    const void *const fns[] = {
        (void *)gpu->alloc, (void *)gpu->release, (void *)gpu->copy_to_device, (void *)gpu->copy_to_host,
        (void *)gpu->zero, (void *)gpu->synchronize, (void *)gpu->alloc_host, (void *)gpu->release_host,
        (void *)gpu->upload_async, (void *)gpu->upload_wait, (void *)gpu->timer_mark, (void *)gpu->timer_elapsed_ms,
        (void *)gpu->bytes_in_use, (void *)gpu->peak_bytes, (void *)gpu->conv3d->workspace_bytes,
        (void *)gpu->conv3d->forward, (void *)gpu->conv3d->backward_data, (void *)gpu->conv3d->backward_filter,
        (void *)gpu->groupnorm->forward, (void *)gpu->groupnorm->backward, (void *)gpu->silu->forward,
        (void *)gpu->silu->backward, (void *)gpu->upsample->forward, (void *)gpu->upsample->backward,
        (void *)gpu->elementwise->add, (void *)gpu->elementwise->accumulate, (void *)gpu->elementwise->scale,
        (void *)gpu->loss->recon, (void *)gpu->latent->forward, (void *)gpu->latent->backward,
        (void *)gpu->normal->fill, (void *)gpu->optim->adamw, (void *)gpu->optim->sumsq, (void *)gpu->elementwise->cast,
        (void *)gpu->optim->prepare, (void *)gpu->augment->apply, (void *)gpu->write_async,
        (void *)gpu->copy_to_host_async, (void *)gpu->event_synchronize, (void *)gpu->graph_capture_begin,
        (void *)gpu->graph_capture_end, (void *)gpu->graph_launch, (void *)gpu->graph_destroy};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) assert_non_null(fns[i]);
    int n_ops;
    kernel_ops(&n_ops);
    for (int op = 0; op < n_ops; op++) assert_true(kernel_op_supported(gpu, op, DT_F32));
    assert_true(gpu->conv3d->head.supports(CONV3D_FORWARD, DT_BF16) &&
                gpu->groupnorm->head.supports(GROUPNORM_BACKWARD, DT_F16));
    assert_false(gpu->optim->head.supports(OPTIM_SUMSQ, DT_BF16));
    char reason[64];
    assert_int_equal(backend_cuda_init(0, reason, sizeof reason), 1); /* a second init changes nothing */
    /* zero and the blocking copies */
    float src[5] = {1, 2, 3, 4, 5}, back[5], *D = dalloc(5, 0);
    gpu->copy_to_device(D, src, sizeof src);
    gpu->copy_to_host(back, D, sizeof back);
    assert_memory_equal(src, back, sizeof src);
    gpu->zero(D, sizeof src);
    gpu->copy_to_host(back, D, sizeof back);
    for (int i = 0; i < 5; i++) assert_true(back[i] == 0.0f);
    dfree(D, 0);
}

/* ---- determinism ------------------------------------------------------------------------------------------ */

static void test_deterministic(void **state) {
    set_options(1, 0);
    /* conv backward filter: a shape large enough for split reductions inside cuDNN */
    const Conv3dShape s = conv3d_shape(4, 16, 16, 16, 32, 32, 3, 1, 1);
    const long nx = conv3d_input_count(&s), ny = conv3d_output_count(&s), nw = conv3d_weight_count(&s);
    float *x = frand(nx, -1, 1), *r = frand(ny, -1, 1);
    float *X = dput(x, nx), *R = dput(r, ny), *DW1 = dalloc(nw, 0), *DW2 = dalloc(nw, 0), *DB1 = dalloc(32, 0),
          *DB2 = dalloc(32, 0);
    void *ws = gpu->alloc(gpu->conv3d->workspace_bytes(&s));
    gpu->conv3d->backward_filter(&s, X, R, DW1, DB1, 0.0f, ws);
    gpu->conv3d->backward_filter(&s, X, R, DW2, DB2, 0.0f, ws);
    expect_bitwise("deterministic conv dw", DW1, DW2, nw);
    expect_bitwise("deterministic conv dbias", DB1, DB2, 32);
    /* bfloat16 storage: the low-precision weight gradient and its float32 accumulation, twice the same */
    Conv3dShape sb = s;
    sb.dtype = DT_BF16;
    void *XB = gpu->alloc((size_t)nx * 2), *RB = gpu->alloc((size_t)ny * 2);
    gpu->elementwise->cast(nx, DT_F32, X, DT_BF16, XB);
    gpu->elementwise->cast(ny, DT_F32, R, DT_BF16, RB);
    void *wsb = gpu->alloc(gpu->conv3d->workspace_bytes(&sb));
    gpu->conv3d->backward_filter(&sb, XB, RB, DW1, DB1, 0.0f, wsb);
    gpu->conv3d->backward_filter(&sb, XB, RB, DW2, DB2, 0.0f, wsb);
    expect_bitwise("deterministic bf16 conv dw", DW1, DW2, nw);
    expect_bitwise("deterministic bf16 conv dbias", DB1, DB2, 32);
    gpu->release(XB), gpu->release(RB), gpu->release(wsb);
    gpu->conv3d->backward_filter(&s, X, R, DW1, DB1, 0.0f, ws);
    /* and it is still the right answer */
    float *dw = fnew(nw), *db = fnew(32);
    void *cws = malloc(cpu->conv3d->workspace_bytes(&s) + 1);
    cpu->conv3d->backward_filter(&s, x, r, dw, db, 0.0f, cws);
    expect_close("deterministic conv dw vs cpu", DW1, dw, nw, TOL);

    /* groupnorm backward at 24^3 x 64 channels, 16 groups, batch 4 */
    const GroupNormShape g = {.n = 4, .spatial = 24 * 24 * 24, .c = 64, .groups = 16, .eps = 1e-5f};
    const long cnt = (long)g.n * g.spatial * g.c;
    float *gx = frand(cnt, -1, 1), *gr = frand(cnt, -1, 1), *gam = frand(64, 0.5, 1.5), *bet = frand(64, -1, 1);
    float *GX = dput(gx, cnt), *GR = dput(gr, cnt), *GG = dput(gam, 64), *GB = dput(bet, 64);
    float *Y = dalloc(cnt, 0), *M = dalloc(4 * 16, 0), *RS = dalloc(4 * 16, 0);
    gpu->groupnorm->forward(&g, GX, GG, GB, Y, M, RS);
    float *DX[2], *DG[2], *DBt[2];
    for (int run = 0; run < 2; run++) {
        DX[run] = dalloc(cnt, 0), DG[run] = dalloc(64, 0), DBt[run] = dalloc(64, 0);
        gpu->groupnorm->backward(&g, GR, GX, GG, GB, M, RS, DX[run], DG[run], DBt[run], 0.0f, 0.0f);
    }
    expect_bitwise("deterministic groupnorm dx", DX[0], DX[1], cnt);
    expect_bitwise("deterministic groupnorm dgamma", DG[0], DG[1], 64);
    expect_bitwise("deterministic groupnorm dbeta", DBt[0], DBt[1], 64);
    set_options(0, 0);

    free(x), free(r), free(dw), free(db), free(cws), free(gx), free(gr), free(gam), free(bet);
    dfree(X, 0), dfree(R, 0), dfree(DW1, 0), dfree(DW2, 0), dfree(DB1, 0), dfree(DB2, 0);
    gpu->release(ws);
    dfree(GX, 0), dfree(GR, 0), dfree(GG, 0), dfree(GB, 0), dfree(Y, 0), dfree(M, 0), dfree(RS, 0);
    for (int run = 0; run < 2; run++) dfree(DX[run], 0), dfree(DG[run], 0), dfree(DBt[run], 0);
}

/* The test's device allocations are all released: nothing of ours is left in use. */
static int teardown_group(void **state) {
    const size_t left = gpu->bytes_in_use();
    if (left) fprintf(stderr, "test_cuda_backend: %zu bytes still allocated on the device\n", left);
    return left != 0;
}

int main(int argc, char **argv) {
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_backend_table),       cmocka_unit_test(test_normal_fill),
        cmocka_unit_test(test_memory_accounting),   cmocka_unit_test(test_upload),
        cmocka_unit_test(test_timer),               cmocka_unit_test(test_cross_stream_events),
        cmocka_unit_test(test_graph_replay_reads_device_values),
        cmocka_unit_test(test_optim_prepare_matches_host),
        cmocka_unit_test(test_deterministic),       cmocka_unit_test(test_dropout_matches_cpu),
    };
    const size_t n_all = sizeof all / sizeof all[0];
    struct CMUnitTest chosen[sizeof all / sizeof all[0]];
    size_t n;
    const int done = select_tests("test_cuda_backend", argc, argv, all, n_all, chosen, &n);
    if (done >= 0) return done;

    set_options(0, 0); /* TF32 off: the comparisons need float32 accuracy */
    char reason[256];
    if (!backend_cuda_init(0, reason, sizeof reason)) {
        if (vx_require_gpu()) {
            printf("FAILED: no CUDA device (%s), and VX_REQUIRE_GPU=1 turns the skip into a failure\n", reason);
            return 1;
        }
        printf("skipped: no CUDA device (%s)\n", reason);
        return 0;
    }
    cpu = backend_cpu();
    gpu = backend_cuda();
    /* the function behind cmocka_run_group_tests, which takes the count from the array's size */
    const int failed = _cmocka_run_group_tests("test_cuda_backend", chosen, n, NULL, teardown_group);
    backend_cuda_shutdown();
    return failed;
}

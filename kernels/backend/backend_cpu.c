/* backend_cpu.c: the float32 CPU backend's op table (backend.h): host memory (64-byte aligned so AVX-512 loads
 * never split a cache line) and the *_cpu kernels, plus the thread-count setting shared by OpenMP and OpenBLAS.
 * alloc puts the block's size in a 64-byte header in front of it (the returned pointer stays 64-byte aligned),
 * so release can keep bytes_in_use exact; the counters are atomic because the loader thread may allocate too.
 * Uploads are memcpy and the timer is the wall clock: every CPU op has finished when it returns.
 * The ops are each op folder's CPU table (kernels/<op>/<op>_cpu.c: the float32 reference kernels behind thin
 * adapters), listed by ops.def. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/util.h"

#define CPU_ALIGN 64 /* also the size of the header alloc keeps in front of each block */

static size_t cpu_in_use, cpu_peak; /* bytes through cpu_alloc; __atomic builtins only */

/* A failed allocation is out of memory (exit 5, with the plan's figures), not an internal error */
static void *aligned_alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, CPU_ALIGN, bytes ? bytes : CPU_ALIGN) != 0)
        vx_out_of_memory("host", "the CPU backend", bytes, __atomic_load_n(&cpu_in_use, __ATOMIC_RELAXED));
    return p;
}

static void *cpu_alloc(size_t bytes) {
    if (bytes > SIZE_MAX - CPU_ALIGN) vx_out_of_memory("host", "the CPU backend", bytes, 0);
    char *base = aligned_alloc64(bytes + CPU_ALIGN);
    memcpy(base, &bytes, sizeof bytes);
    const size_t now = __atomic_add_fetch(&cpu_in_use, bytes, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&cpu_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&cpu_peak, &peak, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return base + CPU_ALIGN;
}

static void cpu_release(void *ptr) {
    if (!ptr) return;
    char *base = (char *)ptr - CPU_ALIGN;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    __atomic_sub_fetch(&cpu_in_use, bytes, __ATOMIC_RELAXED);
    free(base);
}
static size_t cpu_bytes_in_use(void) { return __atomic_load_n(&cpu_in_use, __ATOMIC_RELAXED); }
static size_t cpu_peak_bytes(void) { return __atomic_load_n(&cpu_peak, __ATOMIC_RELAXED); }

static void *cpu_alloc_host(size_t bytes) { return aligned_alloc64(bytes); }
static void cpu_release_host(void *ptr) { free(ptr); }
static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}
static void cpu_zero(void *ptr, size_t bytes) {
    if (bytes) memset(ptr, 0, bytes);
}
static void cpu_synchronize(void) {} /* every CPU op has finished when it returns */
static void cpu_upload_wait(void) {}
static void cpu_upload_async(void *dst, const void *src, size_t bytes, void *after) {
    (void)after; /* program order */
    cpu_copy(dst, src, bytes);
}

/* timer slots: wall-clock seconds of the last mark, and whether there was one */
static double cpu_marks[BACKEND_TIMER_SLOTS];
static int cpu_marked[BACKEND_TIMER_SLOTS];

static void check_slot(int slot) {
    if (slot < 0 || slot >= BACKEND_TIMER_SLOTS)
        vx_fatal("timer slot %d is outside 0..%d", slot, BACKEND_TIMER_SLOTS - 1);
}
static void cpu_timer_mark(int slot) {
    check_slot(slot);
    cpu_marks[slot] = vx_now();
    cpu_marked[slot] = 1;
}
static double cpu_timer_elapsed_ms(int from_slot, int to_slot) {
    check_slot(from_slot);
    check_slot(to_slot);
    if (!cpu_marked[from_slot] || !cpu_marked[to_slot])
        vx_fatal("timer_elapsed_ms(%d, %d): slot %d was never marked", from_slot, to_slot,
                 cpu_marked[from_slot] ? to_slot : from_slot);
    return (cpu_marks[to_slot] - cpu_marks[from_slot]) * 1e3;
}

/* program order is the only order on the CPU: an event is the wall-clock time of its last record */
static void *cpu_event_create(void) {
    double *t = vx_malloc(sizeof *t);
    *t = NAN;
    return t;
}
static void cpu_event_destroy(void *ev) { free(ev); }
static void cpu_event_record(void *ev) { *(double *)ev = vx_now(); }
static void cpu_event_nop(void *ev) { (void)ev; }
static double cpu_event_elapsed_ms(void *from, void *to) {
    const double a = *(const double *)from, b = *(const double *)to;
    if (isnan(a) || isnan(b)) vx_fatal("event_elapsed_ms: an event was never recorded");
    return (b - a) * 1e3;
}

/* ---- the ops: each op folder's CPU table (kernels/<op>/<op>_cpu.c), registered in ops.def ------------------ */

#define VX_OP(name, Type) extern const struct Type name##_ops_cpu;
#include "backend/ops.def"
#undef VX_OP

static const Backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .copy_to_device = cpu_copy,
    .copy_to_host = cpu_copy,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .alloc_host = cpu_alloc_host,
    .release_host = cpu_release_host,
    .write_async = cpu_copy,
    .copy_to_host_async = cpu_copy,
    .upload_async = cpu_upload_async,
    .upload_wait = cpu_upload_wait,
    .timer_mark = cpu_timer_mark,
    .timer_elapsed_ms = cpu_timer_elapsed_ms,
    .event_create = cpu_event_create,
    .timed_event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_nop,
    .event_synchronize = cpu_event_nop,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .bytes_in_use = cpu_bytes_in_use,
    .peak_bytes = cpu_peak_bytes,
#define VX_OP(name, Type) .name = &name##_ops_cpu,
#include "backend/ops.def"
#undef VX_OP
};

const Backend *backend_cpu(void) { return &cpu_backend; }

void backend_cpu_set_threads(int threads) {
    if (threads <= 0) threads = omp_get_num_procs();
    omp_set_num_threads(threads);
    /* the GEMMs run on OpenBLAS's own thread pool, which does not follow omp_set_num_threads */
    openblas_set_num_threads(threads);
}

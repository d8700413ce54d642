/* util.c: the error, allocation, logging and timing helpers declared in util.h. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <string.h>
#include <time.h>

int vx_log_rank = 0;

void vx_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("voxscale: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(VX_EXIT_USAGE);
}

void vx_fatal_at(const char *file, int line, const char *fmt, ...) {
    int saved_errno = errno;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "voxscale: error at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    if (saved_errno) fprintf(stderr, " (%s)", strerror(saved_errno));
    fputc('\n', stderr);
    va_end(ap);
    exit(VX_EXIT_FAIL);
}

void *vx_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) vx_fatal("out of host memory allocating %zu bytes; lower batch_size or input_size", bytes);
    return p;
}

void *vx_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) vx_fatal("out of host memory allocating %zu x %zu bytes; lower batch_size or input_size", count, size);
    return p;
}

void vx_log(const char *fmt, ...) {
    if (vx_log_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fflush(stdout);
}

double vx_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

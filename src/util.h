/* util.h: error handling and logging shared by every host file.
 * Two kinds of failure, two exits: a user's bad input (config, data, checkpoint, flag) is one line and exit 2;
 * a broken invariant or failed system call is a file:line message and exit 1. Both go to stderr. */
#pragma once
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define VX_EXIT_USAGE 2 /* bad input: the user can fix it */
#define VX_EXIT_FAIL 1  /* internal or system failure */

/* Bad input: prints "voxscale: <message>" and exits with code 2. */
__attribute__((noreturn, format(printf, 1, 2))) void vx_usage_error(const char *fmt, ...);
/* System or internal failure with its source location; exits with code 1. */
__attribute__((noreturn, format(printf, 3, 4))) void vx_fatal_at(const char *file, int line, const char *fmt, ...);
#define vx_fatal(...) vx_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* Checks a libc-style call that returns non-zero / NULL on failure and reports errno. */
#define VX_CHECK(cond, ...)                                                                                  \
    do {                                                                                                     \
        if (!(cond)) vx_fatal(__VA_ARGS__);                                                                  \
    } while (0)

/* malloc/calloc that never return NULL: running out of host memory is reported with the size asked for. */
void *vx_malloc(size_t bytes);
void *vx_calloc(size_t count, size_t size);

/* Rank-aware printing: only rank 0 prints progress (vx_log_rank is set once by the launcher). */
extern int vx_log_rank;
__attribute__((format(printf, 1, 2))) void vx_log(const char *fmt, ...);

/* Monotonic wall clock in seconds. */
double vx_now(void);

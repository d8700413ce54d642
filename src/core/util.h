/* util.h: error handling and logging shared by every host file.
 * Every way voxscale can end has its own exit code (the table below, also in the README), and every failure is one
 * line on stderr that says what went wrong and what to do. Bytes from the input (paths, JSON snippets, values)
 * are printed escaped, so a hostile file cannot put control sequences on the terminal. */
#pragma once
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* Exit codes: one per kind of ending, so scripts and schedulers can react (retry smaller, free disk, ...). */
#define VX_EXIT_OK 0
#define VX_EXIT_FAIL 1     /* internal error: a bug, or a library or system call failing unexpectedly */
#define VX_EXIT_USAGE 2    /* bad input: config, flag, checkpoint or data file; the message says what to fix */
#define VX_EXIT_DIST 3     /* distributed failure: a rank died or a collective timed out */
#define VX_EXIT_DIVERGED 4 /* training diverged: a non-finite loss, gradient or parameter; nothing bad was saved */
#define VX_EXIT_MEMORY 5   /* out of memory (host or GPU), at planning time or at an allocation */
#define VX_EXIT_STORAGE 6  /* cannot write the run's files: disk full, permissions, something in the way */
#define VX_EXIT_SIGNAL 130 /* stopped by SIGINT/SIGTERM: train after writing a checkpoint, others writing nothing */

/* Bad input: prints "voxscale: <message>" and exits with code 2. */
__attribute__((noreturn, format(printf, 1, 2))) void vx_usage_error(const char *fmt, ...);
/* The error line alone, as the functions here print it, for a caller that must act before it exits. */
__attribute__((format(printf, 1, 2))) void vx_error_line(const char *fmt, ...);
/* Any other ending with a message: "voxscale: <message>" and exit `code` (VX_EXIT_*). */
__attribute__((noreturn, format(printf, 2, 3))) void vx_exit_error(int code, const char *fmt, ...);
/* System or internal failure with its source location; exits with code 1. */
__attribute__((noreturn, format(printf, 3, 4))) void vx_fatal_at(const char *file, int line, const char *fmt, ...);
#define vx_fatal(...) vx_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* Ends the process with `code` (after the message, if any, was printed). Fuzz targets and tests may install a
 * handler that is called instead of exit() (it must not return: it longjmps back into the harness), so that a
 * refused input is an ordinary outcome there rather than the end of the fuzzing process. */
__attribute__((noreturn)) void vx_exit(int code);
/* Ends the process with `code` at once, without the handlers registered with atexit: the way out after a failed
 * collective was aborted (comm_fail), when the CUDA backend's exit handler would synchronise streams that the
 * failed collective, or a host function queued before it, still holds. Flushes stdio and runs the handlers
 * registered with at_quick_exit (the TensorBoard event files' flush), then quick_exit. An installed exit handler
 * is called instead, as vx_exit does. */
__attribute__((noreturn)) void vx_exit_now(int code);
typedef void (*VxExitHandler)(int code);
void vx_set_exit_handler(VxExitHandler handler);

/* Copies s into out[len] with every control character, DEL and byte that is not part of valid UTF-8 written as
 * \xNN (and C1 controls U+0080..U+009F too): what error messages print of untrusted input. Returns out. */
char *vx_escape(const char *s, char *out, size_t len);

/* Checks a libc-style call that returns non-zero / NULL on failure and reports errno. */
#define VX_CHECK(cond, ...)                                                                                  \
    do {                                                                                                     \
        if (!(cond)) vx_fatal(__VA_ARGS__);                                                                  \
    } while (0)

/* malloc/calloc/realloc that never return NULL: running out of host memory is one line with the size asked for
 * and exit code 5. */
void *vx_malloc(size_t bytes);
void *vx_calloc(size_t count, size_t size);
void *vx_realloc(void *p, size_t bytes);

/* What the memory plan said ("arena 9.1 MiB + 0.7 MiB parameters, gradients and AdamW state = 9.8 MiB"), set by
 * whoever planned (train/runtime.c) and quoted by an allocation that fails, on any backend: exit 5 with the plan's
 * figures beside the bytes asked for, not exit 1. */
void vx_set_memory_plan(const char *text);
/* An allocation that failed: "out of <what> memory: <who> could not allocate X GiB (N bytes; M in use)[; the plan:
 * ...]; lower ..." and exit 5. */
__attribute__((noreturn)) void vx_out_of_memory(const char *what, const char *who, size_t bytes, size_t in_use);

/* In a run of several ranks every error line names its rank ("voxscale: rank 1/4: ..."); set once at start. */
void vx_set_error_prefix(const char *prefix);

/* Rank-aware printing: only rank 0 prints progress (vx_log_rank is set once by the launcher). */
extern int vx_log_rank;
__attribute__((format(printf, 1, 2))) void vx_log(const char *fmt, ...);
/* -v / --verbose: print the full plan. Without it a run's header is a few lines and vx_detail's lines are kept for
 * the run's plan.txt only. */
extern int vx_verbose;
/* A line of the full plan (the memory of every sharding mode, the host memory plan, ...): printed as vx_log with
 * -v, and kept either way with the lines vx_log printed, for the run's plan.txt (vx_plan_text). */
__attribute__((format(printf, 1, 2))) void vx_detail(const char *fmt, ...);
/* Every line vx_log and vx_detail wrote in this process so far (up to 256 KiB): the full plan a run writes to its
 * folder. "" when none. */
const char *vx_plan_text(void);
/* A progress line (rank 0's): on a terminal one line rewritten in place, cleared by the next vx_log or error line;
 * in a log (stdout not a terminal) a plain line. The text has no newline. */
__attribute__((format(printf, 1, 2))) void vx_status(const char *fmt, ...);
/* 1 when stdout is a terminal (vx_status rewrites its line there). */
int vx_stdout_is_tty(void);

/* Monotonic wall clock in seconds. */
double vx_now(void);

/* An environment switch such as VX_CONV_LOG=1: on when set, not empty and not "0". Read at each call. */
int vx_env_flag(const char *name);

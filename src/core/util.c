/* util.c: the error, exit, allocation, logging and timing helpers declared in util.h. */
#define _POSIX_C_SOURCE 200809L
#include "core/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int vx_log_rank = 0;
int vx_verbose = 0;

static int status_showing; /* a terminal's status line is on screen, without its newline */
static char *plan_text;    /* what vx_log and vx_detail wrote (vx_plan_text) */
static size_t plan_len;
#define PLAN_TEXT_MAX ((size_t)256 << 10)

static VxExitHandler exit_handler;
static char error_prefix[48];

void vx_set_error_prefix(const char *prefix) { snprintf(error_prefix, sizeof error_prefix, "%s", prefix ? prefix : ""); }

void vx_set_exit_handler(VxExitHandler handler) { exit_handler = handler; }

void vx_exit(int code) {
    if (exit_handler) exit_handler(code); /* does not return: longjmps into the fuzz or test harness */
    exit(code);
}

void vx_exit_now(int code) {
    if (exit_handler) exit_handler(code);
    fflush(NULL);
    quick_exit(code);
}

/* Length of the valid UTF-8 sequence at s that is safe to print (not a C1 control), or 0. */
static int printable_utf8(const unsigned char *s) {
    int n = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
    if (n == 0 || s[0] >= 0xF5) return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (n == 2 && s[0] == 0xC2 && s[1] < 0xA0) return 0;                 /* C1 controls: terminal escapes */
    if (n == 3 && s[0] == 0xE0 && s[1] < 0xA0) return 0;                 /* overlong */
    if (n == 3 && s[0] == 0xED && s[1] >= 0xA0) return 0;                /* UTF-16 surrogates */
    if (n == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 0; /* overlong, > U+10FFFF */
    return n;
}

char *vx_escape(const char *s, char *out, size_t len) {
    size_t o = 0;
    if (len == 0) return out;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 1 < len;) {
        int n = *p >= 0x20 && *p < 0x7F ? 1 : *p >= 0x80 ? printable_utf8(p) : 0;
        if (n > 0) {
            if (o + (size_t)n >= len) break;
            memcpy(out + o, p, (size_t)n);
            o += (size_t)n;
            p += n;
        } else {
            if (o + 4 >= len) break;
            snprintf(out + o, 5, "\\x%02X", *p++);
            o += 4;
        }
    }
    out[o] = 0;
    return out;
}

static void clear_status(void) {
    if (!status_showing) return;
    fputs("\r\033[K", stdout);
    fflush(stdout);
    status_showing = 0;
}

/* A word of a message (a path, a value: a run without spaces) longer than LONG_WORD bytes keeps its first and last
 * KEEP_EACH around "...(N bytes left out)...": a 20,000-character CSV path made its line 2 KiB of path, cut there,
 * and the reason after it was lost. */
#define LONG_WORD 240
#define KEEP_EACH 100

/* The start of the UTF-8 character holding s[i] (continuation bytes are 10xxxxxx), not before lo. */
static size_t char_start(const char *s, size_t i, size_t lo) {
    while (i > lo && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

/* in with its long words shortened (see LONG_WORD) into out, which has room for strlen(in) + 1 bytes (a shortened
 * word is always shorter than the word). */
static void shorten_words(const char *in, char *out) {
    size_t o = 0;
    for (size_t i = 0; in[i];) {
        if (in[i] == ' ') {
            out[o++] = in[i++];
            continue;
        }
        size_t end = i;
        while (in[end] && in[end] != ' ') end++;
        const size_t n = end - i;
        if (n <= LONG_WORD) {
            memcpy(out + o, in + i, n);
            o += n;
        } else {
            const size_t head = char_start(in, i + KEEP_EACH, i) - i, tail_at = char_start(in, end - KEEP_EACH, i);
            memcpy(out + o, in + i, head);
            o += head;
            o += (size_t)sprintf(out + o, "...(%zu bytes left out)...", tail_at - (i + head));
            memcpy(out + o, in + tail_at, end - tail_at);
            o += end - tail_at;
        }
        i = end;
    }
    out[o] = 0;
}

/* "voxscale: " + the formatted message, long words shortened, escaped, on one line of stderr, written with one call:
 * ranks that share a stderr (mpirun forwards each rank's writes as they come) would otherwise interleave pieces of
 * their lines. The buffers are the message's size (the stack's, should memory be what ran out). */
static void print_error(const char *prefix, const char *fmt, va_list ap, int saved_errno) {
    clear_status(); /* (on a terminal the error goes where the status line was) */
    char small[2048], small_short[sizeof small], small_safe[4 * sizeof small], small_line[sizeof small_safe + 256];
    va_list aq;
    va_copy(aq, ap);
    const int need = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    const size_t len = need > 0 ? (size_t)need + 1 : 1;
    char *msg = len > sizeof small ? malloc(len) : NULL, *shortened = msg ? malloc(len) : NULL;
    if (!msg || !shortened) {
        free(msg);
        msg = small, shortened = small_short;
    }
    const size_t cap = msg == small ? sizeof small : len;
    vsnprintf(msg, cap, fmt, ap);
    shorten_words(msg, shortened);
    const size_t slen = strlen(shortened), safe_len = 4 * slen + 1, line_len = safe_len + strlen(prefix) + 400;
    char *safe = slen + 1 > sizeof small ? malloc(safe_len) : NULL, *line = safe ? malloc(line_len) : NULL;
    if (!safe || !line) {
        free(safe);
        safe = small_safe, line = small_line;
    }
    const size_t line_cap = line == small_line ? sizeof small_line : line_len;
    int n = snprintf(line, line_cap, "voxscale: %s%s%s%s%s%s\n", error_prefix, prefix,
                     vx_escape(shortened, safe, safe == small_safe ? sizeof small_safe : safe_len),
                     saved_errno ? " (" : "", saved_errno ? strerror(saved_errno) : "", saved_errno ? ")" : "");
    if (n >= (int)line_cap) line[line_cap - 2] = '\n', n = (int)line_cap - 1;
    fwrite(line, 1, (size_t)n, stderr);
    fflush(stderr);
    if (msg != small) free(msg), free(shortened);
    if (safe != small_safe) free(safe), free(line);
}

void vx_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error("", fmt, ap, 0);
    va_end(ap);
    vx_exit(VX_EXIT_USAGE);
}

void vx_error_line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error("", fmt, ap, 0);
    va_end(ap);
}

void vx_exit_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error("", fmt, ap, 0);
    va_end(ap);
    vx_exit(code);
}

void vx_fatal_at(const char *file, int line, const char *fmt, ...) {
    int saved_errno = errno;
    char prefix[256];
    snprintf(prefix, sizeof prefix, "error at %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    print_error(prefix, fmt, ap, saved_errno);
    va_end(ap);
    vx_exit(VX_EXIT_FAIL);
}

static char memory_plan[256];

void vx_set_memory_plan(const char *text) { snprintf(memory_plan, sizeof memory_plan, "%s", text ? text : ""); }

void vx_out_of_memory(const char *what, const char *who, size_t bytes, size_t in_use) {
    char used[64] = "";
    if (in_use) snprintf(used, sizeof used, "; %.2f GiB in use", in_use / 1073741824.0);
    vx_exit_error(VX_EXIT_MEMORY, "out of %s memory: %s could not allocate %.2f GiB (%zu bytes%s)%s%s; lower "
                  "train.batch_size, train.val_samples or model.input_size, or free memory", what, who,
                  bytes / 1073741824.0, bytes, used, memory_plan[0] ? "; the plan: " : "", memory_plan);
}

static void out_of_memory(size_t bytes) { vx_out_of_memory("host", "voxscale", bytes, 0); }

void *vx_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) out_of_memory(bytes);
    return p;
}

void *vx_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) out_of_memory(SIZE_MAX);
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_memory(count * size);
    return p;
}

void *vx_realloc(void *old, size_t bytes) {
    void *p = realloc(old, bytes ? bytes : 1);
    if (!p) out_of_memory(bytes);
    return p;
}

/* Keeps a formatted line for vx_plan_text (bounded: a long run's progress lines stop being kept at the cap). */
static void keep_line(const char *fmt, va_list ap) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* (loader threads log too) */
    char line[4096];
    const int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n <= 0) return;
    const size_t add = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    pthread_mutex_lock(&lock);
    if (plan_len + add + 1 <= PLAN_TEXT_MAX) {
        plan_text = vx_realloc(plan_text, plan_len + add + 1);
        memcpy(plan_text + plan_len, line, add + 1);
        plan_len += add;
    }
    pthread_mutex_unlock(&lock);
}

static void log_line(int print, const char *fmt, va_list ap) {
    va_list copy;
    va_copy(copy, ap);
    keep_line(fmt, copy);
    va_end(copy);
    if (!print) return;
    clear_status();
    vfprintf(stdout, fmt, ap);
    fflush(stdout);
}

void vx_log(const char *fmt, ...) {
    if (vx_log_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    log_line(1, fmt, ap);
    va_end(ap);
}

void vx_detail(const char *fmt, ...) {
    if (vx_log_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    log_line(vx_verbose, fmt, ap);
    va_end(ap);
}

const char *vx_plan_text(void) { return plan_text ? plan_text : ""; }

int vx_stdout_is_tty(void) {
    static int tty = -1;
    if (tty < 0) tty = isatty(STDOUT_FILENO);
    return tty;
}

void vx_status(const char *fmt, ...) {
    if (vx_log_rank != 0) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!vx_stdout_is_tty()) { /* (progress, not plan: not kept for plan.txt) */
        printf("%s\n", line);
        fflush(stdout);
        return;
    }
    printf("\r%s\033[K", line);
    fflush(stdout);
    status_showing = 1;
}

int vx_env_flag(const char *name) {
    const char *e = getenv(name);
    return e && e[0] && strcmp(e, "0") != 0;
}

double vx_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

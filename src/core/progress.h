/* progress.h: progress of a long piece of work (decoding the data, writing a checkpoint, a benchmark, a
 * consolidation) with its rate and ETA, so that nothing runs for minutes in silence. On a terminal it is one line
 * rewritten in place (util.h's vx_status); in a log, a plain line every VX_PROGRESS_S seconds (default 10; 0: at
 * every update, what the tests use). Work that ends before its first line is due prints nothing. Rank 0 prints. */
#pragma once
#include <pthread.h>

typedef struct {
    char what[80];      /* "data: decoding the training volumes" */
    const char *unit;   /* "volumes", "MiB" */
    double total, done; /* in units; total 0: unknown (no percentage, no ETA) */
    double t0, last;    /* start, and the last line */
    int lines;          /* lines printed */
    pthread_mutex_t lock; /* updates may come from worker threads */
} Progress;

/* Seconds between progress lines in a log: VX_PROGRESS_S, default 10; the same interval paces train's heartbeat. */
double progress_interval(void);
/* Seconds between two progress lines now: progress_interval() in a log, at most half a second on a terminal. */
double progress_due_interval(void);
void progress_begin(Progress *p, const char *what, double total, const char *unit);
/* `n` more units done (thread-safe); prints a line when one is due. */
void progress_add(Progress *p, double n);
/* Done: a last line ("... 400 volumes in 33.2 s") when any line was printed, so the log shows it ended. */
void progress_end(Progress *p);
/* "1h02m", "3m05s", "42s" */
void progress_format_eta(double seconds, char *out, size_t len);

/* tb_writer.h: the TensorBoard event writer: scalars, images, histograms, text and hparams into
 * runs/<run>/events.out.tfevents.<seconds>.<host>.<pid>.<n>, readable by TensorBoard and tf.summary readers.
 *
 * Files: one writer per run directory at a time (enforced with a lock on the directory, so also across
 * processes: in a multi-rank job let rank 0 write, or give each rank its own run directory). A writer never
 * appends: every open makes a new file, so a restarted run adds a file next to the old ones and TensorBoard
 * reads them all in order.
 * Durability: records are buffered and written out whole, when an add finds the last write older than
 * flush_secs, when the buffer passes 1 MiB, on tb_writer_flush/close, at exit() (vx_fatal included) and, once
 * tb_writer_install_signal_handlers ran, on SIGINT/SIGTERM. A crash leaves a file TensorBoard reads up to its
 * last whole record.
 * Threads: calls on one writer must not overlap (one logging thread); different writers are independent.
 * Errors: functions return TB_OK (0) or a negative TbStatus for bad arguments; system failures (disk full, no
 * permission) end the program via vx_fatal with a hint. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TB_OK = 0,
    TB_ERR_ARG = -1,   /* NULL pointer, empty tag, zero size, unsupported channel count, duplicate hparam... */
    TB_ERR_BUSY = -2,  /* the run directory already has an open writer (in this process or another) */
    TB_ERR_LIMIT = -3, /* too many writers open at once (TB_MAX_OPEN_WRITERS) */
    TB_ERR_STATE = -4, /* call out of order: hparams added twice, session ended twice or before hparams */
} TbStatus;

#define TB_MAX_OPEN_WRITERS 64

/* A short description of a TbStatus value, for messages. */
const char *tb_status_str(int status);

typedef struct TbWriter TbWriter;

typedef struct {
    double flush_secs; /* longest time records stay buffered while adds keep coming; <= 0 means 5 seconds */
} TbWriterOptions;

/* Creates run_dir (and parents) if needed and a new event file in it, whose first record is the
 * "brain.Event:2" file version. opts may be NULL. On success *out is the writer. */
int tb_writer_open(TbWriter **out, const char *run_dir, const TbWriterOptions *opts);
/* Ends the hparams session (status success) if hparams were added and no tb_writer_end_session came, writes
 * out and fsyncs the file, closes it and frees w. NULL is accepted (TB_ERR_ARG). */
int tb_writer_close(TbWriter *w);
/* Writes buffered records to the file now (no fsync). */
int tb_writer_flush(TbWriter *w);
/* Path of the event file this writer writes. */
const char *tb_writer_path(const TbWriter *w);

/* Pass as wall_time to stamp a value with the current time. */
#define TB_WALL_TIME_NOW 0.0

/* A scalar, stored as a 32-bit float as TensorBoard does. wall_time is seconds since the epoch, or
 * TB_WALL_TIME_NOW (any value <= 0). The first value of a tag carries the scalars plugin's metadata. */
int tb_writer_add_scalar(TbWriter *w, const char *tag, int64_t step, double value, double wall_time);

/* An image from 8-bit pixels: height rows of width*channels bytes, channels 1 (gray) or 3 (RGB); encoded as
 * PNG. Volumes are logged one slice (or a montage of slices) at a time. */
int tb_writer_add_image(TbWriter *w, const char *tag, int64_t step, const uint8_t *pixels, int width, int height,
                        int channels);

/* A histogram of values[0..count) with TensorFlow's default exponential buckets. NaN and +-Inf are left out;
 * once a tag has seen any, their count per call is also logged as the scalar "<tag>/nonfinite".
 * Returns the number of non-finite values left out (>= 0), or a negative TbStatus. */
int64_t tb_writer_add_histogram(TbWriter *w, const char *tag, int64_t step, const float *values, size_t count);

/* Markdown text for the text dashboard. */
int tb_writer_add_text(TbWriter *w, const char *tag, int64_t step, const char *markdown);

/* A description (markdown) of tag, which its first value then carries (SummaryMetadata.summary_description: what
 * TensorBoard shows with the tag, e.g. an image's rows and columns); scalars and images take it. Call it before the
 * tag's first value (TB_ERR_STATE after); a second call for the same tag replaces the text. */
int tb_writer_describe(TbWriter *w, const char *tag, const char *description);

/* Hyperparameters: numbers, strings or booleans. */
typedef enum { TB_HPARAM_TYPE_NUMBER, TB_HPARAM_TYPE_STRING, TB_HPARAM_TYPE_BOOL } TbHParamType;
typedef struct {
    const char *name;
    TbHParamType type;
    double number;      /* TB_HPARAM_TYPE_NUMBER */
    const char *string; /* TB_HPARAM_TYPE_STRING */
    bool boolean;       /* TB_HPARAM_TYPE_BOOL */
} TbHParam;
#define TB_HPARAM_NUM(n, v) ((TbHParam){.name = (n), .type = TB_HPARAM_TYPE_NUMBER, .number = (v)})
#define TB_HPARAM_STR(n, v) ((TbHParam){.name = (n), .type = TB_HPARAM_TYPE_STRING, .string = (v)})
#define TB_HPARAM_BOOL(n, v) ((TbHParam){.name = (n), .type = TB_HPARAM_TYPE_BOOL, .boolean = (v)})

/* Makes this run a session of the HParams dashboard: writes the hparams plugin's experiment (the hparams and
 * the metric tags, i.e. scalar tags of this run to show next to them) and session_start_info (this run's
 * values). Once per writer. TensorBoard shows one experiment per logdir, taken from any run, so runs meant to
 * be compared should log the same hparam names and metrics. */
int tb_writer_add_hparams(TbWriter *w, const TbHParam *params, size_t n_params, const char *const *metric_tags,
                          size_t n_metrics);

typedef enum { TB_SESSION_SUCCESS = 1, TB_SESSION_FAILURE = 2, TB_SESSION_RUNNING = 3 } TbSessionStatus;
/* Writes session_end_info with status (e.g. TB_SESSION_FAILURE when training diverged). Optional: close ends
 * the session as a success otherwise. */
int tb_writer_end_session(TbWriter *w, TbSessionStatus status);

/* Installs SIGINT and SIGTERM handlers that write out every open writer's buffer, then give the signal to the
 * handler that was there before (by default: the process ends as killed by that signal). Idempotent. */
void tb_writer_install_signal_handlers(void);
/* For programs with signal handlers of their own: writes out every open writer's buffered whole records.
 * Async-signal-safe; call it from the handler. */
void tb_writer_flush_all_on_signal(void);

#ifdef __cplusplus
}
#endif

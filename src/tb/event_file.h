/* event_file.h: the file half of the event writer (internal to src/tb): a new uniquely named event file per
 * open, a buffer of whole TFRecord records, time- and size-based flushing, and flushing from signal handlers
 * and exit(). tb_writer.c puts serialized Event messages into it. */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct EventFile EventFile;

/* Locks run_dir (created if missing) and creates a new event file in it. Returns TB_OK, TB_ERR_BUSY or
 * TB_ERR_LIMIT; system failures are fatal. */
int event_file_open(EventFile **out, const char *run_dir, double flush_secs);
/* Reserves room for one record of n data bytes and returns where the n bytes go. Must be followed by
 * event_file_end_record before any other call on f. */
uint8_t *event_file_begin_record(EventFile *f, size_t n);
/* Frames the record begun last and flushes if the buffer is old or large. */
void event_file_end_record(EventFile *f);
void event_file_flush(EventFile *f);
/* Flushes, fsyncs, closes, unlocks the directory and frees f. */
void event_file_close(EventFile *f);
const char *event_file_path(const EventFile *f);
/* Async-signal-safe: writes the buffered records of every open file of this process. */
void event_file_flush_all_signal_safe(void);

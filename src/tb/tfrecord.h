/* tfrecord.h: TFRecord framing, the container of TensorBoard event files, and a strict reader for it.
 * A record is: u64 little-endian length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data.
 * The reader stops at the first record that is cut short or fails a CRC and says where and why, which is what
 * TensorBoard does with a file whose writer died mid-record. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define TFRECORD_HEADER_BYTES 12 /* length + its CRC */
#define TFRECORD_FOOTER_BYTES 4  /* CRC of the data */
#define TFRECORD_OVERHEAD (TFRECORD_HEADER_BYTES + TFRECORD_FOOTER_BYTES)

/* Writes the 12 header bytes for a record of n data bytes into dst. */
void tfrecord_write_header(uint8_t dst[TFRECORD_HEADER_BYTES], uint64_t n);
/* Writes the 4 footer bytes (masked CRC of data[0..n)) into dst. */
void tfrecord_write_footer(uint8_t dst[TFRECORD_FOOTER_BYTES], const uint8_t *data, size_t n);
/* Frames data into dst, which must hold n + TFRECORD_OVERHEAD bytes; returns the bytes written. */
size_t tfrecord_frame(uint8_t *dst, const uint8_t *data, size_t n);

typedef enum {
    TFRECORD_OK = 0,        /* a whole record with good CRCs was read */
    TFRECORD_END,           /* clean end: no bytes left */
    TFRECORD_TRUNCATED,     /* bytes left, but fewer than the record's header or its stated length needs */
    TFRECORD_BAD_LENGTH_CRC, /* the length's CRC does not match (this is also how a zero-filled tail shows) */
    TFRECORD_BAD_DATA_CRC,  /* the data's CRC does not match */
} TfRecordStatus;

const char *tfrecord_status_name(TfRecordStatus s);

/* Reads the record at *offset in buf[0..len). On TFRECORD_OK sets *data and *n to point into buf and advances
 * *offset past the record; otherwise leaves *offset at the start of the bad record. */
TfRecordStatus tfrecord_next(const uint8_t *buf, size_t len, size_t *offset, const uint8_t **data, size_t *n);

/* Outcome of reading a whole file: how many good records, the byte offset just past the last good one, and
 * why the reading stopped (TFRECORD_END for a file that is whole). */
typedef struct {
    size_t records;
    size_t good_bytes;
    size_t file_bytes;
    TfRecordStatus stop;
} TfRecordScan;

/* Called for each good record in order; returning non-zero stops the scan early (stop is then TFRECORD_OK). */
typedef int (*TfRecordFn)(const uint8_t *data, size_t n, void *ctx);

/* Reads the file at path and calls fn (may be NULL) for every record up to the last good one.
 * Returns 0, or -1 with errno set when the file cannot be read. */
int tfrecord_scan_file(const char *path, TfRecordFn fn, void *ctx, TfRecordScan *out);

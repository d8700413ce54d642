/* tfrecord.c: TFRecord framing for the event writer and the strict record reader used by tests and tools. */
#include "tb/tfrecord.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb/crc32c.h"

/* TFRecord is little-endian whatever the host; these keep the code right on big-endian machines too. */
static void store_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void store_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

void tfrecord_write_header(uint8_t dst[TFRECORD_HEADER_BYTES], uint64_t n) {
    store_le64(dst, n);
    store_le32(dst + 8, crc32c_mask(crc32c(dst, 8)));
}

void tfrecord_write_footer(uint8_t dst[TFRECORD_FOOTER_BYTES], const uint8_t *data, size_t n) {
    store_le32(dst, crc32c_mask(crc32c(data, n)));
}

size_t tfrecord_frame(uint8_t *dst, const uint8_t *data, size_t n) {
    tfrecord_write_header(dst, n);
    if (n) memcpy(dst + TFRECORD_HEADER_BYTES, data, n);
    tfrecord_write_footer(dst + TFRECORD_HEADER_BYTES + n, data, n);
    return n + TFRECORD_OVERHEAD;
}

const char *tfrecord_status_name(TfRecordStatus s) {
    switch (s) {
    case TFRECORD_OK: return "ok";
    case TFRECORD_END: return "end";
    case TFRECORD_TRUNCATED: return "truncated";
    case TFRECORD_BAD_LENGTH_CRC: return "bad_length_crc";
    case TFRECORD_BAD_DATA_CRC: return "bad_data_crc";
    }
    return "unknown";
}

TfRecordStatus tfrecord_next(const uint8_t *buf, size_t len, size_t *offset, const uint8_t **data, size_t *n) {
    size_t off = *offset;
    if (off >= len) return TFRECORD_END;
    size_t left = len - off;
    const uint8_t *p = buf + off;
    if (left < TFRECORD_HEADER_BYTES) return TFRECORD_TRUNCATED;
    /* The length is only trusted after its own CRC passed: a garbage length must not send us reading far away. */
    if (crc32c_mask(crc32c(p, 8)) != load_le32(p + 8)) return TFRECORD_BAD_LENGTH_CRC;
    uint64_t rec_len = load_le64(p);
    if (left < TFRECORD_OVERHEAD || rec_len > left - TFRECORD_OVERHEAD) return TFRECORD_TRUNCATED;
    const uint8_t *d = p + TFRECORD_HEADER_BYTES;
    if (crc32c_mask(crc32c(d, (size_t)rec_len)) != load_le32(d + rec_len)) return TFRECORD_BAD_DATA_CRC;
    *data = d;
    *n = (size_t)rec_len;
    *offset = off + (size_t)rec_len + TFRECORD_OVERHEAD;
    return TFRECORD_OK;
}

/* Reads a whole file into memory: event files are read back only by tests and tools, and are small there. */
static int read_whole_file(const char *path, uint8_t **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            errno = ENOMEM;
            return -1;
        }
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *nb = realloc(b, cap * 2);
        if (!nb) free(b);
        b = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(b);
        errno = EIO;
        return -1;
    }
    *buf = b;
    *len = n;
    return 0;
}

int tfrecord_scan_file(const char *path, TfRecordFn fn, void *ctx, TfRecordScan *out) {
    uint8_t *buf;
    size_t len;
    if (!path || !out) {
        errno = EINVAL;
        return -1;
    }
    if (read_whole_file(path, &buf, &len) != 0) return -1;
    TfRecordScan s = {.file_bytes = len};
    size_t off = 0;
    for (;;) {
        const uint8_t *d;
        size_t n;
        s.stop = tfrecord_next(buf, len, &off, &d, &n);
        if (s.stop != TFRECORD_OK) break;
        s.records++;
        s.good_bytes = off;
        if (fn && fn(d, n, ctx) != 0) break;
    }
    free(buf);
    *out = s;
    return 0;
}

/* safetensors.h: the safetensors file format (Hugging Face's; what safetensors.torch.load_file and save_file read and
 * write), read and written without a new dependency:
 *   u64 little endian N | N bytes of JSON header | the data section
 * The header is one object: each key a tensor name mapped to {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}
 * (byte offsets into the data section), and optionally "__metadata__": an object of string values.
 * A file is input, so the reader checks it as strictly as the reference implementation, and names the first problem
 * in one line (exit 2): the header length within the file (and its 100 MB bound), valid UTF-8 JSON of one object
 * with nothing after it but spaces, no key twice, a known dtype, a shape of non-negative integers, offsets in order
 * and inside the data, tensors back to back (no overlap, no hole, nothing after the last), and each tensor's byte
 * count equal to its shape times its dtype's size. Nothing is trusted before it is checked, so a tensor's bytes can
 * be read straight from the buffer afterwards. tests/fuzz/fuzz_safetensors.c fuzzes st_parse.
 * The writer pads the header with spaces so that the data starts 8-byte aligned, as the reference writer does. */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32, ST_F32, ST_F64,
    ST_I64, ST_U64, ST_N_DTYPES
} StDtype;

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER 100000000ULL /* the reference implementation's bound */

typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* bytes of the data section */
} StTensor;

typedef struct {
    const unsigned char *buf; /* the whole file */
    unsigned char *owned;     /* buf when st_read read it (freed by st_free) */
    size_t len;
    size_t data_at;           /* 8 + the header's length: where the data section starts */
    StTensor *t;              /* in the header's order */
    int n;
    char **meta_key, **meta_val; /* "__metadata__" */
    int n_meta;
    char origin[512];         /* what errors call the file */
} StFile;

const char *st_dtype_name(StDtype dt);
size_t st_dtype_size(StDtype dt);
int st_is_float(StDtype dt); /* F16, BF16, F32, F64: what parameters can be read from */
int64_t st_count(const StTensor *t);

/* Checks buf[len] as a safetensors file (origin names it in errors; buf must outlive out) and indexes it into out.
 * Exits 2 with one line naming the first problem. */
void st_parse(const unsigned char *buf, size_t len, const char *origin, StFile *out);
/* Reads the file at path (a regular file of at most max_bytes) and parses it; exits 2 when it cannot. */
void st_read(const char *path, size_t max_bytes, StFile *out);
void st_free(StFile *f);
/* The tensor named name, or NULL. */
const StTensor *st_find(const StFile *f, const char *name);
/* The metadata value of key, or NULL. */
const char *st_meta(const StFile *f, const char *key);
/* A float tensor's elements as float32 (F64 rounded, F16 and BF16 widened), in the file's order. */
void st_to_f32(const StFile *f, const StTensor *t, float *out);
/* Writes "[2, 512]" for a shape (what reports print). */
void st_shape_text(const int64_t *shape, int ndim, char *out, size_t len);

/* The writer: tensors are kept in the order added (their data copied) and written by st_writer_save, atomically. */
typedef struct StWriter StWriter;
StWriter *st_writer_new(void);
void st_writer_meta(StWriter *w, const char *key, const char *value);
void st_writer_add(StWriter *w, const char *name, StDtype dt, int ndim, const int64_t *shape, const void *data);
/* The file's bytes (caller frees) and their count: what st_writer_save writes. */
unsigned char *st_writer_bytes(const StWriter *w, size_t *len);
void st_writer_save(const StWriter *w, const char *path);
void st_writer_free(StWriter *w);

/* ckpt.h: checkpoints: model parameters, AdamW moments, step, data position and seeds, with a CRC-32.
 * Written to <path>.tmp, fsynced and renamed, so a crash leaves the previous checkpoint intact; nothing non-finite
 * is ever written. A checkpoint is input: loading checks the size, magic, version, header size, checksum, model
 * fingerprint and seed, and range-checks every header field against the model and config before anything uses
 * it; any mismatch is a one-line error with exit 2.
 *
 * Layout (little endian):
 *   CkptHeader | params[count] f32 | adam_m[count] f32 | adam_v[count] f32 | [buffers[buffer_count] f32] |
 *   crc32 (u32, of all bytes before)
 * with each array in the model's packed layout (views back to back, model.h), whatever the device alignment.
 * Version 2 added the optimizer's carried state (AdamW's t, the loss scale and its growth count, the skipped steps)
 * to the end of the header; a version 1 checkpoint still loads: AdamW's t is its step, the loss scale the run's.
 * Version 3 adds buffer_count and the buffers (BatchNorm's running statistics, model.h) after the moments; a model
 * without buffers (ae3d) is still written as version 2, byte for byte as before. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "graph/model.h"
#include "optim/optim.h"

#define CKPT_MAGIC "VXCKPT\r\n"
#define CKPT_VERSION 3
#define CKPT_MAX_WORLD (1 << 20) /* ranks: far beyond any cluster, small enough that products cannot overflow */

typedef struct {
    char magic[8];
    uint32_t version, header_bytes;
    uint64_t param_count;
    uint64_t model_fingerprint;
    int64_t step;        /* optimizer steps completed */
    int64_t next_sample; /* global index of the next training sample: samples, not batches, so that a run resumes
                            exactly at any batch size (and any number of ranks) */
    int64_t seed;
    int64_t world_size;  /* ranks that wrote it */
    double loss_ema;     /* for the progress line only */
    /* version 2: */
    int64_t adam_step, skipped_steps, growth_tracker;
    double loss_scale;
    /* version 3: */
    uint64_t buffer_count;
} CkptHeader;
#define CKPT_V1_HEADER_BYTES offsetof(CkptHeader, adam_step)
#define CKPT_V2_HEADER_BYTES offsetof(CkptHeader, buffer_count)

typedef struct {
    int64_t step, next_sample;
    double loss_ema;
    int64_t world_size; /* ranks of the run that saves it (0 is taken as 1) */
    OptimCarry opt;     /* the optimizer's carried state (optim.h) */
} CkptState;

/* What a checkpoint must agree with: the model it is loaded into and the run's config. */
typedef struct {
    uint64_t param_count, buffer_count, model_fingerprint;
    int64_t seed, steps; /* train.seed, train.steps */
} CkptExpect;

/* A checkpoint verified in host memory (ckpt_read), not yet applied to a model. */
typedef struct {
    CkptHeader header;
    unsigned char *file; /* the whole file; the three packed arrays follow the header in it */
    size_t bytes;
} Ckpt;

/* The command reading checkpoints, for its messages: its flag ("--resume", train's, the default; "--ckpt"; "SHARDED")
 * and what to do instead of a damaged one ("resume from an earlier checkpoint"). */
void ckpt_set_reader(const char *flag, const char *instead);
const char *ckpt_reader_next(void);

/* zlib's CRC-32 of n bytes (any length), what every checkpoint file ends with. */
uint32_t ckpt_crc32(const void *p, size_t n);

/* What a checkpoint for model m in a run of `steps` optimizer steps in all must agree with. */
CkptExpect ckpt_expect(const Model *m, int64_t steps);
/* Bytes of a checkpoint of param_count parameters and buffer_count buffer floats (as ckpt_save writes it). */
size_t ckpt_file_bytes(uint64_t param_count, uint64_t buffer_count);
/* Verifies buf[len] as a checkpoint matching `want` (origin names it in errors) and copies its header to out.
 * Exits 2 with one line naming the first problem. The checkpoint loader's fuzz target enters here. */
void ckpt_verify(const unsigned char *buf, size_t len, const CkptExpect *want, const char *origin, CkptHeader *out);
/* The checks ckpt_verify makes of a header's fields once the bytes are known to be the ones written (model, seed,
 * ranks, step, data position, optimizer state): what a sharded checkpoint's manifest (ckpt_shard.h) is held to
 * too. h->version 1 gets its optimizer state filled in as ckpt_verify does. Exits 2 naming the first problem. */
void ckpt_check_header(CkptHeader *h, const CkptExpect *want, const char *origin);

/* What identifies a checkpoint to resume from, whatever its format: its step, data position and a checksum of its
 * content; the ranks compare it before they start (train/rank_agree.h). */
typedef struct {
    int64_t step, next_sample;
    uint32_t crc;
} CkptId;
CkptId ckpt_id(const Ckpt *c);
/* Reads and verifies the file at path against model m and a run of `steps` optimizer steps in all (nothing
 * allocated on the backend yet, nothing written): the checks happen before the run touches its directory. */
void ckpt_read(const char *path, const Model *m, int64_t steps, Ckpt *out);
/* Uploads a verified checkpoint's parameters, moments and buffers into the allocated model, returns its state. */
void ckpt_apply(const Ckpt *c, Model *m, CkptState *st);
/* A verified checkpoint's arrays in host memory in the model's flat layout (param_floats each, padding zero; any may
 * be NULL) and its buffers (buffer_floats), and its state (may be NULL). */
void ckpt_unpack(const Ckpt *c, const Model *m, float *param, float *adam_m, float *adam_v, float *bufs, CkptState *st);
void ckpt_free(Ckpt *c);

/* Copies the model state to the host, refuses non-finite values (exit 4, naming the step: a diverged state is
 * never saved) and writes it atomically. */
void ckpt_save(const char *path, const Model *m, const CkptState *st);

/* A checkpoint's content in host memory: the packed arrays (param_count floats each) and the buffers. */
typedef struct {
    uint64_t param_count, buffer_count, model_fingerprint;
    int64_t seed;
    CkptState st;
    const float *param, *adam_m, *adam_v, *bufs;
} CkptContent;
/* Writes it as ckpt_save does (the same bytes for the same content; non-finite values refused with exit 4). */
void ckpt_write(const char *path, const CkptContent *c);
/* Those bytes (malloc'd, *len of them), for a writer of its own (ckpt consolidate's, which never overwrites). */
unsigned char *ckpt_bytes(const CkptContent *c, size_t *len);

/* ckpt.h: checkpoints: model parameters, AdamW moments, step, data position and seeds, with a CRC-32.
 * Written to <path>.tmp, fsynced and renamed, so a crash leaves the previous checkpoint intact. Loading checks
 * the magic, version, sizes, model fingerprint and checksum; any mismatch is a one-line error with exit 2.
 *
 * Layout (little endian):
 *   CkptHeader | params[count] f32 | adam_m[count] f32 | adam_v[count] f32 | crc32 (u32, of all bytes before)
 * with each array in the model's packed layout (views back to back, model.h), whatever the device alignment. */
#pragma once
#include <stdint.h>

#include "model.h"

#define CKPT_MAGIC "VXCKPT\r\n"
#define CKPT_VERSION 1

typedef struct {
    char magic[8];
    uint32_t version, header_bytes;
    uint64_t param_count;
    uint64_t model_fingerprint;
    int64_t step;        /* optimizer steps completed */
    int64_t next_sample; /* index of the next training volume the loader would read */
    int64_t seed;
    int64_t world_size;  /* ranks that wrote it (1 for now) */
    double loss_ema;     /* for the progress line only */
} CkptHeader;

typedef struct {
    int64_t step, next_sample;
    double loss_ema;
} CkptState;

/* Copies the model state to the host and writes it atomically. */
void ckpt_save(const char *path, const Model *m, const CkptState *st);
/* Loads into an allocated model; exits 2 with a clear line if the file is not a checkpoint of this model. */
void ckpt_load(const char *path, Model *m, CkptState *st);

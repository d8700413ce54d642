/* ckpt_shard.h: sharded checkpoints (sharded data parallelism, train/zero.h): a directory step_N.zero/ holding one
 * file per rank, rank<r>-of-<W>.shard, with that rank's shard of the float32 master weights and AdamW moments in
 * the model's flat layout, and manifest.json, written last, which makes the checkpoint: the run's state (what an
 * ordinary checkpoint's header holds: step, data position, seed, the optimizer's carried state, the model), the
 * layout (world size, stage, shard floats) and each shard's file, range, size and CRC-32. Every file is written to a
 * temporary name, fsynced and renamed (core/fsutil.h), so a crash mid-save leaves no manifest naming a half-written
 * shard, and the previous checkpoint (another directory) intact.
 *
 * Shard file (little endian): ShardHeader | master[count] | adam_m[count] | adam_v[count] | [buffers] | CRC-32
 * (the buffers, BatchNorm's running statistics, in rank 0's file only). The flat layout does not depend on the
 * world size, so a checkpoint written by N ranks at any stage loads on M ranks at any stage, or unsharded: the
 * reader assembles whole arrays (DeepSpeed's universal checkpoint), and ckpt_sharded_content makes them the
 * ordinary checkpoint format (`voxscale ckpt consolidate`). A checkpoint is input: the manifest's every field is
 * checked as an ordinary header's (ckpt_check_header), its own CRC-32 (MANIFEST_VERSION), every shard it names must
 * exist with its size, CRC and a
 * header naming this checkpoint, and any problem is one line naming the file, exit 2, before anything is written. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"
#include "graph/model.h"

#define SHARD_MAGIC "VXSHARD\n"
#define SHARD_VERSION 1
#define SHARD_MANIFEST "manifest.json"
/* The manifest's own format: 2 ends with "manifest_crc32", the CRC-32 of every byte before its line, so that an
 * edited manifest (next_sample, the step's state) is refused as a damaged checkpoint is; 1 (earlier builds) has
 * none and is still read. */
#define MANIFEST_VERSION 2
#define MANIFEST_CRC_KEY "\"manifest_crc32\": "

typedef struct {
    char magic[8];
    uint32_t version, header_bytes;
    uint64_t checkpoint_id;     /* the manifest's: which checkpoint this shard belongs to */
    uint64_t model_fingerprint;
    int64_t step;
    int32_t rank, world, zero, reserved;
    uint64_t flat_floats;       /* the model's flat layout (param_floats) */
    uint64_t begin, count;      /* this shard: flat floats [begin, begin + count), the last reaching into the padding */
    uint64_t buffer_count;      /* rank 0: the buffers follow the moments; 0 elsewhere */
} ShardHeader;

/* What one rank writes: its shard (host memory, count floats each) and, on rank 0, the buffers. */
typedef struct {
    uint64_t checkpoint_id;
    int rank, world, zero;
    uint64_t begin, count;
    const float *master, *adam_m, *adam_v;
    const float *bufs; /* rank 0: m->buffer_floats of them; NULL elsewhere */
} ShardWrite;

/* <dir>/rank<r>-of-<W>.shard for model m at state st; returns its CRC-32 (every rank's goes into the manifest). */
uint32_t ckpt_shard_write(const char *dir, const Model *m, int64_t step, const ShardWrite *w);
/* <dir>/manifest.json: the checkpoint, once every shard is written: crcs[r] is rank r's file's CRC-32. */
void ckpt_manifest_write(const char *dir, const Model *m, const CkptState *st, uint64_t checkpoint_id, int world,
                         int zero, uint64_t shard, const uint32_t *crcs);

/* A sharded checkpoint verified and assembled in host memory, in the model's flat layout. */
typedef struct {
    CkptHeader header;  /* the manifest's state, as an ordinary checkpoint's header holds it */
    int world, zero;
    float *param, *adam_m, *adam_v; /* param_floats each */
    float *bufs;                    /* buffer_count */
    CkptId id;                      /* step, position and the manifest's CRC-32 */
} ShardedCkpt;

/* 1 when path names a sharded checkpoint: a directory, or a file named manifest.json. */
int ckpt_is_sharded(const char *path);
/* Reads and verifies the sharded checkpoint at path (its directory or manifest) against model m and a run of
 * `steps` optimizer steps (steps 0: any, for consolidate). Exits 2 with one line naming the first bad file. */
void ckpt_sharded_read(const char *path, const Model *m, int64_t steps, ShardedCkpt *out);
/* The model a sharded checkpoint's manifest names (fingerprint, parameters), unverified: 1, or 0 when unreadable (the
 * reader then says why). For a message that names the real cause before the checks run. */
int ckpt_sharded_peek(const char *dir, uint64_t *fingerprint, uint64_t *param_count);
void ckpt_sharded_free(ShardedCkpt *c);
/* Its content as an ordinary checkpoint's (ckpt_write), packed into host arrays the caller frees with
 * ckpt_content_free. */
void ckpt_sharded_content(const ShardedCkpt *c, const Model *m, CkptContent *out);
void ckpt_content_free(CkptContent *c);

/* train_ckpt.h: the run's checkpoints in both formats (internal to src/train): reading the one --resume names,
 * ordinary (ckpt/ckpt.h) or sharded (ckpt/ckpt_shard.h), into the model whatever the run's own sharding (N ranks
 * to M, ZeRO to DDP and back), and writing a sharded run's (every rank its shard, rank 0 the manifest). */
#pragma once
#include <stdint.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_shard.h"
#include "parallel/comm.h"
#include "train/zero.h"

typedef struct {
    int sharded;
    Ckpt ck;         /* ordinary */
    ShardedCkpt sc;  /* sharded */
    CkptId id;       /* what the ranks compare (rank_agree.h) */
} Resume;

/* Reads and verifies the checkpoint at path for model m and a run of `steps` steps (exit 2 naming the problem);
 * writes nothing. */
void resume_read(const char *path, const Model *m, int64_t steps, Resume *r);
/* The step an ordinary checkpoint's header names, read unverified (only to choose which stage's model resume_read
 * then verifies the whole file against: a wrong answer fails that verification), or -1 when path is no readable
 * ordinary checkpoint (sharded checkpoints: -1, read as stage 0's; a vit3d run that changes its layout across
 * stages is never sharded, so its own checkpoints are all ordinary). */
int64_t resume_peek_step(const char *path);
/* Into the allocated model: parameters and buffers, and the moments into the model (z NULL) or this rank's shard
 * (z); st gets the run's state. */
void resume_apply(const Resume *r, Model *m, Zero *z, CkptState *st);
void resume_free(Resume *r);
/* The step the checkpoint was written at. */
int64_t resume_step(const Resume *r);
/* "step N, sample S" and the format, for the resumed line. */
const char *resume_format(const Resume *r);

/* A 64-bit number every rank holds, drawn by rank 0 (the run's nonce: checkpoint ids are made from it). */
uint64_t train_ckpt_nonce(Comm *comm);
/* Every rank's call: the sharded checkpoint <dir> of state st (stage z's layout): each rank's shard, then rank 0's
 * manifest. A non-finite value in any rank's shard ends every rank with exit 4 before anything is written. */
void train_ckpt_save_sharded(const char *dir, Model *m, Zero *z, Comm *comm, const CkptState *st, uint64_t nonce);

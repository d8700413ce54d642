/* zero.h: sharded data parallelism (ZeRO stages 1 and 2, DeepSpeed's names), over the run's communicator.
 *
 * The flat layout (model.h) is padded to world x shard floats, shard a multiple of ZERO_ALIGN floats, and rank r
 * owns [r x shard, (r + 1) x shard): every shard holds the same bytes and starts on a 64-byte boundary, whatever the
 * world size (3, 5, 6, 7 ranks included); the padding is zero and stays zero.
 *   stage 1  AdamW's moments exist for the shard only (and, in mixed precision, the float32 master weights); the
 *            gradient buckets are all-reduced as without sharding; each rank updates its shard of the parameters
 *            and the ranks all-gather them (in the compute type with mixed precision, from which the float32 copy
 *            the norm layers read is then made, so every rank computes with the same values)
 *   stage 2  the gradients too: each bucket is reduced to its owners during backward (buckets.h, sharded), in every
 *            micro-batch, into a float32 gradient shard; no rank holds a whole gradient between micro-batches
 * Clipping by the global norm: each rank's shard's sum of squares in double, all-gathered and added in rank order
 * (optim.h's sumsq_part and sumsq_join), so every rank takes the same decision, the unsharded run's. On the host
 * communicators the reductions form every sum as the all-reduce does (comm.h), so stage 1, and stage 2 without
 * accumulation, train the replicated run's model bit for bit.
 * Parameter groups (train.freeze, train.backbone_lr_mult: param_groups.h) are ranges of the flat layout; a rank
 * updates the part of each group that falls in its shard (a shard may straddle a group's boundary, or hold none of
 * a group) with that group's state, leaves the frozen range untouched (no update, no moments), and counts only the
 * trainable part in the global norm: the unsharded step's arithmetic on every element.
 * Offload (dist.offload_optimizer cpu, zero_offload.c): the shard's moments and master weights in pinned host
 * memory and AdamW on the CPU; the device keeps the gradient shard, which goes down in chunks while the CPU
 * updates the chunks already there, each chunk's parameters going back up while the next is updated. */
#pragma once
#include <stddef.h>

#include "core/config_dist.h"
#include "graph/model.h"
#include "optim/optim.h"
#include "parallel/buckets.h"
#include "parallel/comm.h"
#include "train/param_groups.h"

#define ZERO_ALIGN 16 /* floats: 64 bytes, a cache line and an AVX-512 vector */

typedef struct {
    int stage;   /* 0 (replicated), 1, 2 */
    int world;
    long flat;   /* the model's param_floats */
    long shard;  /* floats per rank */
    long padded; /* world x shard */
} ZeroLayout;

/* dist.zero's stage: 0, 1 or 2 ("auto" is the plan's to resolve first: -1). */
int zero_stage(const DistConfig *dist);
/* The shards of a flat layout of `flat` floats over `world` ranks. */
ZeroLayout zero_layout(long flat, int world, int stage);

/* Before model_allocate: the model's buffer lengths for the layout (flat_floats, state_floats: 0 with offload) and,
 * at stage 2, its gradients in bk's staging slots (planned here: grad_floats and each view's grad_offset). */
void zero_shape_model(Model *m, const ZeroLayout *L, Buckets *bk, int offload);

typedef struct Zero Zero;

/* After model_allocate: this rank's shard state (the gradient shard at stage 2, master weights in mixed precision,
 * the offload's host buffers), counted into m->mem; arms bk (stage 2: sharded). The optimizer state starts zero. */
Zero *zero_open(Model *m, const ZeroLayout *L, Comm *comm, Buckets *bk, int offload);
void zero_free(Zero *z);
const ZeroLayout *zero_layout_of(const Zero *z);
int zero_offloaded(const Zero *z);
/* Once the parameters are set (initialised or read, then broadcast): the master shard from them, and in mixed
 * precision the compute copies (param_lp, and param as its float32 values). */
void zero_sync_master(Zero *z);
/* The optimizer step of the sharded run, on the compute stream: the global squared norm of the trainable floats
 * into sumsq (backend memory), optim_prepare into st and, with two groups, into st_backbone (backend memory, its lr
 * set by the caller), AdamW on each group's part of the shard (or on the host, offloaded), the parameters
 * gathered. */
void zero_optimizer(Zero *z, const OptimConfig *ocfg, const ParamGroups *pg, OptimState *st, OptimState *st_backbone,
                    float *sumsq);
/* The gradient shard the optimizer reads (backend memory, shard floats). */
float *zero_grad_shard(const Zero *z);
/* This rank's shard of the master weights and moments to host memory (shard floats each; waits). */
void zero_download_shard(const Zero *z, float *master, float *m, float *v);
/* The moments of this rank's shard from whole flat arrays (param_floats each, host memory; NULL: zero); the master
 * weights follow the parameters with zero_sync_master. */
void zero_load_moments(Zero *z, const float *flat_m, const float *flat_v);
/* Every rank's gradient shard gathered into flat (host, param_floats): a collective (every rank calls it), for the
 * histograms and the gradient test hook. */
void zero_gather_grad(Zero *z, float *flat);
/* Moves the shard state to model m, rebuilt at a new stage's size (the same layout: the autoencoder's parameters do
 * not depend on the input size), with its buckets bk. */
void zero_move_to(Zero *z, Model *m, Buckets *bk);

/* ---- offload (zero_offload.c) ---------------------------------------------------------------------------- */
typedef struct ZeroOffload ZeroOffload;
/* Pinned host buffers for a shard of `shard` floats on backend be; *host_bytes gets what they hold. */
ZeroOffload *zero_offload_open(const Backend *be, long shard, size_t *host_bytes);
void zero_offload_free(ZeroOffload *o);
/* A part of a shard that one group's state updates: shard-relative floats [lo, hi), with state (0: the group at lr,
 * 1: the backbone's). */
typedef struct {
    long lo, hi;
    int state;
} ZeroRange;
/* AdamW on the host: grad (device, shard) down in chunks, st[0..n_st) read back, each range updated with its state
 * (floats in no range keep their values and moments), master (device, shard floats of float32) up; nothing when the
 * step is skipped. */
void zero_offload_step(ZeroOffload *o, const float *grad, const ZeroRange *ranges, int n_ranges,
                       OptimState *const *st, int n_st, float *master);
/* The host state: master weights, moments (shard floats each). */
float *zero_offload_master(ZeroOffload *o);
float *zero_offload_m(ZeroOffload *o);
float *zero_offload_v(ZeroOffload *o);

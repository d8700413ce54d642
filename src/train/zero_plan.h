/* zero_plan.h: the memory plan of sharded data parallelism: the bytes per rank of parameters, gradients, optimizer
 * state and activations under DDP, ZeRO-1, ZeRO-2 and ZeRO-2 with the optimizer offloaded, from the model's exact
 * sizes (the same computation the trainer's allocations follow, so the allocator's counts equal them: tested), and
 * dist.zero auto's choice: the first mode, in order of the communication it adds, whose device bytes fit the plan's
 * budget (HW_MEMORY_SHARE of the free memory). What the seeds' launchers decided with rules of thumb ("DeepSpeed
 * ZeRO-2 or DDP"), decided from bytes. ZeRO-3 (the parameters sharded too) is not built: when even the parameters
 * do not fit, the plan says so. */
#pragma once
#include <stddef.h>

#include "core/config_dist.h"
#include "graph/model.h"
#include "train/runtime.h"
#include "train/zero.h"

enum { ZERO_MODE_DDP = 0, ZERO_MODE_1 = 1, ZERO_MODE_2 = 2, ZERO_MODE_OFFLOAD = 3, ZERO_MODES = 4 };

typedef struct {
    size_t params;      /* the parameters (float32 and the compute copy; the buffers) */
    size_t grads;       /* DDP, ZeRO-1: the whole gradient; ZeRO-2: the staging slots and the shard */
    size_t optimizer;   /* AdamW's moments (and master weights in mixed precision) of what this rank updates */
    size_t activations; /* the activation arena */
    size_t host;        /* offload: the pinned host buffers */
} ZeroBytes;

const char *zero_mode_name(int mode);
/* A run's mode by its stage and offload: "DDP", "ZeRO-1", "ZeRO-1 + offload", "ZeRO-2", "ZeRO-2 + offload". */
const char *zero_run_name(int stage, int offload);
size_t zero_bytes_device(const ZeroBytes *b);
/* The bytes per rank of model m (built, not allocated; left as it was) in `mode` over `world` ranks with dist's
 * buckets. */
ZeroBytes zero_plan_bytes(Model *m, int mode, int world, const DistConfig *dist);
/* The same by stage (0 DDP, 1, 2) and offload (ZeRO-1 + offload too: ZeRO-1's gradients, the optimizer on the host). */
ZeroBytes zero_plan_bytes_at(Model *m, int stage, int offload, int world, const DistConfig *dist);
/* Shapes model m for stage/offload as the trainer does (zero_shape_model with the buckets planned from dist);
 * *staging: ZeRO-2's staging floats. For memory checks of models that are never allocated. */
void zero_shape_for(Model *m, int stage, int offload, int world, const DistConfig *dist, long *staging);
/* Prints every mode's bytes per rank for rt's model (verbose) and returns the run's mode: dist.zero's, or for auto
 * the choice, written back into dist (zero, offload_optimizer) and said why. Auto compares each mode's bytes per rank
 * with what one rank may plan: the device's budget over the ranks sharing it (local_world: this machine's ranks; on
 * GPUs those per GPU), less host_other (host bytes per rank beside the model: train_host_other_bytes) on CPU ranks,
 * as the host check sums them. (The returned mode is ZERO_MODES for ZeRO-1 + offload.) */
int zero_plan_choose(Runtime *rt, DistConfig *dist, int world, int local_world, double host_other, int verbose);

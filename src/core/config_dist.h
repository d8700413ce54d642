/* config_dist.h: the config's "dist" section: ranks started by train itself, the collectives' deadline and the
 * gradient buckets all-reduced during backward; sharded data parallelism (ZeRO) and optimizer offload. */
#pragma once
#include "core/config_base.h"

typedef struct {
    char gpus[CONFIG_STR]; /* "" = one process; "N" or "all" = train --gpus: one rank per GPU of this machine */
    double timeout_s;      /* the watchdog's deadline for one collective */
    double bucket_mb, first_bucket_mb; /* gradient buckets all-reduced during backward */
    char zero[CONFIG_STR];             /* "0" | "1" | "2" | "auto": sharded data parallelism (train/zero.h) */
    char offload_optimizer[CONFIG_STR]; /* "none" | "cpu" */
} DistConfig;

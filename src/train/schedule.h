/* schedule.h: the learning-rate schedule: linear warmup from lr/warmup to lr, then cosine decay to min_lr. */
#pragma once
#include "core/config_train.h"

/* Learning rate of optimizer step `step` (0-based). */
double schedule_lr(const TrainConfig *cfg, long step);

/* schedule.c: warmup + cosine learning rate (see schedule.h). */
#include "train/schedule.h"

#include <math.h>

double schedule_lr(const TrainConfig *cfg, long step) {
    if (step < cfg->warmup_steps) return cfg->lr * (double)(step + 1) / (double)cfg->warmup_steps;
    long decay_steps = cfg->steps - cfg->warmup_steps;
    if (decay_steps <= 1) return cfg->lr;
    double progress = (double)(step - cfg->warmup_steps) / (double)(decay_steps - 1);
    if (progress > 1) progress = 1;
    return cfg->min_lr + 0.5 * (cfg->lr - cfg->min_lr) * (1.0 + cos(M_PI * progress));
}

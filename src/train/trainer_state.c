/* trainer_state.c: what the training loop and its helpers (train.c, train_validate.c, train_stages.c) share about
 * the run's state: writing a checkpoint of it, and ending the run when it diverged (see trainer.h). */
#include <stdio.h>

#include "core/util.h"
#include "train/trainer.h"

/* A non-finite value: the run ends with exit 4 before the step's update, so the last checkpoint is the last good
 * state (ckpt_save refuses non-finite parameters, should any ever get there). */
void trainer_diverged(Trainer *t, int64_t step1, const char *what, double value) {
    train_log_close(t->tb, 1);
    if (t->metrics) fflush(t->metrics);
    vx_exit_error(VX_EXIT_DIVERGED, "training diverged at step %lld: %s is %g; no checkpoint is written for it (the "
                  "last one stays); lower train.lr, set train.grad_clip, or check the data", (long long)step1, what,
                  value);
}

void trainer_save_checkpoint(Trainer *t, const char *name) {
    char path[CONFIG_STR + 64];
    if (name) snprintf(path, sizeof path, "%s/checkpoints/%s", t->cfg->output.dir, name);
    else snprintf(path, sizeof path, "%s/checkpoints/step_%ld.ckpt", t->cfg->output.dir, (long)t->st.step);
    t->st.opt = stepper_carry(t->stepper); /* (no step is in flight: the loop saves only after collecting) */
    ckpt_save(path, t->m, &t->st);
    if (!name) t->saved_step = t->st.step;
    vx_log("checkpoint: %s\n", path);
}


/* trainer_state.c: what the training loop and its helpers (train.c, train_validate.c, train_stages.c) share about
 * the run's state: writing a checkpoint of it, and ending the run when it diverged (see trainer.h). */
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "train/run_dir.h"
#include "train/train_ckpt.h"
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

/* A checkpoint goes only into the directory this run locked: one deleted and re-created (and locked) by a new run
 * while this one ran got this run's stop checkpoint among its files. Rank 0 holds the lock; with a sharded
 * checkpoint every rank learns its answer, since every rank would write a shard there. */
static void check_run_dir(Trainer *t, const char *what, int sharded) {
    char why[200] = "";
    float gone = t->comm->rank == 0 && !run_dir_is_ours(why, sizeof why);
    if (sharded) comm_allreduce_host(t->comm, &gone, 1, COMM_SUM, "whether the run directory is still the run's");
    if (!gone) return;
    if (t->comm->rank == 0) run_dir_check_ours(what);
    vx_exit_error(VX_EXIT_STORAGE, "run directory %s is no longer this run's (rank 0 found it deleted or replaced); "
                  "%s is not written", t->cfg->output.dir, what);
}

/* checkpoints/<name>.zero for a name given as "<name>.ckpt" (or step_<step>.zero) */
static void save_sharded(Trainer *t, const char *name) {
    char path[CONFIG_STR + 96], stem[64];
    if (name) snprintf(stem, sizeof stem, "%.*s", (int)(strlen(name) > 5 && strcmp(name + strlen(name) - 5, ".ckpt") == 0
                                                           ? strlen(name) - 5 : strlen(name)), name);
    else snprintf(stem, sizeof stem, "step_%ld", (long)t->st.step);
    snprintf(path, sizeof path, "%s/checkpoints/%s.zero", t->cfg->output.dir, stem);
    char what[120];
    snprintf(what, sizeof what, "the checkpoint %s.zero (step %ld)", stem, (long)t->st.step);
    check_run_dir(t, what, 1);
    t->st.opt = stepper_carry(t->stepper); /* (no step is in flight: the loop saves only after collecting) */
    train_ckpt_save_sharded(path, t->m, t->zero, t->comm, &t->st, t->nonce);
    if (!name) t->saved_step = t->st.step;
    vx_log("checkpoint: %s (%d shards, ZeRO-%d)\n", path, t->comm->world, t->zl.stage);
}

void trainer_share_pending_checkpoint(Trainer *t) {
    /* rank 0 says which named checkpoints its validation asked for: best.ckpt + 2 x (1 + k) for stage k's best */
    float code = t->comm->rank == 0 ? (float)(t->pending_best + 2 * t->pending_stage) : 0.0f;
    comm_allreduce_host(t->comm, &code, 1, COMM_SUM, "which checkpoints validation keeps");
    t->pending_best = t->pending_stage = 0;
    const int c = (int)code;
    char name[64];
    if (c >= 2) {
        snprintf(name, sizeof name, "stage_%d_best.ckpt", c / 2 - 1);
        save_sharded(t, name);
    }
    if (c % 2) save_sharded(t, "best.ckpt");
}

void trainer_save_checkpoint(Trainer *t, const char *name) {
    if (t->zero) {
        int k;
        if (!name) save_sharded(t, NULL);
        else if (strcmp(name, "best.ckpt") == 0) t->pending_best = 1; /* rank 0's validation */
        else if (sscanf(name, "stage_%d_best.ckpt", &k) == 1) t->pending_stage = k + 1;
        else VX_CHECK(0, "trainer_save_checkpoint: %s is no checkpoint a validation keeps", name);
        return;
    }
    char path[CONFIG_STR + 64];
    if (name) snprintf(path, sizeof path, "%s/checkpoints/%s", t->cfg->output.dir, name);
    else snprintf(path, sizeof path, "%s/checkpoints/step_%ld.ckpt", t->cfg->output.dir, (long)t->st.step);
    char what[120];
    snprintf(what, sizeof what, "the checkpoint %s (step %ld)", strrchr(path, '/') + 1, (long)t->st.step);
    check_run_dir(t, what, 0);
    t->st.opt = stepper_carry(t->stepper); /* (no step is in flight: the loop saves only after collecting) */
    ckpt_save(path, t->m, &t->st);
    if (!name) t->saved_step = t->st.step;
    vx_log("checkpoint: %s\n", path);
}


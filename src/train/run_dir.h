/* run_dir.h: the run directory a training run writes into, taken before anything is written there.
 * A run validates everything first (config, device, memory plan, checkpoint, every data file; with ranks, that
 * every rank agrees), then takes the directory, then writes: a refused run leaves the directory as it found it.
 * Taking it means: create it (and checkpoints/), lock it for the life of the process (core/outguard.h's out_lock: an
 * flock on <dir>/.voxscale.lock holding the owner's pid, so a second run there is refused whether or not TensorBoard
 * is on; a refused run removes the lock file it made), and decide what is there:
 *   a run (config.json) with a checkpoint  a fresh run is refused (resume it); a resumed run continues it only
 *   (step_N.ckpt, best.ckpt, stage_k_best  when it is of the same model and seed, and its metrics.jsonl and samples
 *   .ckpt, or a sharded run's .zero        files are cut after the step resumed (those steps are logged again)
 *   directories)
 *   a run with no checkpoint               one that ended before its first checkpoint (a refused volume, a failed
 *                                          launch, a kill): its lock is free, so it is taken over, saying so, and
 *                                          its metrics.jsonl, event files and samples files removed
 *   a run's files without config.json      checkpoints, metrics.jsonl, event files, samples.tsv of some other run
 *                                          (a partial copy): refused, never overwritten or appended to
 *   other files                            the run writes beside them, saying so */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/config_output.h"

/* Resolves output->dir (runs/<config_name>-<time> when empty), creates and locks it. `resume_step`: the step of the
 * checkpoint being resumed, -1 for a fresh run (an existing run there of the same model and seed may then be
 * continued: model_fingerprint is config_model_fingerprint of the run's model section, seed its train.seed). Exits 2
 * when the directory is busy or holds another run, 6 when it cannot be created. */
void run_dir_take(OutputConfig *output, const char *config_name, int64_t resume_step, uint64_t model_fingerprint,
                  int64_t seed);
/* Whether the directory run_dir_take locked is still there and still locked by this process (a process that never
 * took one: yes): 1, or 0 and why. A run's directory deleted and re-created (and locked) by a new run while it ran
 * would otherwise get this run's checkpoints among the new run's files. */
int run_dir_is_ours(char *why, size_t why_len);
/* Writes <dir>/plan.txt: every line the run printed or kept for the full plan so far (core/util.h's vx_plan_text:
 * the device, the plan, the memory of every mode, the host memory plan), which the terminal shows only with -v. */
void run_dir_write_plan(const char *dir);
/* Ends the run (exit 6) when it is not, saying that `what` ("the checkpoint of step 12") is not written. */
void run_dir_check_ours(const char *what);

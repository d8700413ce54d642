/* launch.h: where the ranks of a run come from, and `train --gpus N`'s own launcher.
 *
 * dist_detect reads the environment this process was started in, first match wins:
 *   spawn     a child of `train --gpus N`: VX_RANK, VX_WORLD_SIZE, VX_LOCAL_RANK, VX_LOCAL_WORLD_SIZE,
 *             VX_MASTER_ADDR, VX_MASTER_PORT, VX_NCCL_ID
 *   mpirun    Open MPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (MPICH/Hydra: PMI_RANK, PMI_SIZE,
 *             MPI_LOCALRANKID, MPI_LOCALNRANKS)
 *   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; our rendezvous listens on
 *             MASTER_PORT + 1 (torchrun's own store may hold MASTER_PORT), or VX_RENDEZVOUS_PORT. accelerate's
 *             --multi_gpu starts its ranks so, and DeepSpeed's launcher too (LOCAL_SIZE for LOCAL_WORLD_SIZE)
 *   srun      Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (ranks meet over MPI)
 *   single    none of these: one process
 * A variable that is set but malformed (not a number, rank >= world, ...) is an error naming it (exit 2).
 *
 * dist_spawn starts N local ranks of this very command line (re-executed from /proc/self/exe) with the spawn
 * variables set, in a process group of their own: it forwards SIGINT and SIGTERM to them once, and when a rank
 * fails it ends the others (SIGTERM, then SIGKILL after a grace period) with one line naming the rank and how it
 * ended. On GPUs the parent makes the NCCL unique id (no CUDA context) and hands it to the children; on CPUs it
 * picks a free loopback port for the tcp communicator's rendezvous. */
#pragma once
#include "parallel/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

void dist_detect(DistEnv *env);
/* One line for logs: "4 ranks (spawn), this is rank 1 (local 1 of 4)" or "1 process". */
void dist_describe(const DistEnv *env, char *out, size_t len);
/* Runs `nproc` ranks of argv (argv[0] is ignored: the children run /proc/self/exe with argv[1..]) and waits for
 * them. Returns the run's exit code: 0 when every rank succeeded, else the first failing rank's code (a rank killed
 * by a signal counts as VX_EXIT_DIST), or VX_EXIT_SIGNAL when the run was stopped by SIGINT/SIGTERM. */
int dist_spawn(int nproc, int on_gpu, int argc, char **argv);
/* Under mpirun, a SIGTERM is the launcher ending the job: a peer rank exited (mpirun SIGKILLs the others about a
 * second later) or the job is being cancelled. From here on such a rank says so in one line naming itself
 * ("voxscale: rank 0/2 (pid N on HOST): ended by mpirun (SIGTERM): a peer rank exited or the job is being
 * stopped; exit 3") and exits 3 at once, rather than ending wordless inside a collective with a dead peer. A stop with
 * a checkpoint is SIGINT to the ranks. Under srun, a SIGTERM is mostly scancel or the time limit, sent to every task:
 * each rank says so in one line and stops after the step with a checkpoint (exit 130), or, when that is not done
 * within 20 s (a peer gone), ends with the line above. Nothing under the other launchers. */
void dist_end_on_launcher_sigterm(const DistEnv *env);
/* A free TCP port on the loopback interface (bound and released: the rendezvous binds it again at once). */
int dist_free_port(void);

/* Implemented with NCCL in CUDA builds (parallel/nccl_id.c): the unique id as hex text; 0 with a reason when NCCL is
 * not built in or fails. */
int dist_nccl_unique_id(char *hex, size_t len, char *why, size_t why_len);
/* The bytes of an id written so (hex, 2 x len digits) into out[len]: 1, or 0 when hex is not that. */
int dist_nccl_id_from_hex(const char *hex, void *out, size_t len);

#ifdef __cplusplus
}
#endif

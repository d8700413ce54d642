/* comm_open.c: choosing a communicator from the launch and the device (see comm.h). Above the implementations:
 * it calls their constructors; they call only the shared helpers of comm.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "parallel/comm.h"

/* Every rank says whether it trains on a GPU, over the host communicator the ranks meet on anyway (the one CPU ranks
 * train with). Ranks that disagree would open NCCL on some and tcp or MPI on the others and wait for each other
 * until the deadline: `--device auto` under torchrun with more local ranks than GPUs, or a GPU that one rank cannot
 * use. They all refuse in one line instead (exit 2), every rank with the same votes, before anything is written. */
static void agree_on_the_device(Comm *host, int on_gpu, const char *device_reason) {
    const int world = host->world;
    float *votes = vx_calloc((size_t)world, sizeof *votes);
    votes[host->rank] = on_gpu ? 1.0f : 0.0f;
    comm_allreduce_host(host, votes, (size_t)world, COMM_SUM, "the device every rank trains on");
    int gpu = 0;
    for (int r = 0; r < world; r++) gpu += votes[r] > 0.5f;
    if (gpu == 0 || gpu == world) {
        free(votes);
        return;
    }
    char cpu[160] = "";
    for (int r = 0, shown = 0; r < world && shown < 8; r++)
        if (votes[r] < 0.5f)
            snprintf(cpu + strlen(cpu), sizeof cpu - strlen(cpu), "%s%d", shown++ ? ", " : "", r);
    if (world - gpu > 8) snprintf(cpu + strlen(cpu), sizeof cpu - strlen(cpu), ", ...");
    free(votes);
    vx_error_line("the ranks disagree on the device: %d of %d train on a GPU, rank(s) %s on the CPU (this rank: %s%s%s); "
                  "every rank must train on the same kind: start at most as many ranks per node as it has GPUs "
                  "(with NCCL 2.30 or newer, NCCL_MULTI_RANK_GPU_ENABLE=1 lets ranks share one), or use --device cpu",
                  gpu, world, cpu, on_gpu ? "GPU" : "CPU", device_reason ? ": " : "", device_reason ? device_reason : "");
    /* every rank has the same votes and ends here: closing the communicator first (MPI: finalising it) lets the
     * launcher pass every rank's line on before the job ends */
    comm_close(host);
    vx_exit(VX_EXIT_USAGE);
}

Comm *comm_open(const DistEnv *env, int on_gpu, const char *device_reason, double timeout_s) {
    /* VX_COMM=nccl|mpi|tcp runs that communicator even for one rank: how a single GPU checks the NCCL path (ci/gpu.sh)
     * and tests reach the others' code with one process */
    const char *force = getenv("VX_COMM");
    if (force && *force) {
        if (strcmp(force, "nccl") == 0 && comm_nccl_built()) return comm_nccl_open(env, timeout_s);
        if (strcmp(force, "mpi") == 0 && comm_mpi_built()) return comm_mpi_open(env, timeout_s);
        if (strcmp(force, "tcp") == 0) return comm_tcp_open(env, timeout_s);
        if (strcmp(force, "single") != 0)
            vx_usage_error("VX_COMM=%s: expected nccl, mpi, tcp or single, built into this binary", force);
    }
    if (env->world <= 1) return comm_single_open();
    const int under_mpi = strcmp(env->launcher, "mpirun") == 0 || strcmp(env->launcher, "srun") == 0;
    if (under_mpi && !comm_mpi_built())
        vx_usage_error("%d ranks under %s need MPI (the CPU ranks' communicator, and how GPU ranks meet), which this "
                       "build lacks (built with MPI=0 or without libopenmpi-dev); rebuild with MPI=1", env->world,
                       env->launcher);
    /* the host communicator: the CPU ranks' own, and where every rank votes for its device first */
    Comm *host = under_mpi ? comm_mpi_open(env, timeout_s) : comm_tcp_open(env, timeout_s);
    agree_on_the_device(host, on_gpu, device_reason);
    if (!on_gpu) return host;
    if (!comm_nccl_built())
        vx_usage_error("%d ranks on GPUs need NCCL, which this build lacks (built with CUDA=0); rebuild with "
                       "CUDA=1 or run the ranks with --device cpu", env->world);
    /* tcp: closed first, since NCCL's bootstrap (torchrun) meets on the same port; MPI: closed after, since NCCL's
     * bootstrap broadcasts over it and the last MPI user finalises MPI */
    if (!under_mpi) comm_close(host);
    Comm *c = comm_nccl_open(env, timeout_s);
    if (under_mpi) comm_close(host);
    return c;
}


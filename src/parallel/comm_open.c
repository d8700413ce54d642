/* comm_open.c: choosing a communicator from the launch and the device (see comm.h). Above the implementations:
 * it calls their constructors; they call only the shared helpers of comm.c. */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "parallel/comm.h"

Comm *comm_open(const DistEnv *env, int on_gpu, double timeout_s) {
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
    if (on_gpu) {
        if (!comm_nccl_built())
            vx_usage_error("%d ranks on GPUs need NCCL, which this build lacks (built with CUDA=0); rebuild with "
                           "CUDA=1 or run the ranks with --device cpu", env->world);
        return comm_nccl_open(env, timeout_s);
    }
    if (under_mpi) {
        if (!comm_mpi_built())
            vx_usage_error("%d CPU ranks under %s need MPI, which this build lacks (built with MPI=0 or without "
                           "libopenmpi-dev); rebuild with MPI=1", env->world, env->launcher);
        return comm_mpi_open(env, timeout_s);
    }
    return comm_tcp_open(env, timeout_s);
}


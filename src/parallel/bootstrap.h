/* bootstrap.h: handing a few bytes from rank 0 to every rank before any communicator exists, e.g. the NCCL unique
 * id: over TCP (rank 0 listens on env->master_addr:master_port, the others connect; spawn and torchrun launches)
 * or over MPI (mpirun/srun launches; MPI is initialised on first use). Both wait at most timeout_s for the ranks
 * to meet and end with exit 3 (comm_fail's line) when they do not. */
#pragma once
#include <stddef.h>

#include "parallel/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

void bootstrap_broadcast_tcp(const DistEnv *env, void *blob, size_t len, double timeout_s);
void bootstrap_broadcast_mpi(const DistEnv *env, void *blob, size_t len, double timeout_s);

#ifdef __cplusplus
}
#endif

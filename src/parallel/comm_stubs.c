/* comm_stubs.c: the communicators a build leaves out. Without MPI (MPI=0) or NCCL (CUDA=0) their constructors are
 * these stubs: comm_open checks comm_*_built first and says which build flag to change, so they are never reached
 * through it. NCCL is in where the build found it (VX_NCCL, mk/nccl.mk). */
#include "core/util.h"
#include "parallel/bootstrap.h"
#include "parallel/comm.h"

#ifndef VX_MPI
int comm_mpi_built(void) { return 0; }
Comm *comm_mpi_open(const DistEnv *env, double timeout_s) {
    (void)env, (void)timeout_s;
    vx_usage_error("this build has no MPI (built with MPI=0 or without libopenmpi-dev); rebuild with MPI=1");
}
void bootstrap_broadcast_mpi(const DistEnv *env, void *blob, size_t len, double timeout_s) {
    (void)env, (void)blob, (void)len, (void)timeout_s;
    vx_usage_error("this build has no MPI (built with MPI=0 or without libopenmpi-dev); rebuild with MPI=1");
}
#endif

#ifndef VX_NCCL
int comm_nccl_built(void) { return 0; }
Comm *comm_nccl_open(const DistEnv *env, double timeout_s) {
    (void)env, (void)timeout_s;
    vx_usage_error("this build has no NCCL (built with CUDA=0, or NCCL was not found: make cuda-info); rebuild with "
                   "CUDA=1 and NCCL_HOME set");
}
#endif

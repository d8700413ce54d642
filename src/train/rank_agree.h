/* rank_agree.h: what the ranks of a run must agree on before they exchange anything that depends on it.
 * Ranks started with different configs (MPMD mpirun `-np 1 voxscale ... : -np 1 voxscale ...`, hand-set torchrun
 * environments, a node with another config file) used to run: with another model.channels rank 0 received a
 * larger gradient bucket into its smaller buffer (a heap overflow under MPI); with another seed, input size,
 * batch, lr, data source or --out they trained to exit 0 and rank 0 saved a checkpoint trained on mismatched
 * ranks; one rank resuming while another started fresh saved a mixed checkpoint.
 *
 * rank_agree is the first collective of a run, of a fixed size whatever the config: each rank hashes every key of
 * its resolved config (each key's value as the resolved config.json writes it) and its resume state (none, or the
 * checkpoint's step, data position and CRC); rank 0's hashes are broadcast, every rank compares them with its own,
 * and the index of its first difference is gathered. Any difference ends every rank with exit 2 and one line
 * naming the first differing key, the ranks that differ from rank 0 and this rank's value, before rank 0 takes
 * the run directory. Keys that may differ per rank (speed and memory of one rank only, no effect on what is
 * trained): train.threads, data.workers, data.prefetch, data.cache_max_gib, and dist.gpus (ignored under a
 * launcher). */
#pragma once
#include "backend/backend.h"
#include "core/config.h"
#include "ckpt/ckpt.h"
#include "parallel/comm.h"

/* Returns when every rank agrees (at once for one rank); else prints the line, closes the communicator and exits 2
 * on every rank. `resume`: the checkpoint this rank resumes from (verified), or NULL. `be` stages the exchange
 * through device memory where the communicator needs it (NCCL). */
void rank_agree(Comm *c, const Backend *be, const Config *cfg, const CkptId *resume);

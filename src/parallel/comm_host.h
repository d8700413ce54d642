/* comm_host.h: what the two host-memory communicators (comm_mpi.c, comm_tcp.c) share: the operation's name in
 * failure lines, the copy of `what`, the rule for send and receive buffers that overlap, and the float loops of
 * the reduction (rank-ordered sum, average).
 *
 * COMM_AVG divides the finished sum by the world size (x / world, one IEEE rounding: correctly rounded, unlike
 * x * (1/world), which rounds twice for world sizes that are not powers of two). The divide is done once per
 * element on one rank and the result copied, or on identical bytes on every rank, so averages stay bit-identical. */
#pragma once
#include <stddef.h>

#include "parallel/comm.h"

/* Which collective a handle holds; the names are the ones failure lines print. */
typedef enum { CK_ALLREDUCE = 0, CK_BROADCAST, CK_REDUCE_SCATTER, CK_ALL_GATHER, CK_BARRIER, CK_REDUCE_SCATTER_V } CommKind;

enum { COMM_WHAT_LEN = 160, COMM_OPNAME_LEN = 40 };

/* "all-reduce (sum)", "broadcast from rank 2", "barrier", "reduce-scatter to owners (sum)", ... into
 * out[COMM_OPNAME_LEN]. */
void comm_host_opname(char *out, CommKind kind, CommOp op, int root);
/* Copies what (NULL: "(unnamed)") into out[COMM_WHAT_LEN], truncated. */
void comm_host_what(char *out, const char *what);

/* 1 when [a, a+an) and [b, b+bn) share a byte. */
int comm_host_overlap(const void *a, size_t an, const void *b, size_t bn);
/* reduce-scatter (send [world*n] -> recv [n]) and all-gather (send [n] -> recv [world*n]) accept send and recv
 * apart, or in place the way NCCL defines it (recv == send + rank*n, resp. send == recv + rank*n). When the
 * implementation cannot read send while it writes recv (any overlap, or in place unless allow_in_place), this
 * returns a copy of send to read instead (vx_malloc; the caller frees it), else NULL. */
float *comm_host_send_copy(CommKind kind, const float *send, const float *recv, size_t n, int rank, int world,
                           int allow_in_place);

/* acc[i] += x[i]: one step of the rank-ordered sum; vectorized (no aliasing). */
void comm_host_add(float *restrict acc, const float *restrict x, size_t n);
/* x[i] /= world, for COMM_AVG after the sum. */
void comm_host_divide(float *x, size_t n, int world);
/* Offsets of the blocks of a reduce_scatter_v: off[r] = counts[0] + ... + counts[r-1], off[world] the total. */
void comm_host_offsets(const size_t *counts, int world, size_t *off);

/* comm_host.c: the helpers comm_mpi.c and comm_tcp.c share (see comm_host.h). */
#include "parallel/comm_host.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"

void comm_host_opname(char *out, CommKind kind, CommOp op, int root) {
    switch (kind) {
    case CK_ALLREDUCE: snprintf(out, COMM_OPNAME_LEN, "all-reduce (%s)", comm_op_name(op)); break;
    case CK_BROADCAST: snprintf(out, COMM_OPNAME_LEN, "broadcast from rank %d", root); break;
    case CK_REDUCE_SCATTER: snprintf(out, COMM_OPNAME_LEN, "reduce-scatter (%s)", comm_op_name(op)); break;
    case CK_ALL_GATHER: snprintf(out, COMM_OPNAME_LEN, "all-gather"); break;
    case CK_REDUCE_SCATTER_V: snprintf(out, COMM_OPNAME_LEN, "reduce-scatter to owners (%s)", comm_op_name(op)); break;
    default: snprintf(out, COMM_OPNAME_LEN, "barrier"); break;
    }
}

void comm_host_what(char *out, const char *what) { snprintf(out, COMM_WHAT_LEN, "%s", what ? what : "(unnamed)"); }

int comm_host_overlap(const void *a, size_t an, const void *b, size_t bn) {
    const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return an && bn && pa < pb + bn && pb < pa + an;
}

float *comm_host_send_copy(CommKind kind, const float *send, const float *recv, size_t n, int rank, int world,
                           int allow_in_place) {
    const size_t total = (size_t)world * n;
    int in_place, overlap;
    if (kind == CK_REDUCE_SCATTER) {
        in_place = recv == send + (size_t)rank * n;
        overlap = comm_host_overlap(send, total * sizeof(float), recv, n * sizeof(float));
    } else {
        in_place = send == recv + (size_t)rank * n;
        overlap = comm_host_overlap(send, n * sizeof(float), recv, total * sizeof(float));
    }
    if (!overlap || (in_place && allow_in_place)) return NULL;
    const size_t count = kind == CK_REDUCE_SCATTER ? total : n;
    float *copy = vx_malloc(count * sizeof(float));
    memcpy(copy, send, count * sizeof(float));
    return copy;
}

void comm_host_add(float *restrict acc, const float *restrict x, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

void comm_host_divide(float *x, size_t n, int world) {
    const float w = (float)world;
    for (size_t i = 0; i < n; i++) x[i] /= w;
}

void comm_host_offsets(const size_t *counts, int world, size_t *off) {
    off[0] = 0;
    for (int r = 0; r < world; r++) off[r + 1] = off[r] + counts[r];
}

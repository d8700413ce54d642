/* tcp_link.h: the sockets of the tcp communicator and of the NCCL id's bootstrap. A rendezvous where rank 0 listens
 * on env->master_port and every other rank connects to env->master_addr (ranks start in any order: connecting
 * retries until the deadline), each introducing itself with its rank and world size; and whole-buffer sends and
 * receives that give up at a deadline and say which peer failed them and how (gone, or silent). */
#pragma once
#include <stddef.h>

#include "parallel/comm.h"

/* The connected sockets: on rank 0 fd[r] for r = 1..world-1 (fd[0] is -1), elsewhere fd[0] to rank 0. Ends the
 * process through comm_fail(who, ...) (exit 3) when the ranks cannot meet within timeout_s. Caller frees. */
int *tcp_rendezvous(const DistEnv *env, double timeout_s, const Comm *who);
/* 1 when all n bytes went to / came from peer `peer` before `deadline` (vx_now seconds); else 0 and why. */
int tcp_send_all(int fd, const void *p, size_t n, double deadline, int peer, char *why, size_t why_len);
int tcp_recv_all(int fd, void *p, size_t n, double deadline, int peer, char *why, size_t why_len);

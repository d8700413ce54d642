/* tcp_link.c: the rendezvous and the deadline-bound transfers of tcp_link.h. */
#include "parallel/tcp_link.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"

#define HELLO_MAGIC 0x5A52584Bu /* "KXRZ": a voxscale rank, not some other program on the port */
#define HELLO_VERSION 2          /* the handshake's layout and the protocol after it; 2: with this field */
#define HELLO_WAIT_S 10.0        /* how long rank 0 waits for a connection's hello: a port scanner or a silent
                                    foreign client must not hold the rendezvous until its deadline */

typedef struct {
    uint32_t magic, version;
    int32_t rank, world;
} Hello;

/* Milliseconds left until deadline for poll(), at least 0. */
static int ms_left(double deadline) {
    const double left = deadline - vx_now();
    return left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
}

/* Waits until fd is ready for `events`; 0 and why on the deadline or a hang-up. */
static int ready(int fd, short events, double deadline, int peer, const char *dir, char *why, size_t why_len) {
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        const int n = poll(&p, 1, ms_left(deadline));
        if (n > 0) return 1; /* readable, writable, or an error the next call reports */
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(why, why_len, "failed: poll: %s", strerror(errno));
            return 0;
        }
        snprintf(why, why_len, "did not finish within the deadline: rank %d %s (stopped, hung, or its network is "
                 "down)", peer, dir);
        return 0;
    }
}

/* A connection that ended. Rank 0 also ends its connections when it ends the run on purpose (a timeout, a
 * mismatch), so a peer that loses rank 0 points at rank 0's own line for the cause. */
static int gone(int err, int peer, char *why, size_t why_len) {
    const char *how = err ? strerror(err) : "its connection closed: the process ended";
    if (peer == 0)
        snprintf(why, why_len, "failed: lost rank 0 (%s): it ended the run or died, and its own line says why", how);
    else
        snprintf(why, why_len, "failed: rank %d vanished (%s)", peer, how);
    return 0;
}

int tcp_send_all(int fd, const void *p, size_t n, double deadline, int peer, char *why, size_t why_len) {
    const char *b = p;
    while (n > 0) {
        if (!ready(fd, POLLOUT, deadline, peer, "took nothing we sent", why, why_len)) return 0;
        const ssize_t k = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k < 0) return gone(errno, peer, why, why_len);
        b += k;
        n -= (size_t)k;
    }
    return 1;
}

int tcp_recv_all(int fd, void *p, size_t n, double deadline, int peer, char *why, size_t why_len) {
    char *b = p;
    while (n > 0) {
        if (!ready(fd, POLLIN, deadline, peer, "sent nothing", why, why_len)) return 0;
        const ssize_t k = recv(fd, b, n, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k <= 0) return gone(k < 0 ? errno : 0, peer, why, why_len);
        b += k;
        n -= (size_t)k;
    }
    return 1;
}

/* Up to n bytes from fd before the deadline, fewer when the peer closes or goes silent: how many arrived. */
static size_t recv_some(int fd, void *p, size_t n, double deadline) {
    char *b = p, why[160];
    size_t got = 0;
    while (got < n) {
        if (!ready(fd, POLLIN, deadline, 0, "sent nothing", why, sizeof why)) break;
        const ssize_t k = recv(fd, b + got, n - got, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    return got;
}

static void no_delay(int fd) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* small messages (headers, losses) go at once */
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Rank 0: listen, take world-1 ranks, each once. */
static int *meet_as_root(const DistEnv *env, double deadline, const Comm *who, const char *where) {
    int *fd = vx_malloc((size_t)env->world * sizeof *fd);
    for (int r = 0; r < env->world; r++) fd[r] = -1;
    const int ls = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int dual = ls >= 0;
    const int lfd = dual ? ls : socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) vx_fatal("socket");
    const int one = 1, zero = 0;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (dual) setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); /* IPv4 peers too */
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)env->master_port),
                              .sin6_addr = IN6ADDR_ANY_INIT};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)env->master_port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    char why[256];
    while (bind(lfd, dual ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4, dual ? sizeof a6 : sizeof a4) != 0) {
        if (errno != EADDRINUSE || vx_now() > deadline) {
            snprintf(why, sizeof why, "failed: rank 0 cannot listen on port %d (%s); set VX_RENDEZVOUS_PORT to a free "
                     "port", env->master_port, strerror(errno));
            comm_fail(who, "rendezvous", where, why);
        }
        sleep_ms(100);
    }
    if (listen(lfd, env->world) != 0) vx_fatal("listen on port %d", env->master_port);
    for (int joined = 1; joined < env->world;) {
        if (!ready(lfd, POLLIN, deadline, -1, "", why, sizeof why)) {
            snprintf(why, sizeof why, "did not finish within the deadline: %d of %d ranks arrived", joined, env->world);
            comm_fail(who, "rendezvous", where, why);
        }
        const int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) continue;
        Hello h;
        const double hello_by = vx_now() + HELLO_WAIT_S < deadline ? vx_now() + HELLO_WAIT_S : deadline;
        if (!tcp_recv_all(c, &h, sizeof h, hello_by, -1, why, sizeof why) || h.magic != HELLO_MAGIC) {
            close(c); /* not one of ours (a port scan, a stale rank): keep waiting for the real ones */
            continue;
        }
        if (h.version != HELLO_VERSION) {
            snprintf(why, sizeof why, "failed: a process says it is rank %d but speaks rendezvous version %u, this "
                     "rank %u: start every rank with the same voxscale build", h.rank, h.version, HELLO_VERSION);
            const Hello refusal = {HELLO_MAGIC, HELLO_VERSION, -1, env->world};
            char ignored[128];
            tcp_send_all(c, &refusal, sizeof refusal, vx_now() + 1.0, h.rank, ignored, sizeof ignored);
            close(c);
            comm_fail(who, "rendezvous", where, why);
        }
        const int twice = h.world == env->world && h.rank >= 1 && h.rank < env->world && fd[h.rank] >= 0;
        if (h.world != env->world || h.rank < 1 || h.rank >= env->world || twice) {
            if (h.world != env->world)
                snprintf(why, sizeof why, "failed: rank %d says the world has %d ranks, rank 0 has %d; start every "
                         "rank with the same WORLD_SIZE", h.rank, h.world, env->world);
            else if (twice)
                snprintf(why, sizeof why, "failed: two processes say they are rank %d; give each rank its own RANK",
                         h.rank);
            else
                snprintf(why, sizeof why, "failed: a process says it is rank %d, outside 1..%d; give each rank a "
                         "RANK below WORLD_SIZE", h.rank, env->world - 1);
            /* tell the refused process why (rank -1 marks a refusal), so both sides name the same cause */
            const Hello refusal = {HELLO_MAGIC, HELLO_VERSION, -1, env->world};
            char ignored[128];
            tcp_send_all(c, &refusal, sizeof refusal, vx_now() + 1.0, h.rank, ignored, sizeof ignored);
            close(c);
            comm_fail(who, "rendezvous", where, why);
        }
        no_delay(c);
        const Hello ack = {HELLO_MAGIC, HELLO_VERSION, 0, env->world};
        if (!tcp_send_all(c, &ack, sizeof ack, deadline, h.rank, why, sizeof why)) comm_fail(who, "rendezvous", where, why);
        fd[h.rank] = c;
        joined++;
    }
    close(lfd);
    return fd;
}

/* Ranks 1..: connect to rank 0, retrying while it is not listening yet. */
static int *meet_as_peer(const DistEnv *env, double deadline, const Comm *who, const char *where) {
    char port[16], why[320];
    snprintf(port, sizeof port, "%d", env->master_port);
    const struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    for (;;) {
        struct addrinfo *ai = NULL;
        const int gai = getaddrinfo(env->master_addr, port, &hints, &ai);
        if (gai != 0 && gai != EAI_AGAIN) {
            snprintf(why, sizeof why, "failed: cannot resolve %.160s (%s)", env->master_addr, gai_strerror(gai));
            comm_fail(who, "rendezvous", where, why);
        }
        for (struct addrinfo *p = ai; p; p = p->ai_next) {
            const int s = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
            if (s < 0) continue;
            if (connect(s, p->ai_addr, p->ai_addrlen) != 0) {
                close(s);
                continue;
            }
            no_delay(s);
            const Hello h = {HELLO_MAGIC, HELLO_VERSION, env->rank, env->world};
            Hello ack;
            if (!tcp_send_all(s, &h, sizeof h, deadline, 0, why, sizeof why)) comm_fail(who, "rendezvous", where, why);
            const size_t got = recv_some(s, &ack, sizeof ack, deadline);
            if (got < sizeof ack || ack.magic != HELLO_MAGIC) {
                /* whatever listens there answered with something else, or closed: rank 0 always answers, even to
                 * refuse */
                if (got == 0 && vx_now() > deadline)
                    snprintf(why, sizeof why, "did not finish within the deadline: rank 0 sent nothing back");
                else
                    snprintf(why, sizeof why, "failed: what listens there is not a voxscale rendezvous (it %s): another "
                             "service holds the port; set MASTER_PORT or VX_RENDEZVOUS_PORT to a free one",
                             got == 0 ? "closed the connection without a word" : "answered with bytes that are not "
                             "voxscale's handshake");
                comm_fail(who, "rendezvous", where, why);
            }
            if (ack.version != HELLO_VERSION) {
                snprintf(why, sizeof why, "failed: rank 0 speaks rendezvous version %u, this rank %u: start every rank "
                         "with the same voxscale build", ack.version, HELLO_VERSION);
                comm_fail(who, "rendezvous", where, why);
            }
            if (ack.world != env->world || ack.rank != 0) {
                if (ack.magic == HELLO_MAGIC && ack.world != env->world)
                    snprintf(why, sizeof why, "failed: rank 0 refused the meeting: this rank says the world has %d "
                             "ranks, rank 0 has %d; start every rank with the same WORLD_SIZE", env->world, ack.world);
                else
                    snprintf(why, sizeof why, "failed: rank 0 refused the meeting: another process is rank %d too, "
                             "or not every rank was started with this WORLD_SIZE; give each rank its own RANK",
                             env->rank);
                comm_fail(who, "rendezvous", where, why);
            }
            freeaddrinfo(ai);
            int *fd = vx_malloc(sizeof *fd);
            fd[0] = s;
            return fd;
        }
        if (ai) freeaddrinfo(ai);
        if (vx_now() > deadline) {
            snprintf(why, sizeof why, "did not finish within the deadline: rank 0 never listened there");
            comm_fail(who, "rendezvous", where, why);
        }
        sleep_ms(50); /* rank 0 may start later than this one */
    }
}

int *tcp_rendezvous(const DistEnv *env, double timeout_s, const Comm *who) {
    if (env->world == 1) { /* VX_COMM=tcp with one rank: nobody to meet */
        int *fd = vx_malloc(sizeof *fd);
        fd[0] = -1;
        return fd;
    }
    char where[320];
    snprintf(where, sizeof where, "the ranks at %s:%d", env->master_addr, env->master_port);
    const double deadline = vx_now() + timeout_s;
    return env->rank == 0 ? meet_as_root(env, deadline, who, where) : meet_as_peer(env, deadline, who, where);
}

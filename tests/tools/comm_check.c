/* comm_check.c: the communicators' test program. tests/integration/test_comm.py runs it under
 * `mpirun -np N` (the mpi communicator) and as N processes with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (tcp).
 * It fills the DistEnv itself, from Open MPI's OMPI_COMM_WORLD_* variables or torchrun's, overridden by flags,
 * and opens the communicator through comm_open, as the trainer does.
 *
 * Modes: check (every collective against a float64 reference, tcp's rank-order sum bit for bit, digests of every
 * result for the test to compare across ranks, several collectives in flight, completion order, CommTimes),
 * sleep RANK SECONDS (that rank stalls before an all-reduce: the others must end with exit 3), die RANK (that rank
 * SIGKILLs itself during a 64 MiB all-reduce), mismatch (rank 1 issues another count), bootstrap (the bootstrap
 * broadcast, then over TCP a communicator on the same port), bench (all-reduce of 1, 16 and 64 MiB; rank 0 prints
 * one line each, under MPI also one for Open MPI's own all-reduces), built (whether MPI is built in). Exit 0 when
 * every check passed, 1 when one
 * failed (each printed as "FAIL ..."), 3 from comm_fail. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "parallel/bootstrap.h"
#include "parallel/comm.h"
#ifdef VX_MPI
#include <mpi.h>
#endif

static DistEnv env;
static int failures, checks;

#define CHECK(cond, ...)                                                                                       \
    do {                                                                                                       \
        checks++;                                                                                              \
        if (!(cond)) {                                                                                         \
            failures++;                                                                                        \
            printf("FAIL rank %d: ", env.rank);                                                                \
            printf(__VA_ARGS__);                                                                               \
            printf("\n");                                                                                      \
            fflush(stdout);                                                                                    \
        }                                                                                                      \
    } while (0)

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Rank r's i-th input of a case: +-[1, 2) * 2^e, e in -4..4: sums round differently in every order, and a missing
 * or doubled term (at least 1/16) is far above the float32 tolerance of a sum of at most 4 terms under 32. */
static float value(uint64_t seed, int r, size_t i) {
    const uint64_t h = mix(seed ^ mix(((uint64_t)r << 48) ^ i));
    const float m = 1.0f + (float)((h >> 8) & 0xFFFFFF) / 16777216.0f;
    return ldexpf(h >> 63 ? -m : m, (int)(h % 9) - 4);
}

static uint64_t digest(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* "digest NAME HEX" of a result every rank holds (the test compares them across ranks); a reduce-scatter's block
 * is this rank's alone: "block NAME HEX". */
static void print_digest(const char *name, const float *x, size_t n) {
    const int block = strstr(name, "reduce-scatter") || strcmp(name, "in-flight-2") == 0;
    printf("%s %s %016llx\n", block ? "block" : "digest", name, (unsigned long long)digest(x, n * sizeof *x));
}

static float *filled(size_t n, float v) {
    float *x = vx_malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* got[i] against the reduction of element base+i over every rank's inputs: tcp (and one rank) sum in rank order,
 * so bit for bit; mpi in an order of its own, so within the float32 error bound of a sum of world terms. */
static void check_reduced(const Comm *c, const char *name, const float *got, size_t n, uint64_t seed, size_t base,
                          CommOp op) {
    const int exact = strcmp(c->name, "tcp") == 0 || c->world == 1;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = 0, mag = 0;
        float ordered = 0;
        for (int r = 0; r < c->world; r++) {
            const float v = value(seed, r, base + i);
            ref += v, mag += fabs(v);
            ordered = r ? ordered + v : v;
        }
        if (op == COMM_AVG) ref /= c->world, mag /= c->world, ordered = ordered / (float)c->world;
        const int ok = exact ? bits(got[i]) == bits(ordered) : fabs(got[i] - ref) <= c->world * 0x1p-23 * mag;
        if (!ok && bad++ < 3)
            printf("FAIL rank %d: %s[%zu] = %.9g, reference %.9g (rank-order float %.9g)\n", c->rank, name, i,
                   got[i], ref, ordered);
    }
    checks++;
    if (bad) failures++;
    print_digest(name, got, n);
}

/* ---- check mode -------------------------------------------------------------------------------------------- */

static void check_allreduce(Comm *c, size_t n, CommOp op) {
    char name[64];
    snprintf(name, sizeof name, "allreduce-%s-%zu", comm_op_name(op), n);
    const uint64_t seed = digest(name, strlen(name));
    float *x = vx_malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = value(seed, c->rank, i);
    comm_wait(c, comm_allreduce(c, x, n, op, name), NULL);
    check_reduced(c, name, x, n, seed, 0, op);
    free(x);
}

static void check_broadcast(Comm *c, size_t n, int root) {
    char name[64];
    snprintf(name, sizeof name, "broadcast-root%d-%zu", root, n);
    const uint64_t seed = digest(name, strlen(name));
    float *x = vx_malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = value(seed, c->rank, i);
    comm_wait(c, comm_broadcast(c, x, n, root, name), NULL);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += bits(x[i]) != bits(value(seed, root, i));
    CHECK(bad == 0, "%s: %zu of %zu floats differ from rank %d's", name, bad, n, root);
    print_digest(name, x, n);
    free(x);
}

static void check_reduce_scatter(Comm *c, size_t n, CommOp op, int in_place) {
    char name[64];
    snprintf(name, sizeof name, "reduce-scatter-%s-%zu%s", comm_op_name(op), n, in_place ? "-in-place" : "");
    const uint64_t seed = digest(name, strlen(name));
    const size_t total = (size_t)c->world * n;
    float *send = vx_malloc((total ? total : 1) * sizeof *send), *recv = in_place ? NULL : filled(n ? n : 1, NAN);
    for (size_t i = 0; i < total; i++) send[i] = value(seed, c->rank, i);
    float *out = in_place ? send + (size_t)c->rank * n : recv;
    comm_wait(c, comm_reduce_scatter(c, send, out, n, op, name), NULL);
    check_reduced(c, name, out, n, seed, (size_t)c->rank * n, op);
    free(send);
    free(recv);
}

static void check_all_gather(Comm *c, size_t n, int in_place) {
    char name[64];
    snprintf(name, sizeof name, "all-gather-%zu%s", n, in_place ? "-in-place" : "");
    const uint64_t seed = digest(name, strlen(name));
    const size_t total = (size_t)c->world * n;
    float *recv = filled(total ? total : 1, NAN);
    float *send = in_place ? recv + (size_t)c->rank * n : vx_malloc((n ? n : 1) * sizeof *send);
    for (size_t i = 0; i < n; i++) send[i] = value(seed, c->rank, i);
    comm_wait(c, comm_all_gather(c, send, recv, n, name), NULL);
    size_t bad = 0;
    for (size_t i = 0; i < total; i++) bad += bits(recv[i]) != bits(value(seed, (int)(i / n), i % n));
    CHECK(bad == 0, "%s: %zu of %zu floats differ from the ranks' inputs", name, bad, total);
    print_digest(name, recv, total);
    if (!in_place) free(send);
    free(recv);
}

/* Reduce-scatter to owners (sharded data parallelism's buckets): each rank's block is the sum the all-reduce of the
 * same buffer gives, bit for bit (the contract: a sharded run's gradients are the replicated run's), and within
 * the float32 bound of the float64 reference; `shape` picks the blocks: uneven, empty ones, one owner of all, a
 * total smaller than the world, a large one. */
static void check_reduce_scatter_v(Comm *c, int shape, CommOp op) {
    const int W = c->world, me = c->rank;
    size_t *counts = vx_malloc((size_t)W * sizeof *counts), total = 0, mine = 0;
    for (int r = 0; r < W; r++) {
        counts[r] = shape == 0 ? 1000 + 37 * (size_t)r : shape == 1 ? (r % 2 ? 0 : 2003)
                  : shape == 2 ? (r == W - 1 ? 5000 : 0) : shape == 3 ? (r == 0) : 333334 - (size_t)r * 11;
        if (r < me) mine += counts[r];
        total += counts[r];
    }
    char name[64];
    snprintf(name, sizeof name, "reduce-scatter-v-%s-%d", comm_op_name(op), shape);
    const uint64_t seed = digest(name, strlen(name));
    float *x = vx_malloc((total ? total : 1) * sizeof *x), *y = vx_malloc((total ? total : 1) * sizeof *y);
    for (size_t i = 0; i < total; i++) x[i] = y[i] = value(seed, me, i);
    comm_wait(c, comm_reduce_scatter_v(c, x, counts, op, name), NULL);
    comm_wait(c, comm_allreduce(c, y, total, op, name), NULL);
    size_t bad = 0;
    for (size_t i = mine; i < mine + counts[me]; i++) bad += bits(x[i]) != bits(y[i]);
    CHECK(bad == 0, "%s: %zu of %zu floats of rank %d's block differ from the all-reduce's", name, bad, counts[me], me);
    char block[80];
    snprintf(block, sizeof block, "%s-block", name); /* "block ...": a result only this rank holds */
    check_reduced(c, block, x + mine, counts[me], seed, mine, op);
    free(x), free(y), free(counts);
}

static void check_barrier(Comm *c) {
    comm_wait(c, comm_barrier(c, "barrier 1"), NULL);
    const double t0 = vx_now();
    if (c->rank == c->world - 1) sleep_s(0.3);
    comm_wait(c, comm_barrier(c, "barrier 2"), NULL);
    const double waited = vx_now() - t0;
    CHECK(c->world == 1 || c->rank == c->world - 1 || waited >= 0.25,
          "barrier: left after %.3f s while rank %d slept 0.3 s before entering", waited, c->world - 1);
}

/* Six collectives of every kind in flight at once: they complete in issue order (comm_test of a later one never
 * says done while an earlier one is not), and waiting for them last-first gives the right results. */
static void check_in_flight(Comm *c) {
    const int W = c->world, me = c->rank;
    const size_t na = 1000003, nb = 7, nc = 1000, nd = 1001;
    const uint64_t s = 77;
    float *a = vx_malloc(na * 4), *b = vx_malloc(nb * 4), *cs = vx_malloc((size_t)W * nc * 4), *cr = filled(nc, NAN);
    float *ds = vx_malloc(nd * 4), *dr = filled((size_t)W * nd, NAN), e = value(s + 5, me, 0);
    for (size_t i = 0; i < na; i++) a[i] = value(s, me, i);
    for (size_t i = 0; i < nb; i++) b[i] = value(s + 1, me, i);
    for (size_t i = 0; i < (size_t)W * nc; i++) cs[i] = value(s + 2, me, i);
    for (size_t i = 0; i < nd; i++) ds[i] = value(s + 3, me, i);
    CommWork *h[6] = {comm_allreduce(c, a, na, COMM_SUM, "in flight 0"), comm_broadcast(c, b, nb, W - 1, "in flight 1"),
                      comm_reduce_scatter(c, cs, cr, nc, COMM_AVG, "in flight 2"),
                      comm_all_gather(c, ds, dr, nd, "in flight 3"), comm_barrier(c, "in flight 4"),
                      comm_allreduce(c, &e, 1, COMM_AVG, "in flight 5")};
    int done[6] = {0}, order_ok = 1, rounds = 0;
    for (const double until = vx_now() + 120; !done[0] || !done[5];) {
        int later_done = 0;
        for (int k = 5; k >= 0; k--) { /* last first: once a later one is done, every earlier one must be */
            const int d = comm_test(c, h[k]);
            if (later_done && !d) order_ok = 0;
            if (done[k] && !d) order_ok = 0;
            later_done |= d, done[k] = d;
        }
        rounds++;
        if (vx_now() > until) break;
        sleep_s(0.0005);
    }
    CHECK(order_ok, "in flight: a collective reported done before one issued earlier");
    CHECK(done[5], "in flight: not done within 120 s");
    for (int k = 5; k >= 0; k--) comm_wait(c, h[k], NULL);
    check_reduced(c, "in-flight-0", a, na, s, 0, COMM_SUM);
    size_t bad = 0;
    for (size_t i = 0; i < nb; i++) bad += bits(b[i]) != bits(value(s + 1, W - 1, i));
    CHECK(bad == 0, "in flight: broadcast differs from rank %d's", W - 1);
    check_reduced(c, "in-flight-2", cr, nc, s + 2, (size_t)me * nc, COMM_AVG);
    bad = 0;
    for (size_t i = 0; i < (size_t)W * nd; i++) bad += bits(dr[i]) != bits(value(s + 3, (int)(i / nd), i % nd));
    CHECK(bad == 0, "in flight: all-gather wrong in %zu places", bad);
    check_reduced(c, "in-flight-5", &e, 1, s + 5, 0, COMM_AVG);
    printf("in flight: %d polling rounds\n", rounds);
    free(a), free(b), free(cs), free(cr), free(ds), free(dr);
}

/* CommTimes: set, ordered; and on tcp the collective finishes while the main thread makes no call at all. */
static void check_times(Comm *c) {
    const size_t n = 1000003;
    float *x = filled(n, 1.0f);
    CommWork *w = comm_allreduce(c, x, n, COMM_SUM, "timed");
    int64_t seen = 0;
    if (strcmp(c->name, "tcp") == 0) {
        for (int tries = 0; tries < 20 && !seen; tries++) { /* no comm_* call while the thread works */
            sleep_s(1.0);
            const int64_t woke = now_ns();
            if (comm_test(c, w)) seen = woke;
        }
        CHECK(seen, "times: the all-reduce did not finish within 20 s without calls");
    }
    CommTimes t;
    comm_wait(c, w, &t);
    const int64_t after = now_ns();
    if (c->world == 1) {
        CHECK(t.start_ns == 0 && t.end_ns == 0, "times: single should report 0, 0");
    } else {
        CHECK(t.start_ns > 0 && t.start_ns <= t.end_ns && t.end_ns <= after, "times: start %lld end %lld after %lld",
              (long long)t.start_ns, (long long)t.end_ns, (long long)after);
        CHECK(!seen || t.end_ns <= seen, "times: end %lld is after the moment it was seen done (%lld)",
              (long long)t.end_ns, (long long)seen);
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += x[i] != (float)c->world;
    CHECK(bad == 0, "times: the all-reduce of ones is wrong in %zu places", bad);
    free(x);
}

static void check_host(Comm *c) {
    float v[3];
    for (int i = 0; i < 3; i++) v[i] = value(99, c->rank, (size_t)i);
    comm_allreduce_host(c, v, 3, COMM_AVG, "losses");
    check_reduced(c, "allreduce-host", v, 3, 99, 0, COMM_AVG);
}

static void native_identity(Comm *c) {
#ifdef VX_MPI
    if (strcmp(c->name, "mpi") != 0) return;
    const size_t sizes[] = {7, 1000003, 4194304};
    for (int k = 0; k < 3; k++) {
        const size_t n = sizes[k];
        float *x = vx_malloc(n * sizeof *x);
        for (size_t i = 0; i < n; i++) x[i] = value(1234 + k, c->rank, i);
        uint64_t d, *all = vx_malloc((size_t)c->world * sizeof *all);
        MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        d = digest(x, n * sizeof *x);
        MPI_Allgather(&d, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
        int same = 1;
        for (int r = 1; r < c->world; r++) same &= all[r] == all[0];
        if (c->rank == 0)
            printf("info: Open MPI's own MPI_Allreduce of %zu floats on %d ranks: %s on every rank\n", n, c->world,
                   same ? "identical bytes" : "DIFFERENT bytes");
        free(x), free(all);
    }
#else
    (void)c;
#endif
}

static void mode_check(Comm *c) {
    const size_t sizes[] = {0, 1, 7, 1000003};
    for (int k = 0; k < 4; k++) {
        check_allreduce(c, sizes[k], COMM_SUM);
        check_allreduce(c, sizes[k], COMM_AVG);
        check_broadcast(c, sizes[k], 0);
        check_broadcast(c, sizes[k], c->world - 1);
        check_reduce_scatter(c, sizes[k], COMM_SUM, 0);
        check_reduce_scatter(c, sizes[k], COMM_AVG, 0);
        check_all_gather(c, sizes[k], 0);
    }
    check_reduce_scatter(c, 1001, COMM_SUM, 1);
    check_all_gather(c, 1001, 1);
    for (int shape = 0; shape < 5; shape++) check_reduce_scatter_v(c, shape, COMM_SUM);
    check_reduce_scatter_v(c, 0, COMM_AVG);
    check_barrier(c);
    check_in_flight(c);
    check_times(c);
    check_host(c);
    native_identity(c);
}

/* ---- failure modes ----------------------------------------------------------------------------------------- */

static void mode_sleep(Comm *c, int who, double seconds) {
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = value(5, c->rank, (size_t)i);
    comm_wait(c, comm_barrier(c, "start"), NULL);
    if (c->rank == who) sleep_s(seconds);
    printf("issued_at %lld\n", (long long)now_ns());
    fflush(stdout);
    comm_wait(c, comm_allreduce(c, x, 1000, COMM_SUM, "bucket 2/3 of step 7"), NULL);
    printf("finished\n");
}

static void mode_die(Comm *c, int who) {
    const size_t n = 16u << 20; /* 64 MiB: still in flight when the rank dies */
    float *x = filled(n, 1.0f);
    comm_wait(c, comm_barrier(c, "start"), NULL);
    printf("issued_at %lld\n", (long long)now_ns());
    fflush(stdout);
    CommWork *w = comm_allreduce(c, x, n, COMM_SUM, "bucket 1/1 of step 3");
    if (c->rank == who) {
        sleep_s(0.02);
        comm_test(c, w);
        raise(SIGKILL);
    }
    comm_wait(c, w, NULL);
    printf("finished\n");
    free(x);
}

static void mode_mismatch(Comm *c) {
    float x[8] = {0};
    comm_wait(c, comm_allreduce(c, x, c->rank == 1 ? 8 : 7, COMM_SUM, "bucket 1/2 of step 1"), NULL);
    printf("finished\n");
}

static void mode_bootstrap(double timeout, int over_mpi) {
    unsigned char blob[128], want[128];
    for (int i = 0; i < 128; i++) want[i] = (unsigned char)mix((uint64_t)i + 4242), blob[i] = env.rank ? 0 : want[i];
    if (over_mpi) bootstrap_broadcast_mpi(&env, blob, sizeof blob, timeout);
    else bootstrap_broadcast_tcp(&env, blob, sizeof blob, timeout);
    CHECK(memcmp(blob, want, sizeof blob) == 0, "bootstrap: the blob differs from rank 0's");
    printf("digest bootstrap %016llx\n", (unsigned long long)digest(blob, sizeof blob));
}

/* Open MPI's own all-reduces on the same sizes, for comparison: the non-blocking one polled as comm_wait polls,
 * and the blocking one. Returns the best seconds of each in best[2]. */
static void bench_native(const Comm *c, float *x, size_t n, int reps, double best[2]) {
    best[0] = best[1] = 1e30;
#ifdef VX_MPI
    for (int rep = -1; rep < reps; rep++)
        for (int k = 0; k < 2; k++) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = vx_now();
            if (k == 0) {
                MPI_Request r;
                int done = 0;
                MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
                while (!done) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
            } else {
                MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            }
            const double t = vx_now() - t0;
            if (rep >= 0 && t < best[k]) best[k] = t;
        }
#else
    (void)c, (void)x, (void)n, (void)reps;
#endif
}

static void mode_bench(Comm *c) {
    const size_t mib[] = {1, 16, 64};
    for (int k = 0; k < 3; k++) {
        const size_t n = mib[k] << 18;
        float *x = filled(n, 1.0f);
        const int reps = mib[k] == 64 ? 4 : 10;
        double best = 1e30, sum = 0;
        for (int rep = -1; rep < reps; rep++) { /* rep -1 warms up */
            comm_wait(c, comm_barrier(c, "bench"), NULL);
            const double t0 = vx_now();
            comm_wait(c, comm_allreduce(c, x, n, COMM_SUM, "bench"), NULL);
            const double t = vx_now() - t0;
            if (rep >= 0) best = t < best ? t : best, sum += t;
        }
        if (c->rank == 0)
            printf("bench %s %d ranks all-reduce %zu MiB: best %.2f ms (%.2f GB/s), mean %.2f ms (%.2f GB/s)\n",
                   c->name, c->world, mib[k], best * 1e3, n * 4 / best / 1e9, sum / reps * 1e3,
                   n * 4 / (sum / reps) / 1e9);
        if (strcmp(c->name, "mpi") == 0) {
            double native[2];
            bench_native(c, x, n, reps, native);
            if (c->rank == 0)
                printf("bench open-mpi %d ranks all-reduce %zu MiB: MPI_Iallreduce best %.2f ms (%.2f GB/s), "
                       "MPI_Allreduce best %.2f ms (%.2f GB/s)\n", c->world, mib[k], native[0] * 1e3,
                       n * 4 / native[0] / 1e9, native[1] * 1e3, n * 4 / native[1] / 1e9);
        }
        free(x);
    }
}

/* ---- the launch environment -------------------------------------------------------------------------------- */

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

static void usage(void) {
    fprintf(stderr, "usage: comm_check [--rank R] [--world W] [--addr HOST] [--port P] [--timeout S] [--gpu-ranks R,R] "
                    "check|sleep RANK SECONDS|die RANK|mismatch|bootstrap|bench|built\n");
    exit(2);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const int under_mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
    snprintf(env.launcher, sizeof env.launcher, "%s", under_mpi ? "mpirun" : "torchrun");
    env.rank = under_mpi ? env_int("OMPI_COMM_WORLD_RANK", 0) : env_int("RANK", 0);
    env.world = under_mpi ? env_int("OMPI_COMM_WORLD_SIZE", 1) : env_int("WORLD_SIZE", 1);
    env.local_rank = under_mpi ? env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0) : env_int("LOCAL_RANK", 0);
    env.local_world = under_mpi ? env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1) : env_int("LOCAL_WORLD_SIZE", 1);
    const char *addr = getenv("MASTER_ADDR");
    snprintf(env.master_addr, sizeof env.master_addr, "%s", addr ? addr : "127.0.0.1");
    env.master_port = env_int("MASTER_PORT", 29500);
    double timeout = 60;
    const char *gpu_ranks = ""; /* ranks that say they run on a GPU (the device vote of comm_open) */
    int a = 1;
    for (; a + 1 < argc && strncmp(argv[a], "--", 2) == 0; a += 2) {
        if (!strcmp(argv[a], "--rank")) env.rank = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--world")) env.world = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--addr")) snprintf(env.master_addr, sizeof env.master_addr, "%s", argv[a + 1]);
        else if (!strcmp(argv[a], "--port")) env.master_port = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--timeout")) timeout = atof(argv[a + 1]);
        else if (!strcmp(argv[a], "--gpu-ranks")) gpu_ranks = argv[a + 1];
        else usage();
    }
    if (a >= argc) usage();
    const char *mode = argv[a];
    vx_log_rank = env.rank;
    if (!strcmp(mode, "built")) { /* what the test may expect of this build */
        printf("mpi built: %s\n", comm_mpi_built() ? "yes" : "no");
        return 0;
    }
    char list[256], me[24];
    snprintf(list, sizeof list, ",%s,", gpu_ranks);
    snprintf(me, sizeof me, ",%d,", env.rank);
    const int on_gpu = strstr(list, me) != NULL;
    Comm *c = NULL;
    if (!strcmp(mode, "bootstrap")) {
        /* over MPI the bootstrap finalises MPI again (nothing else uses it: the NCCL path); over TCP a
         * communicator then meets on the same port, as a torchrun launch would */
        mode_bootstrap(timeout, under_mpi);
        if (under_mpi) goto done;
        c = comm_open(&env, 0, NULL, timeout);
        check_allreduce(c, 1000003, COMM_AVG);
    } else {
        c = comm_open(&env, on_gpu, on_gpu ? "said so by --gpu-ranks" : "a CPU rank", timeout);
    }
    printf("comm %s rank %d/%d\n", c->name, c->rank, c->world);
    if (!strcmp(mode, "bootstrap")) (void)0;
    else if (!strcmp(mode, "check")) mode_check(c);
    else if (!strcmp(mode, "sleep") && a + 2 < argc) mode_sleep(c, atoi(argv[a + 1]), atof(argv[a + 2]));
    else if (!strcmp(mode, "die") && a + 1 < argc) mode_die(c, atoi(argv[a + 1]));
    else if (!strcmp(mode, "mismatch")) mode_mismatch(c);
    else if (!strcmp(mode, "bench")) mode_bench(c);
    else usage();
    comm_close(c);
done:
#ifdef VX_MPI
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    printf("mpi initialised: %s, finalised: %s\n", inited ? "yes" : "no", finalized ? "yes" : "no");
#endif
    printf("%s rank %d: %d checks, %d failed\n", failures ? "FAILED" : "ok", env.rank, checks, failures);
    return failures ? 1 : 0;
}

/* rank_agree.c: the ranks' agreement on the resolved config and the resume state (see rank_agree.h). */
#include "train/rank_agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"

#define AGREE_ENTRIES 192 /* hashes exchanged: [0] this build, [1] its key count, [2..] the keys, then the resume */
#define AGREE_FLOATS (AGREE_ENTRIES * 4)
#define AGREE_BUILD 0x56584147524545ull /* "VXAGREE", and the exchange's layout version below */
#define AGREE_VERSION 1

/* Keys that may differ between ranks: one rank's speed and memory, nothing of what is trained (rank_agree.h). */
static const char *const PER_RANK[] = {"train.threads", "data.workers", "data.prefetch", "data.cache_max_gib",
                                       "dist.gpus"};

static int per_rank(const char *name) {
    for (size_t i = 0; i < sizeof PER_RANK / sizeof PER_RANK[0]; i++)
        if (strcmp(PER_RANK[i], name) == 0) return 1;
    return 0;
}

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* A 64-bit hash as four floats of 16 bits each: exact in any float collective, which carries them bit for bit. */
static void put(float *v, int entry, uint64_t h) {
    for (int k = 0; k < 4; k++) v[entry * 4 + k] = (float)((h >> (16 * k)) & 0xFFFF);
}

/* This rank's hashes; *nkeys: the config keys among them. */
static void hashes(const Config *cfg, const CkptId *resume, float *v, int *nkeys) {
    const int n = config_key_count();
    if (n + 3 > AGREE_ENTRIES) vx_fatal("rank_agree: %d config keys, more than AGREE_ENTRIES - 3", n);
    *nkeys = n;
    put(v, 0, AGREE_BUILD ^ AGREE_VERSION);
    put(v, 1, (uint64_t)n);
    const uint64_t basis = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        char name[96];
        if (per_rank(config_key_name(i, name, sizeof name))) {
            put(v, 2 + i, 0);
            continue;
        }
        char *json = config_key_json(cfg, i);
        put(v, 2 + i, fnv(json, strlen(json), fnv(name, strlen(name), basis)));
        free(json);
    }
    uint64_t r = 0x4E4F524553554D45ull; /* "NORESUME" */
    if (resume) {
        r = fnv(&resume->step, sizeof resume->step, basis);
        r = fnv(&resume->next_sample, sizeof resume->next_sample, r);
        r = fnv(&resume->crc, sizeof resume->crc, r); /* its CRC-32: the checkpoint's whole content */
    }
    put(v, 2 + n, r);
}

/* What entry e is, for the line; `value`: this rank's value of a config key, else "". */
static void describe(int e, int nkeys, const Config *cfg, const CkptId *resume, char *what, size_t len, char *value,
                     size_t value_len) {
    value[0] = 0;
    if (e == 0) {
        snprintf(what, len, "the voxscale build (start every rank with the same binary)");
    } else if (e == 1) {
        snprintf(what, len, "the config keys this build knows (another voxscale build; use one binary)");
    } else if (e < 2 + nkeys) {
        char name[96];
        config_key_name(e - 2, name, sizeof name);
        char *json = config_key_json(cfg, e - 2);
        snprintf(what, len, "%s", name);
        snprintf(value, value_len, "%.100s%s", json, strlen(json) > 100 ? "..." : "");
        free(json);
    } else {
        snprintf(what, len, "the resume state (--resume: a checkpoint on some ranks and another, or none, on others)");
        if (resume) snprintf(value, value_len, "step %lld", (long long)resume->step);
        else snprintf(value, value_len, "a fresh start");
    }
}

/* The two collectives (rank 0's hashes broadcast, then every rank's first difference gathered), each through
 * device memory where the communicator needs it; both are of a fixed size, whatever the config. */
static void collective(Comm *c, const Backend *be, float *host, size_t count, const float *send, int gather,
                       const char *what) {
    const size_t bytes = count * sizeof(float);
    float *buf = host, *dev_send = NULL;
    if (c->device_buffers) {
        buf = be->alloc(bytes);
        if (gather) {
            dev_send = be->alloc(sizeof(float));
            be->copy_to_device(dev_send, send, sizeof(float));
        } else {
            be->copy_to_device(buf, host, bytes);
        }
    }
    if (gather) comm_wait(c, comm_all_gather(c, dev_send ? dev_send : send, buf, 1, what), NULL);
    else comm_wait(c, comm_broadcast(c, buf, count, 0, what), NULL);
    if (c->device_buffers) {
        be->synchronize();
        be->copy_to_host(host, buf, bytes);
        be->release(buf);
        if (dev_send) be->release(dev_send);
    }
}

void rank_agree(Comm *c, const Backend *be, const Config *cfg, const CkptId *resume) {
    if (c->world <= 1) return;
    float *mine = vx_calloc(AGREE_FLOATS, sizeof(float)), *root = vx_malloc(AGREE_FLOATS * sizeof(float));
    float *flags = vx_malloc((size_t)c->world * sizeof(float));
    int nkeys;
    hashes(cfg, resume, mine, &nkeys);
    memcpy(root, mine, AGREE_FLOATS * sizeof(float));
    collective(c, be, root, AGREE_FLOATS, NULL, 0, "the ranks' config hashes (their agreement)");
    /* where this rank first differs from rank 0 (-1: nowhere); the build and its key count come first, so ranks
     * of different builds stop there rather than compare keys that mean different things */
    int first = -1;
    for (int e = 0; e < AGREE_ENTRIES && first < 0; e++)
        if (memcmp(root + 4 * e, mine + 4 * e, 4 * sizeof(float)) != 0) first = e;
    const float flag = (float)first; /* < AGREE_ENTRIES: exact */
    collective(c, be, flags, (size_t)c->world, &flag, 1, "the ranks' agreement");
    int key = AGREE_ENTRIES, differ = 0;
    char ranks[160] = "";
    for (int r = 0; r < c->world; r++) {
        const int f = (int)flags[r];
        if (f < 0) continue;
        if (f < key) key = f;
        const size_t used = strlen(ranks);
        if (differ < 8) snprintf(ranks + used, sizeof ranks - used, "%s%d", differ ? ", " : "", r);
        else if (differ == 8) snprintf(ranks + used, sizeof ranks - used, ", ...");
        differ++;
    }
    free(root);
    free(mine);
    free(flags);
    if (!differ) return;
    char what[160], value[160];
    describe(key, nkeys, cfg, resume, what, sizeof what, value, sizeof value);
    vx_error_line("the ranks do not agree: %d rank(s) (%s) differ from rank 0, first in %s%s%s%s; every rank must run "
                  "the same config and resume state (only train.threads, data.workers, data.prefetch, "
                  "data.cache_max_gib and dist.gpus may differ)", differ, ranks, what, value[0] ? " (this rank: " : "",
                  value, value[0] ? ")" : "");
    /* every rank's line is out before any rank ends (mpirun ends the others at the first non-zero exit and can
     * drop what they printed last); every rank got here together, so nobody is left waiting in a collective */
    comm_wait(c, comm_barrier(c, "the ranks' disagreement, said by each"), NULL);
    comm_close(c);
    /* and a moment for the launcher to forward them: mpirun aborts the job at the first non-zero exit and drops
     * output of the other ranks it has not read yet (seen: a rank's line lost in 1 of 3 runs without it) */
    const struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    vx_exit(VX_EXIT_USAGE);
}

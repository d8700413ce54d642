/* train_ckpt.c: reading a checkpoint of either format into a run of any sharding, and writing a sharded run's
 * checkpoint (see train_ckpt.h). */
#include "train/train_ckpt.h"

#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/util.h"

void resume_read(const char *path, const Model *m, int64_t steps, Resume *r) {
    memset(r, 0, sizeof *r);
    r->sharded = ckpt_is_sharded(path);
    if (r->sharded) {
        ckpt_sharded_read(path, m, steps, &r->sc);
        r->id = r->sc.id;
    } else {
        ckpt_read(path, m, steps, &r->ck);
        r->id = ckpt_id(&r->ck);
    }
}

int64_t resume_peek_step(const char *path) {
    char why[160];
    int is_dir = 0; /* (a FIFO would block fopen: anything but a regular file is left to resume_read's refusal) */
    if (!fs_input_kind(path, 0, &is_dir, why, sizeof why) || is_dir || ckpt_is_sharded(path)) return -1;
    CkptHeader h;
    const size_t need = offsetof(CkptHeader, step) + sizeof h.step;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    const size_t got = fread(&h, 1, need, f);
    fclose(f);
    return got == need && memcmp(h.magic, CKPT_MAGIC, sizeof h.magic) == 0 ? h.step : -1;
}

void resume_free(Resume *r) {
    if (r->sharded) ckpt_sharded_free(&r->sc);
    else ckpt_free(&r->ck);
}

int64_t resume_step(const Resume *r) { return r->sharded ? r->sc.header.step : r->ck.header.step; }

const char *resume_format(const Resume *r) {
    static char s[64];
    if (r->sharded) snprintf(s, sizeof s, "sharded (ZeRO-%d, %d ranks)", r->sc.zero, r->sc.world);
    else snprintf(s, sizeof s, "ordinary");
    return s;
}

void resume_apply(const Resume *r, Model *m, Zero *z, CkptState *st) {
    if (!r->sharded && !z) { /* the replicated run from its own format: as it always did */
        ckpt_apply(&r->ck, m, st);
        return;
    }
    const size_t fbytes = (size_t)m->param_floats * sizeof(float);
    float *own[4] = {NULL, NULL, NULL, NULL};
    const float *param, *mom, *vel, *bufs;
    if (r->sharded) {
        param = r->sc.param, mom = r->sc.adam_m, vel = r->sc.adam_v, bufs = r->sc.bufs;
        const CkptHeader *h = &r->sc.header;
        *st = (CkptState){.step = h->step, .next_sample = h->next_sample, .loss_ema = h->loss_ema,
                          .world_size = h->world_size,
                          .opt = {.loss_scale = h->loss_scale, .adam_step = h->adam_step,
                                  .skipped_steps = h->skipped_steps, .growth_tracker = h->growth_tracker}};
    } else {
        for (int k = 0; k < 3; k++) own[k] = vx_malloc(fbytes ? fbytes : 1);
        own[3] = vx_malloc((size_t)(m->buffer_floats ? m->buffer_floats : 1) * sizeof(float));
        ckpt_unpack(&r->ck, m, own[0], own[1], own[2], own[3], st);
        param = own[0], mom = own[1], vel = own[2], bufs = own[3];
    }
    m->be->copy_to_device(m->param, param, fbytes); /* (the padding past param_floats stays zero) */
    model_upload_buffers(m, bufs);
    if (z) {
        zero_load_moments(z, mom, vel);
    } else { /* a replicated run from a sharded checkpoint: the whole moments */
        m->be->copy_to_device(m->adam_m, mom, fbytes);
        m->be->copy_to_device(m->adam_v, vel, fbytes);
        model_sync_lp(m);
    }
    for (int k = 0; k < 4; k++) free(own[k]);
}

uint64_t train_ckpt_nonce(Comm *comm) {
    uint64_t x = 0;
    if (comm->rank == 0) {
        const int fd = open("/dev/urandom", O_RDONLY);
        if (fd < 0 || read(fd, &x, sizeof x) != (ssize_t)sizeof x) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 32);
        }
        if (fd >= 0) close(fd);
    }
    float v[4] = {0}; /* 16 bits a float: exact in a sum where the other ranks add zeros */
    for (int k = 0; comm->rank == 0 && k < 4; k++) v[k] = (float)((x >> (16 * k)) & 0xFFFF);
    comm_allreduce_host(comm, v, 4, COMM_SUM, "the run's checkpoint nonce");
    x = 0;
    for (int k = 0; k < 4; k++) x |= (uint64_t)v[k] << (16 * k);
    return x;
}

/* Index of the first non-finite value of x[n], or -1. */
static long first_nonfinite(const float *x, long n) {
    for (long i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

void train_ckpt_save_sharded(const char *dir, Model *m, Zero *z, Comm *comm, const CkptState *st, uint64_t nonce) {
    const ZeroLayout *L = zero_layout_of(z);
    const int rank = comm->rank, world = comm->world;
    if (rank == 0) fs_mkdirs(dir);
    comm_wait(comm, comm_barrier(comm, "the checkpoint's directory"), NULL);
    const size_t bytes = (size_t)L->shard * sizeof(float);
    float *a[3] = {vx_malloc(bytes), vx_malloc(bytes), vx_malloc(bytes)};
    zero_download_shard(z, a[0], a[1], a[2]);
    float *bufs = NULL;
    if (rank == 0 && m->buffer_floats) {
        bufs = vx_malloc((size_t)m->buffer_floats * sizeof(float));
        model_download_buffers(m, bufs);
    }
    /* a diverged state is never saved, on any rank: every rank learns whether any shard holds a non-finite value */
    long bad = -1;
    int bad_k = 0;
    for (int k = 0; k < 3 && bad < 0; k++) bad = first_nonfinite(a[k], L->shard), bad_k = k;
    if (bad < 0 && bufs) bad = first_nonfinite(bufs, m->buffer_floats), bad_k = 3;
    float flags[2] = {bad >= 0 ? 1.0f : 0.0f, bad >= 0 ? (float)rank : 0.0f};
    comm_allreduce_host(comm, flags, 2, COMM_SUM, "the checkpoint's finiteness");
    if (flags[0] > 0) {
        static const char *const WHAT[4] = {"a parameter", "an AdamW first moment", "an AdamW second moment",
                                            "a BatchNorm running statistic"};
        if (bad >= 0)
            vx_exit_error(VX_EXIT_DIVERGED, "training diverged: %s of rank %d's shard (float %ld of the flat layout) is "
                          "%g after step %lld, so no checkpoint is written (the last one stays); lower train.lr or set "
                          "train.grad_clip", WHAT[bad_k], rank, (long)((bad_k < 3 ? (long)rank * L->shard : 0) + bad),
                          (double)(bad_k < 3 ? a[bad_k][bad] : bufs[bad]), (long long)st->step);
        vx_exit_error(VX_EXIT_DIVERGED, "training diverged: %g rank(s) found a non-finite value in their shard after "
                      "step %lld, so no checkpoint is written", (double)flags[0], (long long)st->step);
    }
    /* the checkpoint's id: the run's nonce, the step and the directory hashed: a shard of another run, step or
     * checkpoint name never passes for one of this checkpoint's */
    uint64_t h = (nonce ^ (uint64_t)st->step * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
    for (const char *p = dir; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    const ShardWrite w = {.checkpoint_id = h, .rank = rank, .world = world, .zero = L->stage,
                          .begin = (uint64_t)rank * (uint64_t)L->shard, .count = (uint64_t)L->shard,
                          .master = a[0], .adam_m = a[1], .adam_v = a[2], .bufs = bufs};
    const uint32_t crc = ckpt_shard_write(dir, m, st->step, &w);
    /* every rank's CRC to rank 0, two 16-bit halves a float (exact in the sum) */
    float *crcs = vx_calloc((size_t)world * 2, sizeof(float));
    crcs[2 * rank] = (float)(crc & 0xFFFF);
    crcs[2 * rank + 1] = (float)(crc >> 16);
    for (size_t off = 0, n = (size_t)world * 2; off < n; off += 4000) /* (host all-reduces are for a few floats) */
        comm_allreduce_host(comm, crcs + off, n - off < 4000 ? n - off : 4000, COMM_SUM, "the shards' checksums");
    if (rank == 0) {
        uint32_t *all = vx_malloc((size_t)world * sizeof *all);
        for (int r = 0; r < world; r++) all[r] = (uint32_t)crcs[2 * r] | (uint32_t)crcs[2 * r + 1] << 16;
        ckpt_manifest_write(dir, m, st, h, world, L->stage, (uint64_t)L->shard, all);
        free(all);
    }
    /* nobody goes on (or ends) before the manifest exists */
    comm_wait(comm, comm_barrier(comm, "the checkpoint's manifest"), NULL);
    free(crcs);
    free(bufs);
    for (int k = 0; k < 3; k++) free(a[k]);
}

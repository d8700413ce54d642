/* zero.c: sharded data parallelism: the shard layout, the model's buffers shaped for it, the shard state and the
 * sharded optimizer step (see zero.h). */
#include "train/zero.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "elementwise/elementwise.h"

struct Zero {
    ZeroLayout L;
    int rank, world;
    long begin;         /* rank x shard */
    Model *m;
    Comm *comm;
    Buckets *bk;        /* stage 2: sharded */
    const Backend *be;
    float *grad_shard;  /* stage 2: its own (shard floats); stage 1: m->grad + begin */
    float *master;      /* float32: m->param + begin; mixed precision: its own (shard floats); offload: none */
    double *parts;      /* the ranks' squared norms [world] (backend memory) */
    ZeroOffload *off;
    ModelMemory extra;  /* what zero_open allocated, as the allocator counted it (carried to a rebuilt model) */
};

int zero_stage(const DistConfig *dist) {
    if (strcmp(dist->zero, "auto") == 0) return -1;
    return atoi(dist->zero);
}

ZeroLayout zero_layout(long flat, int world, int stage) {
    if (world < 1) world = 1;
    const long per = (flat + world - 1) / world;
    const long shard = (per + ZERO_ALIGN - 1) / ZERO_ALIGN * ZERO_ALIGN;
    return (ZeroLayout){.stage = stage, .world = world, .flat = flat, .shard = shard, .padded = shard * world};
}

void zero_shape_model(Model *m, const ZeroLayout *L, Buckets *bk, int offload) {
    m->flat_floats = m->grad_floats = L->padded;
    m->state_floats = offload ? 0 : L->shard;
    if (L->stage < 2) return;
    m->grad_floats = buckets_plan_slots(bk, m->n_nodes, 2);
    for (int p = 0; p < m->n_params; p++) { /* each view into its bucket's slot, where the bucket holds it */
        ParamView *v = &m->params[p];
        int i = 0;
        while (i < bk->n && !(v->offset >= bk->b[i].begin && v->offset < bk->b[i].end)) i++;
        if (i == bk->n) vx_fatal("parameter %s lies in no gradient bucket", v->name);
        v->grad_offset = bk->b[i].stage_begin + (v->offset - bk->b[i].begin);
    }
}

/* be->alloc'd and zeroed, counted into *counted as the allocator counts it */
static void *alloc_counted(const Backend *be, size_t bytes, size_t *counted) {
    const size_t before = be->bytes_in_use();
    void *p = be->alloc(bytes ? bytes : 1);
    be->zero(p, bytes);
    *counted += be->bytes_in_use() - before;
    return p;
}

Zero *zero_open(Model *m, const ZeroLayout *L, Comm *comm, Buckets *bk, int offload) {
    Zero *z = vx_calloc(1, sizeof *z);
    z->L = *L;
    z->rank = comm->rank;
    z->world = comm->world;
    z->begin = (long)z->rank * L->shard;
    z->m = m;
    z->comm = comm;
    z->be = m->be;
    z->bk = L->stage >= 2 ? bk : NULL;
    const size_t shard_bytes = (size_t)L->shard * sizeof(float);
    z->parts = alloc_counted(z->be, (size_t)z->world * sizeof(double), &z->extra.optimizer);
    if (L->stage >= 2) {
        z->grad_shard = alloc_counted(z->be, shard_bytes, &z->extra.grads);
        buckets_shard(bk, z->be, L->shard, z->grad_shard);
    } else {
        z->grad_shard = m->grad + z->begin;
    }
    if (offload) {
        size_t host = 0;
        z->off = zero_offload_open(z->be, L->shard, &host);
    } else if (m->dtype != DT_F32) {
        z->master = alloc_counted(z->be, shard_bytes, &z->extra.optimizer);
    } else {
        z->master = m->param + z->begin;
    }
    m->mem.grads += z->extra.grads;
    m->mem.optimizer += z->extra.optimizer;
    return z;
}

void zero_free(Zero *z) {
    if (!z) return;
    z->be->release(z->parts);
    if (z->L.stage >= 2) z->be->release(z->grad_shard);
    if (z->master && z->master != z->m->param + z->begin) z->be->release(z->master);
    zero_offload_free(z->off);
    free(z);
}

const ZeroLayout *zero_layout_of(const Zero *z) { return &z->L; }
int zero_offloaded(const Zero *z) { return z->off != NULL; }
float *zero_grad_shard(const Zero *z) { return z->grad_shard; }

/* In mixed precision the ranks compute with the compute type's values: param_lp from the float32 parameters, and
 * the float32 copy (what the norm layers read) made from it, as the gathered parameters will be after every step. */
static void compute_copies(Zero *z) {
    Model *m = z->m;
    if (m->dtype == DT_F32) return;
    model_sync_lp(m);
    z->be->elementwise->cast(m->flat_floats, m->dtype, m->param_lp, DT_F32, m->param);
}

void zero_sync_master(Zero *z) {
    Model *m = z->m;
    const size_t bytes = (size_t)z->L.shard * sizeof(float);
    if (z->off) {
        z->be->copy_to_host(zero_offload_master(z->off), m->param + z->begin, bytes);
    } else if (z->master != m->param + z->begin) {
        float *host = vx_malloc(bytes);
        z->be->copy_to_host(host, m->param + z->begin, bytes);
        z->be->copy_to_device(z->master, host, bytes);
        free(host);
    }
    compute_copies(z);
}

void zero_load_moments(Zero *z, const float *flat_m, const float *flat_v) {
    const long n = z->L.shard, avail = z->L.flat - z->begin; /* the flat layout's floats in this shard */
    const size_t bytes = (size_t)n * sizeof(float);
    float *host[2] = {vx_calloc((size_t)n, sizeof(float)), vx_calloc((size_t)n, sizeof(float))};
    const float *src[2] = {flat_m, flat_v};
    for (int k = 0; k < 2; k++)
        if (src[k] && avail > 0) memcpy(host[k], src[k] + z->begin, (size_t)(avail < n ? avail : n) * sizeof(float));
    if (z->off) {
        memcpy(zero_offload_m(z->off), host[0], bytes);
        memcpy(zero_offload_v(z->off), host[1], bytes);
    } else {
        z->be->copy_to_device(z->m->adam_m, host[0], bytes);
        z->be->copy_to_device(z->m->adam_v, host[1], bytes);
    }
    free(host[0]);
    free(host[1]);
}

void zero_download_shard(const Zero *z, float *master, float *mom, float *vel) {
    const size_t bytes = (size_t)z->L.shard * sizeof(float);
    if (z->off) {
        z->be->synchronize();
        memcpy(master, zero_offload_master(z->off), bytes);
        memcpy(mom, zero_offload_m(z->off), bytes);
        memcpy(vel, zero_offload_v(z->off), bytes);
        return;
    }
    z->be->copy_to_host(master, z->master, bytes);
    z->be->copy_to_host(mom, z->m->adam_m, bytes);
    z->be->copy_to_host(vel, z->m->adam_v, bytes);
}

/* Each group's part of this rank's shard [begin, begin + shard), shard-relative (at most one per group; a group the
 * shard does not reach has none). The frozen range and the padding beyond the flat layout lie in no group. */
static int shard_ranges(const Zero *z, const ParamGroups *pg, ZeroRange *r) {
    int n = 0;
    const long end = z->begin + z->L.shard;
    for (int i = 0; i < pg->n; i++) {
        const long lo = pg->g[i].begin > z->begin ? pg->g[i].begin : z->begin;
        const long hi = pg->g[i].end < end ? pg->g[i].end : end;
        if (lo < hi) r[n++] = (ZeroRange){lo - z->begin, hi - z->begin, pg->g[i].backbone};
    }
    return n;
}

void zero_optimizer(Zero *z, const OptimConfig *ocfg, const ParamGroups *pg, OptimState *st, OptimState *st_backbone,
                    float *sumsq) {
    Model *m = z->m;
    const Backend *be = z->be;
    const long n = z->L.shard;
    /* the global norm of the trainable floats [0, pg->trainable): every rank's part of them (none where its shard is
     * all frozen), gathered in place (a double is two floats' bytes), added in rank order */
    const long trained = pg->trainable - z->begin < 0 ? 0 : pg->trainable - z->begin < n ? pg->trainable - z->begin : n;
    be->optim->sumsq_part(trained, z->grad_shard, z->parts + z->rank);
    comm_wait(z->comm, comm_all_gather(z->comm, (float *)(z->parts + z->rank), (float *)z->parts, 2,
                                       "the shards' squared gradient norms"), NULL);
    be->optim->sumsq_join(z->world, z->parts, sumsq);
    be->optim->prepare(ocfg, sumsq, st);
    if (pg->n > 1) be->optim->prepare(ocfg, sumsq, st_backbone); /* the same decisions, at its lr (step.c) */
    OptimState *const states[2] = {st, st_backbone};
    ZeroRange r[2];
    const int nr = shard_ranges(z, pg, r);
    const int mixed = m->dtype != DT_F32;
    const size_t es = dtype_size(m->dtype);
    char *lp_shard = mixed ? (char *)m->param_lp + (size_t)z->begin * es : NULL;
    if (z->off) {
        /* the float32 update comes back into the parameters' shard (float32: the gathered values themselves; mixed:
         * rounded to the compute type next, then overwritten by the gathered copy) */
        zero_offload_step(z->off, z->grad_shard, r, nr, states, pg->n > 1 ? 2 : 1, m->param + z->begin);
        if (mixed) be->elementwise->cast(n, DT_F32, m->param + z->begin, m->dtype, lp_shard);
    } else {
        for (int i = 0; i < nr; i++) {
            const long a = r[i].lo;
            be->optim->adamw(r[i].hi - a, z->master + a, z->grad_shard + a, m->adam_m + a, m->adam_v + a,
                             states[r[i].state], m->dtype, mixed ? lp_shard + (size_t)a * es : NULL);
        }
    }
    if (!mixed) {
        comm_wait(z->comm, comm_all_gather(z->comm, m->param + z->begin, m->param, (size_t)n, "the updated parameters"),
                  NULL);
        return;
    }
    /* in the compute type: its bytes as floats (a shard is a multiple of ZERO_ALIGN elements, so whole floats) */
    const size_t floats = (size_t)n * dtype_size(m->dtype) / sizeof(float);
    comm_wait(z->comm, comm_all_gather(z->comm, (float *)(void *)lp_shard, m->param_lp, floats,
                                       "the updated parameters (compute type)"), NULL);
    be->elementwise->cast(m->flat_floats, m->dtype, m->param_lp, DT_F32, m->param);
}

void zero_gather_grad(Zero *z, float *flat) {
    const Backend *be = z->be;
    const size_t bytes = (size_t)z->L.padded * sizeof(float);
    float *all = be->alloc(bytes);
    comm_wait(z->comm, comm_all_gather(z->comm, z->grad_shard, all, (size_t)z->L.shard, "the gradient shards"), NULL);
    float *host = vx_malloc(bytes);
    be->copy_to_host(host, all, bytes);
    memcpy(flat, host, (size_t)z->L.flat * sizeof(float));
    free(host);
    be->release(all);
}

void zero_move_to(Zero *z, Model *m, Buckets *bk) {
    Model *old = z->m;
    const size_t bytes = (size_t)z->L.shard * sizeof(float);
    if (m->param_floats != z->L.flat) vx_fatal("zero_move_to: the new model's layout differs (%ld floats, not %ld)",
                                               m->param_floats, z->L.flat);
    if (!z->off) { /* the moments: the same shard of the same layout */
        float *host = vx_malloc(bytes);
        float *const from[2] = {old->adam_m, old->adam_v}, *const to[2] = {m->adam_m, m->adam_v};
        for (int k = 0; k < 2; k++) {
            z->be->copy_to_host(host, from[k], bytes);
            z->be->copy_to_device(to[k], host, bytes);
        }
        free(host);
    }
    m->mem.grads += z->extra.grads;
    m->mem.optimizer += z->extra.optimizer;
    if (z->master == old->param + z->begin) z->master = m->param + z->begin;
    z->m = m;
    if (z->L.stage >= 2) {
        z->bk = bk;
        buckets_shard(bk, z->be, z->L.shard, z->grad_shard);
    } else {
        z->grad_shard = m->grad + z->begin;
    }
}

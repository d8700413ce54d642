/* zero_plan.c: what each way of holding the training state costs per rank, from the model's exact sizes (the
 * activation arena's plan, the flat layout, the buckets and their staging slots as the trainer makes them), and
 * dist.zero auto's choice among them (see zero_plan.h). */
#include "train/zero_plan.h"

#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "hw/hw.h"
#include "train/runtime.h"

static const char *const MODE_NAME[ZERO_MODES] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-2 + offload"};

const char *zero_mode_name(int mode) { return mode >= 0 && mode < ZERO_MODES ? MODE_NAME[mode] : "?"; }

const char *zero_run_name(int stage, int offload) {
    if (stage == 1 && offload) return "ZeRO-1 + offload";
    return MODE_NAME[stage <= 0 ? ZERO_MODE_DDP : stage == 1 ? ZERO_MODE_1 : offload ? ZERO_MODE_OFFLOAD : ZERO_MODE_2];
}

size_t zero_bytes_device(const ZeroBytes *b) { return b->params + b->grads + b->optimizer + b->activations; }

void zero_shape_for(Model *m, int stage, int offload, int world, const DistConfig *dist, long *staging) {
    *staging = 0;
    if (stage == 0) return;
    const ZeroLayout L = zero_layout(m->param_floats, world, stage);
    Buckets *bk = stage >= 2 ? buckets_plan_model(m, NULL, dist->bucket_mb, dist->first_bucket_mb) : NULL;
    zero_shape_model(m, &L, bk, offload);
    if (bk) *staging = m->grad_floats;
    buckets_free(bk);
}

ZeroBytes zero_plan_bytes(Model *m, int mode, int world, const DistConfig *dist) {
    return zero_plan_bytes_at(m, mode == ZERO_MODE_OFFLOAD ? 2 : mode, mode == ZERO_MODE_OFFLOAD, world, dist);
}

ZeroBytes zero_plan_bytes_at(Model *m, int stage, int offload, int world, const DistConfig *dist) {
    offload = offload && stage > 0;
    const size_t f = sizeof(float), dsz = m->dtype == DT_F32 ? 0 : dtype_size(m->dtype);
    ZeroBytes b = {.activations = m->plan.total};
    const size_t bufs = (size_t)m->buffer_floats * f;
    if (stage == 0) {
        const size_t flat = (size_t)m->param_floats;
        b.params = flat * (f + dsz) + bufs;
        b.grads = flat * f;
        b.optimizer = 2 * flat * f;
        return b;
    }
    const ZeroLayout L = zero_layout(m->param_floats, world, stage);
    const size_t shard = (size_t)L.shard, padded = (size_t)L.padded;
    long staging = 0;
    /* the slots the trainer will plan: shaped on the model for a moment, then put back */
    const long keep[3] = {m->flat_floats, m->grad_floats, m->state_floats};
    long *grad_off = vx_malloc((size_t)(m->n_params ? m->n_params : 1) * sizeof *grad_off);
    for (int p = 0; p < m->n_params; p++) grad_off[p] = m->params[p].grad_offset;
    zero_shape_for(m, stage, offload, world, dist, &staging);
    m->flat_floats = keep[0], m->grad_floats = keep[1], m->state_floats = keep[2];
    for (int p = 0; p < m->n_params; p++) m->params[p].grad_offset = grad_off[p];
    free(grad_off);
    b.params = padded * (f + dsz) + bufs;
    b.grads = stage >= 2 ? ((size_t)staging + shard) * f : padded * f;
    b.optimizer = (size_t)world * sizeof(double) + (offload ? 0 : 2 * shard * f + (dsz ? shard * f : 0));
    b.host = offload ? 4 * shard * f + sizeof(OptimState) : 0;
    return b;
}

/* "12.3 MiB" or "1.23 GiB" */
static void human(size_t bytes, char *out, size_t len) {
    if (bytes >= (size_t)1 << 30) snprintf(out, len, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(out, len, "%.1f MiB", bytes / 1048576.0);
}

/* The bytes one rank may plan: the device's budget shared by the ranks that share the device (CPU ranks: every rank
 * of this host, whose memory is one; GPU ranks: those on one GPU), less, on CPU ranks, what each holds in host memory
 * beside the model (host_other: held-out volumes, the loader, checkpoint copies): the sum the host check makes. One
 * rank's bytes against the whole host's budget chose DDP for 4 ranks of a 131 M-parameter ae3d, which the host check
 * then refused (exit 5), where ZeRO-1 and ZeRO-2 fit. */
static double rank_budget(const Runtime *rt, int gpu, int local_world, double host_other, int *sharing) {
    const double device = rt->plan.budget_bytes ? (double)rt->plan.budget_bytes
                                                : HW_MEMORY_SHARE * (double)rt->dev.available;
    const int local = local_world > 0 ? local_world : 1, gpus = rt->hw.n_gpus > 0 ? rt->hw.n_gpus : 1;
    *sharing = gpu ? (local + gpus - 1) / gpus : local;
    const double b = device / *sharing - (gpu ? 0.0 : host_other);
    return b > 0 ? b : 0;
}

int zero_plan_choose(Runtime *rt, DistConfig *dist, int world, int local_world, double host_other, int verbose) {
    Model *m = rt->model;
    const int gpu = strcmp(rt->be->name, "cpu") != 0;
    int sharing;
    const double budget = rank_budget(rt, gpu, local_world, host_other, &sharing);
    ZeroBytes b[ZERO_MODES + 1];
    for (int k = 0; k < ZERO_MODES; k++) b[k] = zero_plan_bytes(m, k, world, dist);
    const int asked = zero_stage(dist), offload = strcmp(dist->offload_optimizer, "cpu") == 0;
    /* ZeRO-1 with the optimizer offloaded: a row of its own (it keeps ZeRO-1's gradients; it was planned, and named,
     * as ZeRO-2 + offload) */
    const int z1_offload = asked == 1 && offload;
    if (z1_offload) b[ZERO_MODES] = zero_plan_bytes_at(m, 1, 1, world, dist);
    int chosen = asked < 0 ? -1 : z1_offload ? ZERO_MODES : asked == 2 && offload ? ZERO_MODE_OFFLOAD : asked;
    if (asked < 0) { /* auto: the first that fits, in order of what it costs in communication */
        for (int k = 0; k < ZERO_MODES && chosen < 0; k++)
            if ((k != ZERO_MODE_OFFLOAD || gpu) && (double)zero_bytes_device(&b[k]) <= budget) chosen = k;
    }
    if (verbose) {
        char shared[200] = "";
        if (sharing > 1 || (!gpu && host_other > 0)) {
            char other[32];
            human((size_t)host_other, other, sizeof other);
            if (sharing > 1)
                snprintf(shared, sizeof shared, "; %d ranks share this %s's memory: each may plan 1/%d of its budget",
                         sharing, gpu ? "GPU" : "host", sharing);
            else
                snprintf(shared, sizeof shared, "; each rank may plan the host's budget");
            if (!gpu)
                snprintf(shared + strlen(shared), sizeof shared - strlen(shared), " less its %s of data and checkpoint "
                         "copies", other);
        }
        vx_detail("memory per rank by mode (%d rank(s); parameters + gradients + optimizer state + activations = device "
               "total%s%s):\n", world, gpu ? "; offload: + pinned host" : "", shared);
        for (int k = 0; k < ZERO_MODES + z1_offload; k++) {
            char p[32], g[32], o[32], a[32], t[32], h[32] = "";
            human(b[k].params, p, sizeof p), human(b[k].grads, g, sizeof g), human(b[k].optimizer, o, sizeof o);
            human(b[k].activations, a, sizeof a), human(zero_bytes_device(&b[k]), t, sizeof t);
            if (b[k].host) human(b[k].host, h, sizeof h);
            vx_detail("  %-17s %s + %s + %s + %s = %s%s%s%s%s\n", k < ZERO_MODES ? MODE_NAME[k] : zero_run_name(1, 1), p,
                   g, o, a, t, b[k].host ? " (+ " : "", h,
                   b[k].host ? " host)" : "", k == chosen ? "  <- this run" : "");
        }
    }
    if (asked < 0) {
        char bud[96], need[32];
        human((size_t)budget, bud, sizeof bud);
        snprintf(bud + strlen(bud), sizeof bud - strlen(bud), " budget%s", sharing > 1 ? " per rank" : "");
        if (chosen < 0) { /* nothing fits: the most sharded one, and what would be needed beyond */
            chosen = gpu ? ZERO_MODE_OFFLOAD : 2;
            human(zero_bytes_device(&b[chosen]), need, sizeof need);
            char par[32];
            human(b[chosen].params, par, sizeof par);
            vx_log("zero: auto: no mode fits the %s (%s, the least, needs %s); the parameters alone take %s per "
                   "rank: sharding them too (ZeRO-3, not built) or a smaller model or batch would be needed\n", bud,
                   MODE_NAME[chosen], need, par);
        } else {
            human(zero_bytes_device(&b[chosen]), need, sizeof need);
            vx_log("zero: auto chose %s: %s of the %s%s\n", MODE_NAME[chosen], need, bud,
                   chosen == 0 ? " (every rank holds everything: the least communication)"
                   : chosen == 1 ? " (DDP does not fit; the moments sharded, one all-gather more)"
                   : chosen == 2 ? " (ZeRO-1 does not fit; the gradients sharded too, moving what DDP moves)"
                                 : " (ZeRO-2 does not fit; AdamW's state in host memory, updated on the CPU)");
        }
        snprintf(dist->zero, sizeof dist->zero, "%d", chosen == ZERO_MODE_OFFLOAD ? 2 : chosen);
        if (chosen == ZERO_MODE_OFFLOAD) snprintf(dist->offload_optimizer, sizeof dist->offload_optimizer, "cpu");
    } else if (verbose && (double)zero_bytes_device(&b[chosen]) > budget && (double)b[chosen].params > budget / 2) {
        char par[32];
        human(b[chosen].params, par, sizeof par);
        vx_log("zero: the parameters alone take %s per rank: past this budget only sharding them too (ZeRO-3, not "
               "built) helps\n", par);
    }
    return chosen;
}

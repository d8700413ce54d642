/* zero_plan.c: what each way of holding the training state costs per rank, from the model's exact sizes (the
 * activation arena's plan, the flat layout, the buckets and their staging slots as the trainer makes them), and
 * dist.zero auto's choice among them (see zero_plan.h). */
#include "train/zero_plan.h"

#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "model/hw.h"
#include "train/runtime.h"

static const char *const MODE_NAME[ZERO_MODES] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-2 + offload"};

const char *zero_mode_name(int mode) { return mode >= 0 && mode < ZERO_MODES ? MODE_NAME[mode] : "?"; }

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
    const int stage = mode == ZERO_MODE_OFFLOAD ? 2 : mode, offload = mode == ZERO_MODE_OFFLOAD;
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

int zero_plan_choose(Runtime *rt, DistConfig *dist, int world, int verbose) {
    Model *m = rt->model;
    const int gpu = strcmp(rt->be->name, "cpu") != 0;
    const size_t budget = rt->plan.budget_bytes ? rt->plan.budget_bytes
                                                : (size_t)(HW_MEMORY_SHARE * (double)rt->dev.available);
    ZeroBytes b[ZERO_MODES];
    for (int k = 0; k < ZERO_MODES; k++) b[k] = zero_plan_bytes(m, k, world, dist);
    const int asked = zero_stage(dist), offload = strcmp(dist->offload_optimizer, "cpu") == 0;
    int chosen = asked < 0 ? -1 : asked == 2 && offload ? ZERO_MODE_OFFLOAD : asked;
    if (asked < 0) { /* auto: the first that fits, in order of what it costs in communication */
        for (int k = 0; k < ZERO_MODES && chosen < 0; k++)
            if ((k != ZERO_MODE_OFFLOAD || gpu) && zero_bytes_device(&b[k]) <= budget) chosen = k;
    }
    if (verbose) {
        vx_detail("memory per rank by mode (%d rank(s); parameters + gradients + optimizer state + activations = "
                  "device total%s):\n", world, gpu ? "; offload: + pinned host" : "");
        for (int k = 0; k < ZERO_MODES; k++) {
            char p[32], g[32], o[32], a[32], t[32], h[32] = "";
            human(b[k].params, p, sizeof p), human(b[k].grads, g, sizeof g), human(b[k].optimizer, o, sizeof o);
            human(b[k].activations, a, sizeof a), human(zero_bytes_device(&b[k]), t, sizeof t);
            if (b[k].host) human(b[k].host, h, sizeof h);
            vx_detail("  %-17s %s + %s + %s + %s = %s%s%s%s%s\n", MODE_NAME[k], p, g, o, a, t,
                      b[k].host ? " (+ " : "", h, b[k].host ? " host)" : "", k == chosen ? "  <- this run" : "");
        }
    }
    if (asked < 0) {
        char bud[32], need[32];
        human(budget, bud, sizeof bud);
        if (chosen < 0) { /* nothing fits: the most sharded one, and what would be needed beyond */
            chosen = gpu ? ZERO_MODE_OFFLOAD : 2;
            human(zero_bytes_device(&b[chosen]), need, sizeof need);
            char par[32];
            human(b[chosen].params, par, sizeof par);
            vx_log("zero: auto: no mode fits the %s budget (%s, the least, needs %s); the parameters alone take %s per "
                   "rank: sharding them too (ZeRO-3, not built) or a smaller model or batch would be needed\n", bud,
                   MODE_NAME[chosen], need, par);
        } else {
            human(zero_bytes_device(&b[chosen]), need, sizeof need);
            vx_log("zero: auto chose %s: %s of the %s budget%s\n", MODE_NAME[chosen], need, bud,
                   chosen == 0 ? " (every rank holds everything: the least communication)"
                   : chosen == 1 ? " (DDP does not fit; the moments sharded, one all-gather more)"
                   : chosen == 2 ? " (ZeRO-1 does not fit; the gradients sharded too, moving what DDP moves)"
                                 : " (ZeRO-2 does not fit; AdamW's state in host memory, updated on the CPU)");
        }
        snprintf(dist->zero, sizeof dist->zero, "%d", chosen == ZERO_MODE_OFFLOAD ? 2 : chosen);
        if (chosen == ZERO_MODE_OFFLOAD) snprintf(dist->offload_optimizer, sizeof dist->offload_optimizer, "cpu");
    } else if (verbose && zero_bytes_device(&b[chosen]) > budget && b[chosen].params > budget / 2) {
        char par[32];
        human(b[chosen].params, par, sizeof par);
        vx_log("zero: the parameters alone take %s per rank: past this budget only sharding them too (ZeRO-3, not "
               "built) helps\n", par);
    }
    return chosen;
}

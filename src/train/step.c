/* step.c: one optimizer step on the model's backend, eager or as CUDA Graph replays (see step.h). */
#include "train/step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "elementwise/elementwise.h"
#include "ema/ema.h"
#include "optim/optim.h"
#include "train/param_groups.h"

enum { SUM_RECON = 0, SUM_KL = 1, SUM_STOP = 2, SUM_SUMSQ = 3, SUM_COUNT = 4 };
#define SUMS_REDUCED 3 /* recon, kl, stop: summed over the ranks */

/* The step's device-resident values (backend memory), copied back whole after each step. */
typedef struct {
    OptimState opt;
    float sums[SUM_COUNT]; /* recon and kl summed over the micro-batches (then over the ranks), stop flag, sumsq */
    OptimState opt_backbone; /* the backbone's group (param_groups.h): opt's decisions at lr x backbone_lr_mult */
    float ema_decay;         /* train.ema_decay, read by the weights' average after each step */
} StepDev;

/* A graph slot: the captured replay of one variant of a step's part, how often it was asked for, and how many
 * collectives it holds (each replay of one that holds any is handed to the communicator's watchdog). */
typedef struct {
    void *graph;
    int uses, collectives;
    const char *name;
} GraphSlot;

struct Stepper {
    Model *m;
    const Backend *be;
    Comm *comm;
    Buckets *buckets;
    OptimConfig ocfg;
    TrainConfig train;   /* train.freeze and train.backbone_lr_mult: the parameter groups of each model */
    ParamGroups groups;  /* of the current model */
    int accum, world, phases, said;
    int graphs_asked; /* --compile and graphs possible here (a backend that captures; ranks: a comm that does) */
    int use_graphs;   /* graphs_asked, unless the phases are timed or a capture failed */
    StepDev *dev;
    StepDev *host[2]; /* pinned: the outcome of the steps of each parity */
    void *landed[2];  /* events recorded after each copy back */
    int64_t step_of[2];
    int comm_timed[2]; /* the step of each parity waited for its buckets between the comm marks (else in a graph) */
    double slot_wait0, slot_wait_ms[2]; /* ZeRO-2 on the CPU: the buckets' slot wait at the step's start; the step's */
    int64_t cur;       /* the step being enqueued */
    int pending;
    int nonfinite_grad; /* test hook: the step being enqueued gets a NaN gradient (stepper_test_nonfinite_grad) */
    Zero *zero;         /* sharded data parallelism, or NULL */
    int zero2;          /* its stage 2: every micro-batch reduces its buckets to their owners */
    int last_micro;     /* the micro-batch being enqueued is the step's last */
    /* by variant: the parameter-gradient beta (0 on the first micro-batch, 1 after) + 2 x whether the buckets are
     * all-reduced during its backward (the last micro-batch, with ranks) */
    GraphSlot micro[4];
    GraphSlot opt;
};

/* timer slots of step `step`: two sets, so that step k+1 can be marked before step k is read; in each, the marks */
enum { T_BEGIN = 0, T_END = 1, T_COMM0 = 2, T_COMM1 = 3, T_FORWARD = 4, T_BACKWARD = 5, T_SLOTS = 8 };
static int timer_base(int64_t step) { return (int)(step % 2) * T_SLOTS; }

static void drop_graphs(Stepper *s) {
    static const char *const NAMES[5] = {"first micro-batch", "micro-batch", "first micro-batch with its buckets",
                                         "last micro-batch with its buckets", "optimizer"};
    GraphSlot *slots[5] = {&s->micro[0], &s->micro[1], &s->micro[2], &s->micro[3], &s->opt};
    for (int i = 0; i < 5; i++) {
        if (slots[i]->graph) s->be->graph_destroy(slots[i]->graph);
        *slots[i] = (GraphSlot){.name = NAMES[i]};
    }
}

/* Runs body(s, arg) eagerly, or as the replay of its captured graph: captured on the second use (the first runs
 * eagerly: cuDNN loads kernels and settles its algorithm fallbacks there, outside any capture). With ranks the
 * communicator captures the collectives the body issues (comm.h), and each replay of a graph that holds some is
 * handed to its watchdog. A failed capture has run nothing; one rank then goes on eagerly and says why once. With
 * ranks the run ends on every rank instead: NCCL requires a collective to be captured on every rank or on none,
 * and this rank's later collectives would run eagerly while the other ranks replay theirs (and NCCL's state after
 * an abandoned capture of its kernels is not something to go on from). */
static void run(Stepper *s, GraphSlot *slot, void (*body)(Stepper *, int), int arg) {
    if (!s->use_graphs || slot->uses++ == 0) {
        body(s, arg);
        return;
    }
    if (!slot->graph) {
        const int ranks = s->buckets != NULL;
        if (ranks) comm_capture_begin(s->comm);
        s->be->graph_capture_begin();
        body(s, arg);
        char why[256];
        slot->graph = s->be->graph_capture_end(why, sizeof why);
        slot->collectives = ranks ? comm_capture_end(s->comm) : 0;
        if (!slot->graph && ranks) {
            char what[96];
            snprintf(what, sizeof what, "the %s of step %lld (%d collectives in it)", slot->name,
                     (long long)s->cur, slot->collectives);
            char reason[400];
            snprintf(reason, sizeof reason, "failed (%s); rerun without --compile", why);
            comm_fail(s->comm, "capture", what, reason);
        }
        if (!slot->graph) {
            vx_log("compile: %s; the step runs eagerly from here on\n", why);
            drop_graphs(s);
            s->use_graphs = 0;
            body(s, arg);
            return;
        }
        if (slot == &s->opt && !s->said) {
            vx_log("compile: from step %lld on, every step replays CUDA Graphs%s\n", (long long)s->cur,
                   ranks ? ", the all-reduces in them" : "");
            s->said = 1;
        }
    }
    s->be->graph_launch(slot->graph);
    if (slot->collectives > 0) {
        char what[96];
        snprintf(what, sizeof what, "the %d collectives of the %s of step %lld", slot->collectives, slot->name,
                 (long long)s->cur);
        comm_replayed(s->comm, what);
    }
}

/* variant: beta + 2 x reduce (GraphSlot micro[]). With reduce, backward's hook launches the buckets; under
 * graphs the compute stream also waits for them here, so that the capture joins what it forked (eagerly,
 * stepper_end waits for them, timed between its marks). */
static void micro_body(Stepper *s, int variant) {
    Model *m = s->m;
    const int beta = variant & 1, reduce = variant >> 1;
    if (reduce) {
        /* ZeRO-2: this pass's reductions overwrite the gradient shard (the first micro-batch) or add to it */
        if (s->zero2) buckets_begin_sharded(s->buckets, s->cur, (float)beta);
        else buckets_begin(s->buckets, s->cur);
        m->backward_hook = buckets_backward_hook;
        m->backward_pre_hook = s->zero2 ? buckets_backward_pre_hook : NULL;
        m->backward_hook_ctx = s->buckets;
    }
    model_forward(m, 1);
    if (s->phases) s->be->timer_mark(timer_base(s->cur) + T_FORWARD);
    /* ZeRO-2's staging slots hold one micro-batch's gradients: overwritten each time (the shard accumulates) */
    model_backward(m, 1.0f / (float)(s->accum * s->world), s->zero2 ? 0.0f : (float)beta, &s->dev->opt.loss_scale);
    /* the micro-batch's {recon, kl} onto the step's sums (the first overwrites) */
    s->be->elementwise->accumulate(DT_F32, 2, m->losses, s->dev->sums + SUM_RECON, (float)beta);
    if (reduce) {
        m->backward_hook = NULL;
        m->backward_pre_hook = NULL;
        /* (eagerly, the last micro-batch's are waited for by stepper_end, timed; the others' before the next) */
        if (s->use_graphs || !s->last_micro) buckets_wait(s->buckets);
    }
}

static void adamw_steps(Stepper *s);

/* train.ema_decay: the weights' average follows the step's weights (left as it was when the step was skipped) */
static void optimizer_body(Stepper *s, int unused) {
    (void)unused;
    adamw_steps(s);
    float *ema = model_ema(s->m);
    if (ema) s->be->ema->update(s->m->param_floats, &s->dev->ema_decay, &s->dev->opt.skip, s->m->param, ema);
}

static void adamw_steps(Stepper *s) {
    Model *m = s->m;
    /* every rank decides on the same numbers: the losses summed over the ranks, and whether any rank must stop */
    if (s->buckets)
        comm_wait(s->comm, comm_allreduce(s->comm, s->dev->sums, SUMS_REDUCED, COMM_SUM, "the step's losses"), NULL);
    float *sumsq = s->dev->sums + SUM_SUMSQ;
    if (s->zero) { /* sharded: each rank its shard's part of every group (zero.h) */
        zero_optimizer(s->zero, &s->ocfg, &s->groups, &s->dev->opt, &s->dev->opt_backbone, sumsq);
        return;
    }
    const ParamGroups *pg = &s->groups; /* one group of every float unless fine-tuning says otherwise */
    /* of the reduced gradients (the same on every rank), frozen parameters left out as PyTorch leaves them out */
    s->be->optim->sumsq(pg->trainable, m->grad, sumsq);
    s->be->optim->prepare(&s->ocfg, sumsq, &s->dev->opt);
    if (pg->n > 1) s->be->optim->prepare(&s->ocfg, sumsq, &s->dev->opt_backbone); /* the same decisions, its lr */
    for (int i = 0; i < pg->n; i++) {
        const long b = pg->g[i].begin;
        void *lp = m->param_lp ? (char *)m->param_lp + (size_t)b * dtype_size(m->dtype) : NULL;
        s->be->optim->adamw(pg->g[i].end - b, m->param + b, m->grad + b, m->adam_m + b, m->adam_v + b,
                            pg->g[i].backbone ? &s->dev->opt_backbone : &s->dev->opt, m->dtype, lp);
    }
}

Stepper *stepper_create(Model *m, const TrainConfig *cfg, Comm *comm, Buckets *buckets) {
    Stepper *s = vx_calloc(1, sizeof *s);
    s->be = m->be;
    s->train = *cfg;
    s->comm = comm;
    s->accum = cfg->grad_accum;
    s->world = comm->world;
    const int dynamic = strcmp(cfg->loss_scale, "dynamic") == 0;
    s->ocfg = (OptimConfig){.beta1 = cfg->beta1, .beta2 = cfg->beta2, .eps = cfg->adam_eps,
                            .weight_decay = cfg->weight_decay, .grad_clip = cfg->grad_clip, .dynamic_scale = dynamic,
                            .growth_interval = cfg->loss_scale_growth_interval, .growth = 2.0, .backoff = 0.5};
    s->dev = s->be->alloc(sizeof(StepDev));
    for (int i = 0; i < 2; i++) {
        s->host[i] = s->be->alloc_host(sizeof(StepDev));
        s->landed[i] = s->be->event_create();
    }
    /* the loss's elements: the reconstruction's voxels, or a head's outputs (resnet3d has no reconstruction) */
    const long loss_elems = m->tensors[model_loss_tensor(m)].count;
    const double least = optim_loss_scale_floor(m->dtype, (double)loss_elems, 1.0 / ((double)s->accum * s->world));
    if (dynamic && m->dtype == DT_F16 && cfg->loss_scale_init < least)
        vx_usage_error("train.loss_scale_init = %g is below %g, under which float16 cannot hold this model's loss "
                       "gradient (1/%ld per voxel, x 1/%d accumulation x ranks): raise it", cfg->loss_scale_init, least,
                       loss_elems, s->accum * s->world);
    if (!dynamic && m->dtype == DT_F16 && least > 1.0)
        vx_log("warning: float16 without loss scaling: the loss gradient (1/%ld per voxel) is below float16's range "
               "and trains nothing; use train.loss_scale dynamic (auto) or --amp bf16\n", loss_elems);
    StepDev init = {.opt = {.loss_scale = dynamic ? (float)cfg->loss_scale_init : 1.0f}, .ema_decay = (float)cfg->ema_decay};
    init.opt_backbone = init.opt;
    s->be->copy_to_device(s->dev, &init, sizeof init);
    stepper_set_model(s, m, buckets);
    param_groups_plan(m, cfg, &s->groups, 1); /* (once more, to say what it decided) */
    s->graphs_asked = cfg->compile && s->be->graph_capture_begin != NULL;
    if (s->graphs_asked && buckets && !comm_can_capture(comm)) {
        s->graphs_asked = 0; /* for good: stepper_time_phases(s, 0) must not turn them on either */
        vx_log("compile: the %s communicator's collectives cannot be captured in a CUDA Graph, so the step runs "
               "eagerly\n", comm->name);
    }
    s->use_graphs = s->graphs_asked;
    return s;
}

void stepper_free(Stepper *s) {
    if (!s) return;
    drop_graphs(s);
    for (int i = 0; i < 2; i++) {
        s->be->release_host(s->host[i]);
        s->be->event_destroy(s->landed[i]);
    }
    s->be->release(s->dev);
    free(s);
}

void stepper_set_model(Stepper *s, Model *m, Buckets *buckets) {
    if (s->pending) vx_fatal("stepper_set_model with %d steps not collected", s->pending);
    drop_graphs(s);
    s->m = m;
    s->buckets = buckets;
    param_groups_plan(m, &s->train, &s->groups, 0);
}

int stepper_graphs(const Stepper *s) { return s->use_graphs; }

void stepper_set_zero(Stepper *s, Zero *z) {
    if (s->pending) vx_fatal("stepper_set_zero with %d steps not collected", s->pending);
    drop_graphs(s);
    s->zero = z;
    s->zero2 = z && zero_layout_of(z)->stage >= 2;
    if (z && zero_offloaded(z) && s->graphs_asked) {
        s->graphs_asked = s->use_graphs = 0; /* for good, as for a communicator that cannot be captured */
        vx_log("compile: with dist.offload_optimizer cpu AdamW runs on the host between the device's work, so the "
               "step runs eagerly\n");
    }
}

void stepper_time_phases(Stepper *s, int on) {
    if (on && s->accum != 1) vx_fatal("stepper_time_phases: %d micro-batches per step (one is timed apart)", s->accum);
    s->phases = on;
    drop_graphs(s);
    s->use_graphs = on ? 0 : s->graphs_asked; /* the marks go between the ops: no graphs */
}

double stepper_loss_scale_floor(const Stepper *s) {
    return optim_loss_scale_floor(s->m->dtype, (double)s->m->tensors[model_loss_tensor(s->m)].count,
                                  1.0 / ((double)s->accum * s->world));
}

OptimCarry stepper_carry(const Stepper *s) {
    if (s->pending) vx_fatal("stepper_carry with %d steps not collected", s->pending);
    OptimState o;
    s->be->copy_to_host(&o, &s->dev->opt, sizeof o);
    return (OptimCarry){.loss_scale = o.loss_scale, .adam_step = o.adam_step, .skipped_steps = o.skipped_steps,
                        .growth_tracker = o.growth_tracker};
}

void stepper_set_carry(Stepper *s, const OptimCarry *c) {
    if (s->pending) vx_fatal("stepper_set_carry with %d steps not collected", s->pending);
    OptimState o;
    s->be->copy_to_host(&o, &s->dev->opt, sizeof o);
    if (c->loss_scale > 0) o.loss_scale = (float)c->loss_scale;
    o.adam_step = c->adam_step;
    o.skipped_steps = c->skipped_steps;
    o.growth_tracker = c->growth_tracker;
    s->be->copy_to_device(&s->dev->opt, &o, sizeof o);
    s->be->copy_to_device(&s->dev->opt_backbone, &o, sizeof o); /* the backbone's group keeps the same count */
}

void stepper_begin(Stepper *s, int64_t step1) {
    if (s->pending == 2) vx_fatal("stepper_begin: two steps not collected");
    s->cur = step1;
    s->slot_wait0 = s->buckets ? s->buckets->slot_wait_s : 0;
    s->be->timer_mark(timer_base(step1) + T_BEGIN); /* CUDA: an event on the compute stream; the step is timed on
                                                     the device */
}

void stepper_micro(Stepper *s, int micro, int64_t first_sample) {
    model_set_first_sample(s->m, (uint64_t)first_sample);
    /* accumulate locally, reduce once; ZeRO-2 reduces every micro-batch (no whole gradient is kept) */
    s->last_micro = micro == s->accum - 1;
    const int reduce = s->buckets && (s->last_micro || s->zero2);
    const int variant = (micro > 0) + 2 * reduce;
    run(s, &s->micro[variant], micro_body, variant);
    if (s->phases) s->be->timer_mark(timer_base(s->cur) + T_BACKWARD);
}

/* Test hook: VX_TEST_GRAD_DUMP=DIR writes the step's gradient, all-reduced and before the optimizer, in the packed
 * layout, to DIR/grad_<step>.rank<r>.bin: how tests compare gradients of runs that AdamW would part (a gradient that
 * is zero in exact arithmetic is float noise in another order, which AdamW's normalisation turns into steps of lr).
 * It waits for the device; not for timed runs. */
static void test_dump_grad(Stepper *s) {
    const char *dir = getenv("VX_TEST_GRAD_DUMP");
    if (!dir || !*dir) return;
    float *packed = vx_malloc((size_t)s->m->param_count * sizeof(float));
    if (s->zero2) { /* every rank's shard: a collective, which every rank's hook makes */
        float *flat = vx_malloc((size_t)s->m->param_floats * sizeof(float));
        zero_gather_grad(s->zero, flat);
        model_pack_params(s->m, flat, packed);
        free(flat);
    } else {
        model_download_packed(s->m, s->m->grad, packed);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/grad_%lld.rank%d.bin", dir, (long long)s->cur, s->comm ? s->comm->rank : 0);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(packed, sizeof(float), (size_t)s->m->param_count, f) != (size_t)s->m->param_count)
        vx_fatal("VX_TEST_GRAD_DUMP: cannot write %s", path);
    fclose(f);
    free(packed);
}

void stepper_end(Stepper *s, double lr, int stop_request) {
    const Backend *be = s->be;
    const int base = timer_base(s->cur), slot = (int)(s->cur % 2);
    /* the optimizer waits for the buckets still in flight: on a GPU the compute stream does, between the marks
     * (under graphs the last micro-batch's replay already did: buckets_wait ran inside its capture) */
    s->comm_timed[slot] = !s->buckets || s->buckets->active;
    be->timer_mark(base + T_COMM0);
    if (s->buckets && s->buckets->active) buckets_wait(s->buckets);
    be->timer_mark(base + T_COMM1);
    s->slot_wait_ms[slot] = s->zero2 && s->buckets && strcmp(be->name, "cpu") == 0
                                ? (s->buckets->slot_wait_s - s->slot_wait0) * 1e3 : NAN;
    if (s->nonfinite_grad) { /* only now: before the buckets' wait, an all-reduce still in flight would overwrite it */
        const float nan = NAN; /* (sharded: into every rank's gradient shard, which the optimizer reads) */
        be->write_async(s->zero ? zero_grad_shard(s->zero) : s->m->grad, &nan, sizeof nan);
        s->nonfinite_grad = 0;
    }
    test_dump_grad(s);
    const float stop = stop_request ? 1.0f : 0.0f;
    be->write_async(&s->dev->opt.lr, &lr, sizeof lr);
    if (s->groups.n > 1) {
        const double lr_b = lr * s->groups.backbone_lr_mult;
        be->write_async(&s->dev->opt_backbone.lr, &lr_b, sizeof lr_b);
    }
    be->write_async(s->dev->sums + SUM_STOP, &stop, sizeof stop);
    run(s, &s->opt, optimizer_body, 0);
    be->timer_mark(base + T_END);
    be->copy_to_host_async(s->host[slot], s->dev, sizeof(StepDev));
    be->event_record(s->landed[slot]);
    s->step_of[slot] = s->cur;
    s->pending++;
}

void stepper_test_nonfinite_grad(Stepper *s) { s->nonfinite_grad = 1; }

void stepper_one(Stepper *s, int64_t step1, double lr, StepOutcome *out) {
    if (s->pending) vx_fatal("stepper_one with %d steps not collected", s->pending);
    stepper_begin(s, step1);
    stepper_micro(s, 0, (step1 - 1) * (int64_t)s->m->batch);
    stepper_end(s, lr, 0);
    stepper_collect(s, out);
}

int stepper_pending(const Stepper *s) { return s->pending; }

void stepper_collect(Stepper *s, StepOutcome *out) {
    if (!s->pending) vx_fatal("stepper_collect with no step pending");
    const int64_t step = s->cur - (s->pending - 1);
    const int slot = (int)(step % 2), base = timer_base(step);
    if (s->step_of[slot] != step) vx_fatal("stepper_collect: slot %d holds step %lld, not %lld", slot,
                                           (long long)s->step_of[slot], (long long)step);
    s->be->event_synchronize(s->landed[slot]);
    const StepDev *h = s->host[slot];
    const double n = (double)s->accum * s->world;
    *out = (StepOutcome){.step = step, .recon = h->sums[SUM_RECON] / n, .kl = h->sums[SUM_KL] / n,
                         .grad_norm = h->opt.grad_norm, .clip = h->opt.clip, .loss_scale = h->opt.loss_scale,
                         .skipped = h->opt.skip, .skipped_total = h->opt.skipped_steps,
                         .stop = h->sums[SUM_STOP] > 0.0f};
    out->loss = out->recon + model_second_loss_weight(s->m) * out->kl;
    out->ms = s->be->timer_elapsed_ms(base + T_BEGIN, base + T_END);
    out->comm_wait_ms = s->comm_timed[slot] ? s->be->timer_elapsed_ms(base + T_COMM0, base + T_COMM1) : NAN;
    out->slot_wait_ms = s->slot_wait_ms[slot];
    if (s->phases) {
        out->forward_ms = s->be->timer_elapsed_ms(base + T_BEGIN, base + T_FORWARD);
        out->backward_ms = s->be->timer_elapsed_ms(base + T_FORWARD, base + T_BACKWARD);
        out->optimizer_ms = s->be->timer_elapsed_ms(base + T_COMM1, base + T_END);
    }
    s->step_of[slot] = 0;
    s->pending--;
}

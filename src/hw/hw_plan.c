/* hw_plan.c: the hardware plan (see hw_plan.h). */
#include "hw/hw_plan.h"

#include <stdio.h>
#include <string.h>

#include "hw/hw.h"
#include "graph/model.h"

static const char *precision_key(DType t) { return t == DT_BF16 ? "bf16" : t == DT_F16 ? "fp16" : "off"; }

ModelOptions hw_model_options(const TrainConfig *train) {
    return (ModelOptions){.precision = train->precision, .fuse = train->fuse,
                          .checkpoint_activations = train->checkpoint_activations, .seed = train->seed,
                          .ema = train->ema_decay > 0, .inference = train->inference};
}

static DType plan_precision(const TrainConfig *train, const HwPlanDevice *dev) {
    const char *p = train->precision;
    if (strcmp(p, "bf16") == 0) return DT_BF16;
    if (strcmp(p, "fp16") == 0) return DT_F16;
    if (strcmp(p, "off") == 0 || !dev->gpu) return DT_F32;
    return dev->cc_major >= 8 ? DT_BF16 : DT_F16; /* bf16 tensor cores came with Ampere */
}

static size_t planned_bytes(const ModelConfig *model, const ModelOptions *o, int batch, const Backend *be) {
    Model *m = model_build(model, o, batch, be);
    const size_t b = model_device_bytes(m);
    model_free(m);
    return b;
}

/* The largest batch (a power of two <= cap dividing `share` when share > 0) whose plan fits budget; 0 if none, with
 * *need what batch 1 plans. The exact plan of a batch asks the backend for every convolution's workspace, and on a
 * GPU each new shape (each batch) costs cuDNN's heuristics and workspace queries per direction: planning every
 * candidate batch so was 7 x every convolution's plans before step 1 (issue 20). So the candidates are planned
 * without the workspace first, a lower bound that asks the backend nothing, and exactly only from the largest
 * candidate that bound lets through downwards, until one fits: once in the common case. The result is the one
 * planning every batch exactly would give wherever the bytes grow with the batch (test_host checks it). */
static int largest_fit(const ModelConfig *model, const ModelOptions *o, const Backend *be, int cap, int share,
                       double budget, size_t *need) {
    ModelOptions bound = *o;
    bound.no_workspace = 1;
    int top = 0;
    for (int b = 1; b <= cap; b *= 2) {
        if (share > 0 && share % b) continue;
        if ((double)planned_bytes(model, &bound, b, be) > budget) break;
        top = b;
    }
    for (int b = top; b >= 1; b /= 2) {
        if (share > 0 && share % b) continue;
        const size_t bytes = planned_bytes(model, o, b, be);
        if ((double)bytes <= budget) {
            *need = bytes;
            return b;
        }
    }
    *need = planned_bytes(model, o, 1, be); /* for the message: not even one volume fits */
    return 0;
}

/* Seed 002's hardware table (its train script's batch x accumulation by GPU memory): 1 with *batch, *accum */
static void seed002_table(size_t total, int *batch, int *accum) {
    const double gb = total / 1e9;
    static const struct {
        double at_least;
        int batch, accum;
    } ROWS[] = {{20, 16, 4}, {14, 12, 5}, {10, 8, 8}, {6, 4, 16}, {0, 2, 32}};
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++)
        if (gb >= ROWS[i].at_least) {
            *batch = ROWS[i].batch, *accum = ROWS[i].accum;
            return;
        }
}

/* train.batch_preset cxr on a GPU with an automatic batch: the table's batch when the exact plan fits it, else the
 * largest below it that does, with the accumulation that keeps the table's samples per step (rounded up). `power`:
 * the plan's own automatic batch (the largest power of two that fits), said beside it. */
static void apply_preset(HwPlan *out, const ModelConfig *model, const ModelOptions *c, const Backend *be,
                         const HwPlanDevice *dev, double budget, int power) {
    const size_t total = dev->total ? dev->total : dev->available;
    int tb = 2, ta = 32;
    seed002_table(total, &tb, &ta);
    int b = tb;
    size_t need = planned_bytes(model, c, b, be);
    while (b > 1 && (double)need > budget) need = planned_bytes(model, c, --b, be);
    if ((double)need > budget) return; /* (the plan's own batch stands: it fit) */
    const int samples = tb * ta;
    out->batch = b, out->need_bytes = need;
    if (b == tb) {
        out->accum = ta;
        snprintf(out->preset, sizeof out->preset, "seed 002's table for a %.0f GB GPU: %d x %d, kept (the exact "
                 "plan's own automatic batch: %d)", total / 1e9, tb, ta, power);
    } else {
        out->accum = (samples + b - 1) / b;
        snprintf(out->preset, sizeof out->preset, "seed 002's table for a %.0f GB GPU says %d x %d, but batch %d plans "
                 "more than the budget: %d x %d (%d samples per step, the table's %d)", total / 1e9, tb, ta, tb, b,
                 out->accum, b * out->accum, samples);
    }
}

int hw_plan(const ModelConfig *model, const TrainConfig *train, const Backend *be, const HwPlanDevice *dev, int ranks,
            HwPlan *out, char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    ModelOptions c = hw_model_options(train);
    out->precision = plan_precision(train, dev);
    c.precision = precision_key(out->precision);
    out->ranks = ranks > 0 ? ranks : 1;
    const double budget = HW_MEMORY_SHARE * (double)dev->available;
    out->budget_bytes = (size_t)budget;
    const int G = train->global_batch, share = G > 0 ? G / out->ranks : 0;
    if (G > 0 && G % out->ranks) {
        snprintf(why, why_len, "train.global_batch = %d does not split into %d ranks", G, out->ranks);
        return 0;
    }
    if (train->batch_size > 0) { /* given: check it, switching checkpointing on if that makes it fit */
        out->batch = train->batch_size;
        out->need_bytes = planned_bytes(model, &c, out->batch, be);
        if ((double)out->need_bytes > budget && !c.checkpoint_activations) {
            c.checkpoint_activations = 1;
            const size_t with = planned_bytes(model, &c, out->batch, be);
            if ((double)with <= budget) out->need_bytes = with, out->checkpoint_switched_on = 1;
            else c.checkpoint_activations = 0;
        }
        if ((double)out->need_bytes > budget) {
            snprintf(why, why_len, "batch size %d plans %.2f GiB, more than the %.2f GiB budget (%.0f%% of %.2f GiB)",
                     out->batch, out->need_bytes / 1073741824.0, budget / 1073741824.0, 100 * HW_MEMORY_SHARE,
                     dev->available / 1073741824.0);
            return 0;
        }
    } else {
        size_t need = 0;
        out->batch = largest_fit(model, &c, be, dev->cap, share, budget, &need);
        if (!out->batch && !c.checkpoint_activations) {
            /* recomputing the ResBlocks costs time, so only when not even one volume fits without it */
            c.checkpoint_activations = 1;
            size_t need_ckpt = 0;
            out->batch = largest_fit(model, &c, be, dev->cap, share, budget, &need_ckpt);
            out->checkpoint_switched_on = out->batch > 0;
            if (out->batch) need = need_ckpt;
        }
        out->need_bytes = need;
        if (!out->batch) {
            snprintf(why, why_len, "even batch size 1 plans %.2f GiB, more than %.0f%% of the %.2f GiB available, with "
                     "activation checkpointing too", need / 1073741824.0, 100 * HW_MEMORY_SHARE,
                     dev->available / 1073741824.0);
            return 0;
        }
    }
    out->checkpoint_activations = c.checkpoint_activations;
    if (train->batch_size <= 0 && strcmp(train->batch_preset, "cxr") == 0 && dev->gpu && G == 0) {
        apply_preset(out, model, &c, be, dev, budget, out->batch);
        out->global_batch = out->batch * out->ranks * out->accum;
        return 1;
    }
    if (train->batch_size <= 0 && strcmp(train->batch_preset, "cxr") == 0)
        snprintf(out->preset, sizeof out->preset, "%s", dev->gpu ? "seed 002's table not used: train.global_batch "
                 "sets the samples per step" : "seed 002's table is for GPUs: the CPU's exact plan is used");
    if (G > 0) { /* (a chosen batch divides the share: only a given one can fail here) */
        if (share % out->batch) {
            snprintf(why, why_len, "train.global_batch = %d is not a multiple of %d ranks x batch size %d", G,
                     out->ranks, out->batch);
            return 0;
        }
        out->accum = share / out->batch;
    } else {
        out->accum = train->grad_accum;
    }
    out->global_batch = out->batch * out->ranks * out->accum;
    return 1;
}

void hw_plan_apply(const HwPlan *p, TrainConfig *train) {
    train->batch_size = p->batch;
    train->grad_accum = p->accum;
    train->checkpoint_activations = p->checkpoint_activations;
    snprintf(train->precision, sizeof train->precision, "%s", precision_key(p->precision));
}

void hw_plan_describe(const HwPlan *p, const HwPlanDevice *dev, const TrainConfig *train, char *out, size_t len) {
    char prec[160], ckpt[80];
    if (p->precision == DT_F32) snprintf(prec, sizeof prec, "float32");
    else if (!dev->gpu) snprintf(prec, sizeof prec, "bf16 math in the CPU's convolutions, float32 storage (train.precision)");
    else if (strcmp(train->precision, "auto") == 0)
        snprintf(prec, sizeof prec, "%s mixed precision (compute capability %d.%d: %s)", dtype_name(p->precision),
                 dev->cc_major, dev->cc_minor, dev->cc_major >= 8 ? "bf16 tensor cores" : "fp16, no bf16 below 8.0");
    else snprintf(prec, sizeof prec, "%s mixed precision (train.precision)", dtype_name(p->precision));
    /* switched on: an automatic batch when not even batch 1 fit without it, a given batch when that batch did not */
    if (p->checkpoint_switched_on)
        snprintf(ckpt, sizeof ckpt, "on (batch %d does not fit without it)", train->batch_size > 0 ? p->batch : 1);
    else snprintf(ckpt, sizeof ckpt, "%s", p->checkpoint_activations ? "on" : "off");
    if (train->inference) { /* predict: the forward alone, so no steps, accumulation or checkpointing to speak of */
        snprintf(out, len, "plan: inference (the forward only: no gradients, no optimizer state); %s; batch %d per %s x "
                 "%d %s; batch %d plans %.2f GiB of the %.2f GiB budget (%.0f%% of %.2f GiB %s)", prec, p->batch,
                 dev->gpu ? "GPU" : "rank", p->ranks, dev->gpu ? "GPU(s)" : "rank(s)", p->batch,
                 p->need_bytes / 1073741824.0, p->budget_bytes / 1073741824.0, 100 * HW_MEMORY_SHARE,
                 dev->available / 1073741824.0, dev->gpu ? "free" : "available");
        return;
    }
    snprintf(out, len,
             "plan: %s; batch %d per %s x %d %s x %d accumulation = %d samples per step%s; activation checkpointing "
             "%s; batch %d plans %.2f GiB of the %.2f GiB budget (%.0f%% of %.2f GiB %s)%s%s",
             prec, p->batch, dev->gpu ? "GPU" : "rank", p->ranks, dev->gpu ? "GPU(s)" : "rank(s)", p->accum,
             p->global_batch, train->global_batch > 0 ? " (train.global_batch)" : "",
             ckpt,
             p->batch, p->need_bytes / 1073741824.0, p->budget_bytes / 1073741824.0, 100 * HW_MEMORY_SHARE,
             dev->available / 1073741824.0, dev->gpu ? "free" : "available", p->preset[0] ? "; " : "", p->preset);
}

/* deepspeed_config.c: a DeepSpeed ds_config.json read into launcher settings (launcher_settings.h), for users who
 * bring the file their PyTorch script ran with (`train --deepspeed-config FILE`, or accelerate's
 * --deepspeed_config_file). The keys read, with DeepSpeed's meaning (deepspeed.ai/docs/config-json):
 *   zero_optimization.stage                  0 | 1 | 2 -> dist.zero (3, sharded parameters, is refused)
 *   zero_optimization.offload_optimizer.device  none | cpu -> dist.offload_optimizer (nvme is refused)
 *   fp16.enabled, bf16.enabled (bfloat16)    -> train.precision fp16 | bf16; both false -> off (float32)
 *   gradient_accumulation_steps              -> train.grad_accum
 *   gradient_clipping                        -> train.grad_clip
 *   train_micro_batch_size_per_gpu           -> train.batch_size (train.global_batch 0: the batch is per rank)
 *   train_batch_size                         -> train.global_batch, or checked against the two above x the ranks
 * "auto" (what HF's integrations write) keeps voxscale's value. Every other key is named in one warning line:
 * DeepSpeed's optimizer, scheduler and communication tuning have no counterpart to map them onto. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/launcher_settings.h"
#include "core/util.h"

typedef struct {
    LauncherSettings *ls;
    const char *path;
    char ignored[512]; /* the keys read past, "optimizer, zero_optimization.overlap_comm" */
} DsRead;

static void ignore(DsRead *r, const char *prefix, const char *key) {
    const size_t n = strlen(r->ignored);
    if (n + strlen(prefix) + strlen(key) + 8 >= sizeof r->ignored) {
        if (!strstr(r->ignored, ", ...")) snprintf(r->ignored + n, sizeof r->ignored - n, ", ...");
        return;
    }
    snprintf(r->ignored + n, sizeof r->ignored - n, "%s%s%s", n ? ", " : "", prefix, key);
}

static int is_auto(const cJSON *v) { return cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0; }

/* A whole number lo..hi, or -1 for "auto"; anything else is exit 2 naming the key. */
static long ds_count(const DsRead *r, const char *key, const cJSON *v, long lo, long hi) {
    if (is_auto(v)) return -1;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(long)v->valuedouble || v->valuedouble < lo ||
        v->valuedouble > hi)
        vx_usage_error("%s: %s must be a whole number %ld..%ld or \"auto\"", r->path, key, lo, hi);
    return (long)v->valuedouble;
}

/* true -> 1, false -> 0, "auto" -> -1. */
static int ds_bool(const DsRead *r, const char *key, const cJSON *v) {
    if (is_auto(v)) return -1;
    if (!cJSON_IsBool(v)) vx_usage_error("%s: %s must be true, false or \"auto\"", r->path, key);
    return cJSON_IsTrue(v);
}

static void add(DsRead *r, const char *said, const char *key, const char *flag, const char *value) {
    LauncherSetting *s = launcher_setting_add(r->ls, key, flag, value);
    snprintf(s->origin, sizeof s->origin, "%s: %s", r->path, said);
    snprintf(s->what, sizeof s->what, "deepspeed config %s: %s", r->path, said);
}

static void read_zero(DsRead *r, const cJSON *zero) {
    if (!cJSON_IsObject(zero)) vx_usage_error("%s: zero_optimization must be an object", r->path);
    const cJSON *c;
    char said[96], value[32];
    cJSON_ArrayForEach(c, zero) {
        if (strcmp(c->string, "stage") == 0) {
            const long stage = ds_count(r, "zero_optimization.stage", c, 0, 3);
            if (stage == 3)
                vx_usage_error("%s: zero_optimization.stage 3 (sharded parameters) is not in voxscale; use stage 2 "
                               "(gradients and optimizer state sharded) or 1", r->path);
            if (stage < 0) continue;
            snprintf(said, sizeof said, "zero_optimization.stage %ld", stage);
            snprintf(value, sizeof value, "%ld", stage);
            add(r, said, "dist.zero", "--zero", value);
        } else if (strcmp(c->string, "offload_optimizer") == 0 && cJSON_IsObject(c)) {
            const cJSON *d;
            cJSON_ArrayForEach(d, c) {
                if (strcmp(d->string, "device") != 0) {
                    ignore(r, "zero_optimization.offload_optimizer.", d->string);
                    continue;
                }
                if (is_auto(d)) continue;
                if (!cJSON_IsString(d) || (strcmp(d->valuestring, "none") != 0 && strcmp(d->valuestring, "cpu") != 0))
                    vx_usage_error("%s: zero_optimization.offload_optimizer.device must be \"none\" or \"cpu\" "
                                   "(voxscale has no nvme offload) or \"auto\"", r->path);
                snprintf(said, sizeof said, "zero_optimization.offload_optimizer.device %s", d->valuestring);
                add(r, said, "dist.offload_optimizer", NULL, d->valuestring);
            }
        } else {
            ignore(r, "zero_optimization.", c->string);
        }
    }
}

/* fp16 / bf16 (or bfloat16): {"enabled": ...}; their other keys (loss_scale, ...) are DeepSpeed's tuning. */
static int read_enabled(DsRead *r, const cJSON *section, const char *name) {
    if (!cJSON_IsObject(section)) vx_usage_error("%s: %s must be an object", r->path, name);
    int on = -1;
    const cJSON *c;
    cJSON_ArrayForEach(c, section) {
        char key[64];
        snprintf(key, sizeof key, "%s.%s", name, c->string);
        if (strcmp(c->string, "enabled") == 0) on = ds_bool(r, key, c);
        else ignore(r, name[0] == 'f' ? "fp16." : "bf16.", c->string);
    }
    return on;
}

void launcher_settings_deepspeed(LauncherSettings *ls, const char *path, int world) {
    FILE *f = fopen(path, "rb");
    if (!f) vx_usage_error("--deepspeed-config %s: cannot read it (%s)", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 4096 > cap) text = vx_realloc(text, cap = 2 * cap + 4096);
        got = fread(text + len, 1, cap - len, f);
        len += got;
    } while (got > 0 && len < (1u << 24));
    fclose(f);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1;
        for (const char *p = text; root == NULL && at && p < at && p < text + len; p++) line += *p == '\n';
        free(text);
        if (root) vx_usage_error("--deepspeed-config %s: expected a JSON object ({...}) as DeepSpeed's ds_config.json", path);
        vx_usage_error("--deepspeed-config %s: not valid JSON (line %d); DeepSpeed's ds_config.json is one JSON object",
                       path, line);
    }
    free(text);
    DsRead r = {.ls = ls, .path = path};
    int fp16 = -1, bf16 = -1;
    long micro = -1, accum = -1, total = -1;
    const cJSON *c, *clip = NULL;
    cJSON_ArrayForEach(c, root) {
        const char *k = c->string;
        if (strcmp(k, "zero_optimization") == 0) read_zero(&r, c);
        else if (strcmp(k, "fp16") == 0) fp16 = read_enabled(&r, c, "fp16");
        else if (strcmp(k, "bf16") == 0 || strcmp(k, "bfloat16") == 0) bf16 = read_enabled(&r, c, k);
        else if (strcmp(k, "gradient_accumulation_steps") == 0) accum = ds_count(&r, k, c, 1, 1024);
        else if (strcmp(k, "train_micro_batch_size_per_gpu") == 0) micro = ds_count(&r, k, c, 1, 4096);
        else if (strcmp(k, "train_batch_size") == 0) total = ds_count(&r, k, c, 1, 1 << 22);
        else if (strcmp(k, "gradient_clipping") == 0) clip = c;
        else ignore(&r, "", k);
    }
    char said[128], value[32];
    if (fp16 == 1 && bf16 == 1)
        vx_usage_error("%s: fp16.enabled and bf16.enabled are both true; enable one of them", path);
    if (fp16 == 1 || bf16 == 1) {
        snprintf(said, sizeof said, "%s.enabled true", fp16 == 1 ? "fp16" : "bf16");
        add(&r, said, "train.precision", "--amp", fp16 == 1 ? "fp16" : "bf16");
    } else if (fp16 == 0 || bf16 == 0) { /* DeepSpeed trains in float32 when neither is enabled */
        snprintf(said, sizeof said, "%s.enabled false", fp16 == 0 ? "fp16" : "bf16");
        add(&r, said, "train.precision", "--amp", "off");
    }
    if (clip && !is_auto(clip)) {
        if (!cJSON_IsNumber(clip) || clip->valuedouble < 0)
            vx_usage_error("%s: gradient_clipping must be a number >= 0 (0: off) or \"auto\"", path);
        snprintf(value, sizeof value, "%g", clip->valuedouble);
        snprintf(said, sizeof said, "gradient_clipping %s", value);
        add(&r, said, "train.grad_clip", NULL, value);
    }
    /* DeepSpeed's rule: train_batch_size = micro-batch per GPU x accumulation x ranks, any two giving the third */
    if (total > 0 && micro > 0) {
        if (accum > 0 && total != micro * accum * world)
            vx_usage_error("%s: train_batch_size %ld is not train_micro_batch_size_per_gpu %ld x "
                           "gradient_accumulation_steps %ld x %d rank(s) = %ld; correct one of them (or write \"auto\")",
                           path, total, micro, accum, world, micro * accum * world);
        if (accum < 0 && total % (micro * world) != 0)
            vx_usage_error("%s: train_batch_size %ld does not divide into train_micro_batch_size_per_gpu %ld x %d "
                           "rank(s); correct one of them (or write \"auto\")", path, total, micro, world);
        if (accum < 0) accum = total / (micro * world);
        total = -1; /* said by the other two */
    }
    if (accum > 0) {
        snprintf(value, sizeof value, "%ld", accum);
        snprintf(said, sizeof said, "gradient_accumulation_steps %ld", accum);
        add(&r, said, "train.grad_accum", NULL, value);
    }
    if (micro > 0) {
        snprintf(value, sizeof value, "%ld", micro);
        snprintf(said, sizeof said, "train_micro_batch_size_per_gpu %ld", micro);
        add(&r, said, "train.batch_size", "--batch-size", value);
        /* a train.global_batch left in the config would recompute the per-rank batch and undo this one */
        add(&r, "train_micro_batch_size_per_gpu (the batch is per rank)", "train.global_batch", NULL, "0");
    }
    if (total > 0) {
        snprintf(value, sizeof value, "%ld", total);
        snprintf(said, sizeof said, "train_batch_size %ld", total);
        add(&r, said, "train.global_batch", NULL, value);
    }
    if (r.ignored[0]) { /* printed by rank 0 with the settings (launcher_settings_take) */
        const size_t n = strlen(ls->notes);
        snprintf(ls->notes + n, sizeof ls->notes - n, "deepspeed config %s: warning: keys voxscale has no counterpart "
                 "for, not read: %s\n", path, r.ignored);
    }
    cJSON_Delete(root);
}

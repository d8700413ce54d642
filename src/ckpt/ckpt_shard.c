/* ckpt_shard.c: sharded checkpoints: each rank's shard file, the manifest, and reading them back whole (see
 * ckpt_shard.h). */
#include "ckpt/ckpt_shard.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsutil.h"
#include "core/progress.h"
#include "core/util.h"

#define MANIFEST_MAX_BYTES (1u << 20)

static void shard_path(char *out, size_t len, const char *dir, int rank, int world) {
    snprintf(out, len, "%s/rank%d-of-%d.shard", dir, rank, world);
}

static size_t shard_bytes(uint64_t count, uint64_t nbuf) {
    return sizeof(ShardHeader) + (3 * (size_t)count + (size_t)nbuf) * sizeof(float) + sizeof(uint32_t);
}

uint32_t ckpt_shard_write(const char *dir, const Model *m, int64_t step, const ShardWrite *w) {
    const uint64_t nbuf = w->bufs ? (uint64_t)m->buffer_floats : 0;
    const size_t total = shard_bytes(w->count, nbuf), arr = (size_t)w->count * sizeof(float);
    unsigned char *buf = vx_malloc(total);
    ShardHeader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, SHARD_MAGIC, 8);
    h.version = SHARD_VERSION;
    h.header_bytes = sizeof h;
    h.checkpoint_id = w->checkpoint_id;
    h.model_fingerprint = config_model_fingerprint(&m->cfg);
    h.step = step;
    h.rank = w->rank, h.world = w->world, h.zero = w->zero;
    h.flat_floats = (uint64_t)m->param_floats;
    h.begin = w->begin, h.count = w->count;
    h.buffer_count = nbuf;
    memcpy(buf, &h, sizeof h);
    const float *src[3] = {w->master, w->adam_m, w->adam_v};
    for (int k = 0; k < 3; k++) memcpy(buf + sizeof h + k * arr, src[k], arr);
    if (nbuf) memcpy(buf + sizeof h + 3 * arr, w->bufs, (size_t)nbuf * sizeof(float));
    const uint32_t crc = ckpt_crc32(buf, total - sizeof crc);
    memcpy(buf + total - sizeof crc, &crc, sizeof crc);
    char path[4200];
    shard_path(path, sizeof path, dir, w->rank, w->world);
    fs_write_atomic(path, buf, total);
    free(buf);
    return crc;
}

void ckpt_manifest_write(const char *dir, const Model *m, const CkptState *st, uint64_t checkpoint_id, int world,
                         int zero, uint64_t shard, const uint32_t *crcs) {
    const size_t cap = 4096 + (size_t)world * 160;
    char *j = vx_malloc(cap);
    size_t n = 0;
#define PUT(...) n += (size_t)snprintf(j + n, cap - n, __VA_ARGS__)
    PUT("{\n  \"format\": \"voxscale sharded checkpoint\",\n  \"version\": %d,\n", MANIFEST_VERSION);
    PUT("  \"checkpoint_id\": \"%016llx\",\n", (unsigned long long)checkpoint_id);
    PUT("  \"model_fingerprint\": \"%016llx\",\n", (unsigned long long)config_model_fingerprint(&m->cfg));
    PUT("  \"param_count\": %ld,\n  \"param_floats\": %ld,\n  \"buffer_count\": %ld,\n", m->param_count,
        m->param_floats, m->buffer_floats);
    PUT("  \"seed\": %lld,\n  \"step\": %lld,\n  \"next_sample\": %lld,\n", (long long)m->seed, (long long)st->step,
        (long long)st->next_sample);
    PUT("  \"loss_ema\": %.17g,\n  \"adam_step\": %lld,\n  \"skipped_steps\": %lld,\n  \"growth_tracker\": %lld,\n",
        st->loss_ema, (long long)st->opt.adam_step, (long long)st->opt.skipped_steps,
        (long long)st->opt.growth_tracker);
    PUT("  \"loss_scale\": %.17g,\n  \"world_size\": %d,\n  \"zero\": %d,\n  \"shard_floats\": %llu,\n  \"shards\": [\n",
        st->opt.loss_scale, world, zero, (unsigned long long)shard);
    for (int r = 0; r < world; r++)
        PUT("    {\"file\": \"rank%d-of-%d.shard\", \"rank\": %d, \"begin\": %llu, \"count\": %llu, \"bytes\": %zu, "
            "\"crc32\": %u}%s\n", r, world, r, (unsigned long long)(r * shard), (unsigned long long)shard,
            shard_bytes(shard, r == 0 ? (uint64_t)m->buffer_floats : 0), crcs[r], r + 1 < world ? "," : "");
    PUT("  ],\n");
    PUT("  " MANIFEST_CRC_KEY "%u\n}\n", ckpt_crc32(j, n)); /* (of every byte before this line) */
#undef PUT
    char path[4200];
    snprintf(path, sizeof path, "%s/" SHARD_MANIFEST, dir);
    fs_write_atomic(path, j, n);
    free(j);
}

int ckpt_is_sharded(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return 1;
    const char *base = strrchr(path, '/');
    return strcmp(base ? base + 1 : path, SHARD_MANIFEST) == 0;
}

/* ---- reading ------------------------------------------------------------------------------------------------ */

/* A manifest field: a number within [lo, hi] (whole when `whole`), or exit 2 naming it. */
static double field_num(const cJSON *j, const char *key, double lo, double hi, int whole, const char *origin) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi ||
        (whole && v->valuedouble != floor(v->valuedouble)))
        vx_usage_error("%s: \"%s\" is missing or not a %s in %g..%g: the manifest is damaged; %s", origin, key,
                       whole ? "whole number" : "number", lo, hi, ckpt_reader_next());
    return v->valuedouble;
}
static uint64_t field_hex(const cJSON *j, const char *key, const char *origin) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    char *end = NULL;
    unsigned long long x = cJSON_IsString(v) && strlen(v->valuestring) == 16 ? strtoull(v->valuestring, &end, 16) : 0;
    if (!end || *end) vx_usage_error("%s: \"%s\" is missing or not 16 hex digits: the manifest is damaged", origin, key);
    return (uint64_t)x;
}

/* The shard file of rank r, read whole and checked against the manifest's entry; returns its bytes. */
static unsigned char *read_shard(const char *dir, const cJSON *entry, int r, int world, uint64_t id,
                                 const CkptHeader *h, const Model *m, uint64_t shard, int zero) {
    char origin[4300], path[4200], want_name[64];
    shard_path(path, sizeof path, dir, r, world);
    snprintf(want_name, sizeof want_name, "rank%d-of-%d.shard", r, world);
    snprintf(origin, sizeof origin, "%s/" SHARD_MANIFEST, dir);
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(entry, "file");
    if (!cJSON_IsString(file) || strcmp(file->valuestring, want_name) != 0 ||
        field_num(entry, "rank", 0, CKPT_MAX_WORLD, 1, origin) != r ||
        field_num(entry, "begin", 0, 1e18, 1, origin) != (double)(r * shard) ||
        field_num(entry, "count", 0, 1e18, 1, origin) != (double)shard)
        vx_usage_error("%s: shard entry %d does not name %s at floats %llu.. (%llu of them): the manifest is damaged",
                       origin, r, want_name, (unsigned long long)(r * shard), (unsigned long long)shard);
    const uint64_t nbuf = r == 0 ? h->buffer_count : 0;
    const size_t want = shard_bytes(shard, nbuf);
    const double crc_listed = field_num(entry, "crc32", 0, 4294967295.0, 1, origin);
    if (field_num(entry, "bytes", 0, 1e18, 1, origin) != (double)want)
        vx_usage_error("%s: shard %s is listed at another size than %zu bytes: the manifest is damaged", origin,
                       want_name, want);
    char why[200];
    int is_dir = 0;
    if (!fs_input_kind(path, 0, &is_dir, why, sizeof why))
        vx_usage_error("%s: %s (shard %d of %d); the checkpoint is incomplete: %s", path, why, r, world,
                       ckpt_reader_next());
    size_t len = 0;
    unsigned char *buf = (unsigned char *)fs_read_file(path, want + 1, &len);
    if (!buf && errno == EFBIG)
        vx_usage_error("%s: longer than the %zu bytes the manifest says: not this checkpoint's shard", path, want);
    if (!buf) vx_usage_error("%s: cannot read the shard (%s)", path, strerror(errno));
    if (len != want)
        vx_usage_error("%s: %zu bytes, the manifest says %zu: the shard is truncated; %s", path, len, want,
                       ckpt_reader_next());
    ShardHeader sh;
    memcpy(&sh, buf, sizeof sh);
    if (memcmp(sh.magic, SHARD_MAGIC, 8) != 0 || sh.version != SHARD_VERSION || sh.header_bytes != sizeof sh)
        vx_usage_error("%s: not a voxscale shard (format %u): the file was replaced", path, sh.version);
    if (sh.checkpoint_id != id)
        vx_usage_error("%s: belongs to another checkpoint (id %016llx, this manifest's is %016llx): a shard of another "
                       "run or step was copied here; %s", path, (unsigned long long)sh.checkpoint_id,
                       (unsigned long long)id, ckpt_reader_next());
    uint32_t stored;
    memcpy(&stored, buf + len - sizeof stored, sizeof stored);
    if (ckpt_crc32(buf, len - sizeof stored) != stored || stored != (uint32_t)crc_listed)
        vx_usage_error("%s: checksum mismatch (the file's %08x, computed %08x, the manifest's %08x): the shard is "
                       "corrupted; %s", path, stored, ckpt_crc32(buf, len - sizeof stored), (uint32_t)crc_listed,
                       ckpt_reader_next());
    if (sh.rank != r || sh.world != world || sh.zero != zero || sh.step != h->step || sh.begin != r * shard ||
        sh.count != shard || sh.flat_floats != (uint64_t)m->param_floats || sh.buffer_count != nbuf ||
        sh.model_fingerprint != h->model_fingerprint)
        vx_usage_error("%s: its header (rank %d of %d, step %lld, floats %llu..+%llu) disagrees with the manifest: "
                       "the checkpoint is corrupted", path, sh.rank, sh.world, (long long)sh.step,
                       (unsigned long long)sh.begin, (unsigned long long)sh.count);
    return buf;
}

void ckpt_sharded_read(const char *path, const Model *m, int64_t steps, ShardedCkpt *out) {
    memset(out, 0, sizeof *out);
    char dir[4096], origin[4200];
    if (ckpt_is_sharded(path) && strcmp(strrchr(path, '/') ? strrchr(path, '/') + 1 : path, SHARD_MANIFEST) == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", path);
        snprintf(dir, sizeof dir, "%s", dirname(tmp));
    } else {
        snprintf(dir, sizeof dir, "%s", path);
    }
    snprintf(origin, sizeof origin, "%s/" SHARD_MANIFEST, dir);
    char why[200];
    int is_dir = 0;
    if (!fs_input_kind(origin, 0, &is_dir, why, sizeof why))
        vx_usage_error("%s: %s: not a complete sharded checkpoint (the manifest is written last: a save that was cut "
                       "short has none); %s", origin, why, ckpt_reader_next());
    size_t len = 0;
    char *text = fs_read_file(origin, MANIFEST_MAX_BYTES, &len);
    if (!text) vx_usage_error("%s: cannot read the manifest (%s)", origin, strerror(errno));
    cJSON *j = cJSON_ParseWithLength(text, len);
    const cJSON *fmt = j ? cJSON_GetObjectItemCaseSensitive(j, "format") : NULL;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "voxscale sharded checkpoint") != 0)
        vx_usage_error("%s: not a voxscale sharded checkpoint's manifest (not JSON, or no \"format\")", origin);
    const double version = field_num(j, "version", 1, 1e6, 1, origin);
    if (version != 1 && version != MANIFEST_VERSION)
        vx_usage_error("%s: sharded checkpoint format %g is not one this build reads (1, %d)", origin, version,
                       MANIFEST_VERSION);
    if (version >= 2) { /* the manifest's own checksum, over every byte before its line */
        const char *at = NULL;
        for (const char *p = strstr(text, MANIFEST_CRC_KEY); p; p = strstr(p + 1, MANIFEST_CRC_KEY)) at = p;
        while (at && at > text && at[-1] != '\n') at--;
        const double listed = field_num(j, "manifest_crc32", 0, 4294967295.0, 1, origin);
        const uint32_t computed = at ? ckpt_crc32(text, (size_t)(at - text)) : 0;
        if (!at || computed != (uint32_t)listed)
            vx_usage_error("%s: checksum mismatch (the manifest's own CRC-32 says %08x, its bytes give %08x): it was "
                           "edited or damaged, and its step, data position or layout cannot be trusted; %s", origin,
                           (uint32_t)listed, computed, ckpt_reader_next());
    }
    CkptHeader h;
    memset(&h, 0, sizeof h);
    h.version = CKPT_VERSION;
    h.param_count = (uint64_t)field_num(j, "param_count", 0, 1e15, 1, origin);
    h.buffer_count = (uint64_t)field_num(j, "buffer_count", 0, 1e15, 1, origin);
    h.model_fingerprint = field_hex(j, "model_fingerprint", origin);
    h.seed = (int64_t)field_num(j, "seed", -9.2e18, 9.2e18, 1, origin);
    h.step = (int64_t)field_num(j, "step", 0, 1e9, 1, origin);
    h.next_sample = (int64_t)field_num(j, "next_sample", 0, 9e18, 1, origin);
    h.world_size = (int64_t)field_num(j, "world_size", 1, CKPT_MAX_WORLD, 1, origin);
    h.loss_ema = field_num(j, "loss_ema", -1e300, 1e300, 0, origin);
    h.adam_step = (int64_t)field_num(j, "adam_step", 0, 1e9, 1, origin);
    h.skipped_steps = (int64_t)field_num(j, "skipped_steps", 0, 1e9, 1, origin);
    h.growth_tracker = (int64_t)field_num(j, "growth_tracker", 0, 1e9, 1, origin);
    h.loss_scale = field_num(j, "loss_scale", 0, 3.0e38, 0, origin);
    CkptExpect want = ckpt_expect(m, steps > 0 ? steps : INT64_MAX);
    ckpt_check_header(&h, &want, origin); /* the model, seed, step, position and optimizer state, as any checkpoint */
    const int world = (int)h.world_size, zero = (int)field_num(j, "zero", 1, 2, 1, origin);
    const uint64_t flat = (uint64_t)field_num(j, "param_floats", 0, 1e15, 1, origin);
    const uint64_t shard = (uint64_t)field_num(j, "shard_floats", 1, 1e15, 1, origin);
    if (flat != (uint64_t)m->param_floats || shard * (uint64_t)world < flat || shard % 16)
        vx_usage_error("%s: its layout (%llu floats in %d shards of %llu) is not this model's (%ld floats): the "
                       "manifest is damaged or of another build", origin, (unsigned long long)flat, world,
                       (unsigned long long)shard, m->param_floats);
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(j, "shards");
    if (!cJSON_IsArray(shards) || cJSON_GetArraySize(shards) != world)
        vx_usage_error("%s: \"shards\" must list the %d shards of the world size it names", origin, world);
    const uint64_t id = field_hex(j, "checkpoint_id", origin);
    out->header = h;
    out->world = world;
    out->zero = zero;
    const size_t fbytes = (size_t)m->param_floats * sizeof(float);
    out->param = vx_calloc(1, fbytes ? fbytes : 1);
    out->adam_m = vx_calloc(1, fbytes ? fbytes : 1);
    out->adam_v = vx_calloc(1, fbytes ? fbytes : 1);
    out->bufs = vx_calloc((size_t)(h.buffer_count ? h.buffer_count : 1), sizeof(float));
    Progress prog; /* (each shard read whole and checked: seconds each for a large model) */
    progress_begin(&prog, "reading the shards", world, "shards");
    for (int r = 0; r < world; r++) {
        unsigned char *buf = read_shard(dir, cJSON_GetArrayItem(shards, r), r, world, id, &h, m, shard, zero);
        const uint64_t b = (uint64_t)r * shard, avail = b < flat ? (flat - b < shard ? flat - b : shard) : 0;
        const size_t arr = (size_t)shard * sizeof(float);
        float *dst[3] = {out->param, out->adam_m, out->adam_v};
        for (int k = 0; k < 3; k++) memcpy(dst[k] + b, buf + sizeof(ShardHeader) + k * arr, (size_t)avail * sizeof(float));
        if (r == 0 && h.buffer_count)
            memcpy(out->bufs, buf + sizeof(ShardHeader) + 3 * arr, (size_t)h.buffer_count * sizeof(float));
        free(buf);
        progress_add(&prog, 1);
    }
    progress_end(&prog);
    out->id = (CkptId){.step = h.step, .next_sample = h.next_sample, .crc = ckpt_crc32(text, len)};
    cJSON_Delete(j);
    free(text);
}

int ckpt_sharded_peek(const char *dir, uint64_t *fingerprint, uint64_t *param_count) {
    char origin[4200];
    snprintf(origin, sizeof origin, "%s/" SHARD_MANIFEST, dir);
    size_t len = 0;
    char *text = fs_read_file(origin, MANIFEST_MAX_BYTES, &len);
    cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
    const cJSON *fp = j ? cJSON_GetObjectItemCaseSensitive(j, "model_fingerprint") : NULL;
    const cJSON *n = j ? cJSON_GetObjectItemCaseSensitive(j, "param_count") : NULL;
    char *end = NULL;
    if (cJSON_IsString(fp) && cJSON_IsNumber(n) && n->valuedouble >= 0) {
        *fingerprint = strtoull(fp->valuestring, &end, 16);
        *param_count = (uint64_t)n->valuedouble;
    }
    const int ok = end && !*end;
    cJSON_Delete(j);
    free(text);
    return ok;
}

void ckpt_sharded_free(ShardedCkpt *c) {
    free(c->param);
    free(c->adam_m);
    free(c->adam_v);
    free(c->bufs);
    memset(c, 0, sizeof *c);
}

void ckpt_sharded_content(const ShardedCkpt *c, const Model *m, CkptContent *out) {
    const size_t pbytes = (size_t)(m->param_count ? m->param_count : 1) * sizeof(float);
    float *packed[3] = {vx_malloc(pbytes), vx_malloc(pbytes), vx_malloc(pbytes)};
    const float *flat[3] = {c->param, c->adam_m, c->adam_v};
    for (int k = 0; k < 3; k++) model_pack_params(m, flat[k], packed[k]);
    float *bufs = vx_malloc((size_t)(c->header.buffer_count ? c->header.buffer_count : 1) * sizeof(float));
    memcpy(bufs, c->bufs, (size_t)c->header.buffer_count * sizeof(float));
    const CkptHeader *h = &c->header;
    *out = (CkptContent){.param_count = h->param_count, .buffer_count = h->buffer_count,
                         .model_fingerprint = h->model_fingerprint, .seed = h->seed,
                         .st = {.step = h->step, .next_sample = h->next_sample, .loss_ema = h->loss_ema,
                                .world_size = h->world_size,
                                .opt = {.loss_scale = h->loss_scale, .adam_step = h->adam_step,
                                        .skipped_steps = h->skipped_steps, .growth_tracker = h->growth_tracker}},
                         .param = packed[0], .adam_m = packed[1], .adam_v = packed[2], .bufs = bufs};
}

void ckpt_content_free(CkptContent *c) {
    free((void *)c->param);
    free((void *)c->adam_m);
    free((void *)c->adam_v);
    free((void *)c->bufs);
    memset(c, 0, sizeof *c);
}

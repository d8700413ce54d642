/* config.c: the strict JSON reader, overrides and the resolved-config writer over the schema table
 * (config_schema.c; see config.h). The cross-key checks are config_validate.c's. */
#include "core/config.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/config_schema.h"
#include "core/fsutil.h"
#include "core/suggest.h"
#include "core/util.h"

#define CONFIG_MAX_BYTES (1 << 20) /* a config is a few KiB; more is not a config (or /dev/zero) */

static const char *type_name(KeyType t) {
    switch (t) {
    case T_INT:
    case T_INT64: return "an integer";
    case T_DOUBLE:
    case T_FLOAT: return "a number";
    case T_STRING: return "a string";
    case T_INT3: return "a list of 3 integers";
    case T_INTLIST: return "a list of integers";
    case T_STAGES: return "a list of stage objects";
    case T_LIST: return "a list of numbers";
    }
    return "?";
}

static int is_integer(double v) { return isfinite(v) && floor(v) == v; }

static void apply_stages(TrainConfig *train, const cJSON *v, const char *origin);

/* Applies one JSON value to the key it belongs to in `record` (a Config, or a Stage of train.stages), or exits 2
 * naming origin and the key's full name. levels receives a T_INTLIST's length. */
static void apply_to(void *record, int *levels, const char *name, const KeySpec *k, const cJSON *v,
                     const char *origin) {
    char *base = (char *)record + k->offset;
    char range[96];
    snprintf(range, sizeof range, "in [%.10g, %.10g]", k->min, k->max);
    switch (k->type) {
    case T_INT:
    case T_INT64:
    case T_DOUBLE:
    case T_FLOAT: {
        const int integral = k->type == T_INT || k->type == T_INT64;
        if (!cJSON_IsNumber(v) || (integral && !is_integer(v->valuedouble)))
            vx_usage_error("%s: %s must be %s %s", origin, name, type_name(k->type), range);
        double x = v->valuedouble;
        if (!(x >= k->min && x <= k->max))
            vx_usage_error("%s: %s must be %s, got %.17g", origin, name, range, x);
        if (k->type == T_FLOAT) { /* the same range in float32 (whose own bounds are rounded too) */
            const float f = (float)x;
            if (!(f >= (float)k->min && f <= (float)k->max) || (x != 0 && !isnormal(f)))
                vx_usage_error("%s: %s = %.17g becomes %.9g in float32, the precision training uses, which is "
                               "not %s; choose a value that stays inside it", origin, name, x, (double)f,
                               range);
        }
        if (k->type == T_INT) *(int *)base = (int)x;
        else if (k->type == T_INT64) *(int64_t *)base = (int64_t)x;
        else *(double *)base = x; /* T_DOUBLE and T_FLOAT */
        break;
    }
    case T_STRING: {
        if (!cJSON_IsString(v)) vx_usage_error("%s: %s must be a string", origin, name);
        const char *s = v->valuestring;
        if (strlen(s) >= CONFIG_STR)
            vx_usage_error("%s: %s is longer than %d characters", origin, name, CONFIG_STR - 1);
        if (k->choices) {
            int ok = 0;
            size_t n = strlen(s);
            for (const char *c = k->choices; *c;) {
                const char *bar = strchr(c, '|');
                size_t len = bar ? (size_t)(bar - c) : strlen(c);
                if (len == n && strncmp(c, s, n) == 0) ok = 1;
                c += len + (bar ? 1 : 0);
            }
            if (!ok) vx_usage_error("%s: %s must be one of %s, got \"%s\"", origin, name, k->choices, s);
        }
        snprintf(base, CONFIG_STR, "%s", s);
        break;
    }
    case T_INT3:
    case T_INTLIST: {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        int want_min = k->type == T_INT3 ? 3 : 1, want_max = k->type == T_INT3 ? 3 : CONFIG_MAX_LEVELS;
        if (n < want_min || n > want_max)
            vx_usage_error("%s: %s must be %s (%d to %d entries)", origin, name, type_name(k->type), want_min,
                           want_max);
        int *out = (int *)base;
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsNumber(e) || !is_integer(e->valuedouble) || e->valuedouble < k->min || e->valuedouble > k->max)
                vx_usage_error("%s: %s[%d] must be an integer %s", origin, name, i, range);
            out[i] = (int)e->valuedouble;
        }
        if (k->type == T_INTLIST && levels) *levels = n;
        break;
    }
    case T_STAGES: apply_stages(&((Config *)record)->train, v, origin); break;
    case T_LIST: {
        const int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 0 || n > CONFIG_MAX_LIST)
            vx_usage_error("%s: %s must be %s (at most %d entries)", origin, name, type_name(k->type), CONFIG_MAX_LIST);
        ConfigList *out = (ConfigList *)base;
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= k->min && e->valuedouble <= k->max))
                vx_usage_error("%s: %s[%d] must be a number %s", origin, name, i, range);
            out->v[i] = e->valuedouble;
        }
        out->n = n;
        break;
    }
    }
}

/* A top-level key of the schema. */
static void apply_value(Config *cfg, const KeySpec *k, const cJSON *v, const char *origin) {
    char name[96];
    snprintf(name, sizeof name, "%s.%s", k->section, k->key);
    apply_to(cfg, &cfg->model.levels, name, k, v, origin);
}

/* train.stages[i].model: an object of STAGE_MODEL_SCHEMA's keys, each at most once */
static void apply_stage_model(StageModel *sm, const cJSON *v, int i, const char *origin) {
    if (!cJSON_IsObject(v))
        vx_usage_error("%s: train.stages[%d].model must be an object of the stage's network keys, e.g. "
                       "{\"hidden_size\": 64, \"blocks\": 2}", origin, i);
    for (const cJSON *kv = v->child; kv; kv = kv->next) {
        for (const cJSON *prev = v->child; prev != kv; prev = prev->next)
            if (strcmp(prev->string, kv->string) == 0)
                vx_usage_error("%s: train.stages[%d].model.%s is given twice; keep one", origin, i, kv->string);
        const KeySpec *k = NULL;
        for (int j = 0; j < NSTAGE_MODEL_KEYS; j++)
            if (strcmp(STAGE_MODEL_SCHEMA[j].key, kv->string) == 0) k = &STAGE_MODEL_SCHEMA[j];
        if (!k)
            vx_usage_error("%s: unknown key \"train.stages[%d].model.%s\" (a stage's network has hidden_size, blocks, "
                           "heads, patch_size, mlp_ratio)", origin, i, kv->string);
        char name[96];
        snprintf(name, sizeof name, "train.stages[%d].model.%s", i, kv->string);
        apply_to(sm, NULL, name, k, kv, origin);
    }
}

/* train.stages: each entry an object of STAGE_SCHEMA's keys, each key at most once; what is left out inherits
 * (marked 0 / -1 here, filled in by config_validate). */
static void apply_stages(TrainConfig *train, const cJSON *v, const char *origin) {
    const int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n > CONFIG_MAX_STAGES)
        vx_usage_error("%s: train.stages must be a list of at most %d stage objects, e.g. [{\"input_size\": [64, 64, 64], "
                       "\"steps\": 100}]", origin, CONFIG_MAX_STAGES);
    train->n_stages = n;
    for (int i = 0; i < n; i++) {
        const cJSON *o = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsObject(o)) vx_usage_error("%s: train.stages[%d] must be an object", origin, i);
        Stage *st = &train->stages[i];
        *st = (Stage){.input_size = {0, 0, 0}, .steps = 0, .epochs = 0, .batch_size = -1, .lr = -1,
                      .model = {-1, -1, -1, {-1, -1, -1}, -1}};
        for (const cJSON *kv = o->child; kv; kv = kv->next) {
            for (const cJSON *prev = o->child; prev != kv; prev = prev->next)
                if (strcmp(prev->string, kv->string) == 0)
                    vx_usage_error("%s: train.stages[%d].%s is given twice; keep one", origin, i, kv->string);
            if (strcmp(kv->string, "model") == 0) {
                apply_stage_model(&st->model, kv, i, origin);
                continue;
            }
            const KeySpec *k = NULL;
            for (int j = 0; j < NSTAGE_KEYS; j++)
                if (strcmp(STAGE_SCHEMA[j].key, kv->string) == 0) k = &STAGE_SCHEMA[j];
            if (!k)
                vx_usage_error("%s: unknown key \"train.stages[%d].%s\" (a stage has input_size, steps or epochs, "
                               "batch_size, lr, model)", origin, i, kv->string);
            char name[96];
            snprintf(name, sizeof name, "train.stages[%d].%s", i, kv->string);
            apply_to(st, NULL, name, k, kv, origin);
        }
        if ((st->steps > 0) == (st->epochs > 0))
            vx_usage_error("%s: train.stages[%d] needs exactly one of steps and epochs", origin, i);
    }
}

static const KeySpec *find_key(const char *section, const char *key) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(SCHEMA[i].section, section) == 0 && strcmp(SCHEMA[i].key, key) == 0) return &SCHEMA[i];
    return NULL;
}

static int section_exists(const char *section) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(SCHEMA[i].section, section) == 0) return 1;
    return 0;
}

int config_has_key(const char *dotted) {
    char section[64];
    const char *dot = strchr(dotted, '.');
    if (!dot || (size_t)(dot - dotted) >= sizeof section) return 0;
    snprintf(section, sizeof section, "%.*s", (int)(dot - dotted), dotted);
    return find_key(section, dot + 1) != NULL;
}

void config_defaults(Config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < NKEYS; i++) {
        cJSON *v = cJSON_Parse(SCHEMA[i].def);
        if (!v) vx_fatal("bad default for %s.%s", SCHEMA[i].section, SCHEMA[i].key);
        apply_value(cfg, &SCHEMA[i], v, "built-in default");
        cJSON_Delete(v);
    }
}

/* Line number of a byte offset, for JSON syntax errors. */
static int line_of(const char *text, const char *pos) {
    int line = 1;
    for (const char *p = text; p < pos && *p; p++) line += *p == '\n';
    return line;
}

/* How much of the text at p an error message quotes: 20 bytes at most, never past the end. */
static int snippet_len(const char *p, const char *end) { return end - p < 20 ? (int)(end - p) : 20; }

/* The JSON of a config: one object, nothing after it, no NUL bytes, no key given twice. */
static cJSON *parse_object(const char *text, size_t len, const char *origin) {
    if (memchr(text, 0, len))
        vx_usage_error("%s: contains a NUL byte: a config is a JSON text file", origin);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        const char *err = cJSON_GetErrorPtr();
        const int at = err && err >= text && err <= text + len;
        vx_usage_error("%s:%d: not valid JSON near \"%.*s\"", origin, at ? line_of(text, err) : 0,
                       at ? snippet_len(err, text + len) : 0, at ? err : "");
    }
    while (end < text + len && strchr(" \t\r\n", *end)) end++;
    if (end < text + len) {
        cJSON_Delete(root);
        vx_usage_error("%s:%d: text after the end of the JSON object, near \"%.*s\"; a config is one object",
                       origin, line_of(text, end), snippet_len(end, text + len), end);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        vx_usage_error("%s: the config must be a JSON object", origin);
    }
    return root;
}

/* Exits 2 when an earlier member of the same object has the name of `item`. */
static void refuse_duplicate(const cJSON *first, const cJSON *item, const char *origin, const char *section) {
    for (const cJSON *o = first; o != item; o = o->next)
        if (strcmp(o->string, item->string) == 0)
            vx_usage_error("%s: %s%s%s is given twice; keep one", origin, section ? section : "", section ? "." : "",
                           item->string);
}

void config_parse_text(Config *cfg, const char *text, size_t len, const char *origin) {
    config_defaults(cfg);
    cJSON *root = parse_object(text, len, origin);
    for (const cJSON *sec = root->child; sec; sec = sec->next) {
        refuse_duplicate(root->child, sec, origin, NULL);
        if (strcmp(sec->string, "description") == 0 && cJSON_IsString(sec)) continue;
        char near[128], hint[160];
        if (!section_exists(sec->string))
            vx_usage_error("%s: unknown section \"%s\"%s (sections: model, train, data, output, dist, diffusion, xray, "
                           "loss, description)", origin, sec->string,
                           suggest_phrase(config_suggest(sec->string, NULL, near, sizeof near), "", hint, sizeof hint));
        if (!cJSON_IsObject(sec)) vx_usage_error("%s: section \"%s\" must be an object", origin, sec->string);
        for (const cJSON *kv = sec->child; kv; kv = kv->next) {
            refuse_duplicate(sec->child, kv, origin, sec->string);
            const KeySpec *k = find_key(sec->string, kv->string);
            if (!k)
                vx_usage_error("%s: unknown key \"%s.%s\"%s (see `voxscale train --help-config`)", origin, sec->string,
                               kv->string, suggest_phrase(config_suggest(sec->string, kv->string, near, sizeof near),
                                                          "", hint, sizeof hint));
            apply_value(cfg, k, kv, origin);
        }
    }
    cJSON_Delete(root);
    config_validate(cfg, origin);
}

void config_load(Config *cfg, const char *path) {
    size_t len = 0;
    char *text = fs_read_file(path, CONFIG_MAX_BYTES, &len);
    if (!text) {
        if (errno == EFBIG)
            vx_usage_error("%s: larger than %d KiB, which no config is; check the path given to --config", path,
                           CONFIG_MAX_BYTES >> 10);
        vx_usage_error("%s: cannot read the config file (%s); check the path given to --config", path, strerror(errno));
    }
    config_parse_text(cfg, text, len, path);
    free(text);
}

void config_set(Config *cfg, const char *key, const char *value, const char *origin) {
    char section[64];
    const char *dot = strchr(key, '.');
    if (!dot || (size_t)(dot - key) >= sizeof section) vx_fatal("bad config key %s", key);
    snprintf(section, sizeof section, "%.*s", (int)(dot - key), key);
    const KeySpec *k = find_key(section, dot + 1);
    if (!k) vx_fatal("no config key %s", key);
    /* Values parse as JSON, whole (so "5abc" or "0x10" are not the numbers 5 and 0); anything that is not JSON is
     * taken as a string, so `--device cpu` needs no quotes, and a number key then refuses it by name. */
    cJSON *v = cJSON_ParseWithOpts(value, NULL, 1);
    if (!v || (k->type == T_STRING && !cJSON_IsString(v))) {
        cJSON_Delete(v);
        v = cJSON_CreateString(value);
    }
    apply_value(cfg, k, v, origin);
    cJSON_Delete(v);
}


static cJSON *value_to_json(const Config *cfg, const KeySpec *k) {
    const char *base = (const char *)cfg + k->offset;
    switch (k->type) {
    case T_INT: return cJSON_CreateNumber(*(const int *)base);
    case T_INT64: return cJSON_CreateNumber((double)*(const int64_t *)base);
    case T_DOUBLE:
    case T_FLOAT: return cJSON_CreateNumber(*(const double *)base);
    case T_STRING: return cJSON_CreateString(base);
    case T_INT3: return cJSON_CreateIntArray((const int *)base, 3);
    case T_INTLIST: return cJSON_CreateIntArray((const int *)base, cfg->model.levels);
    case T_LIST: {
        const ConfigList *l = (const ConfigList *)base;
        return cJSON_CreateDoubleArray(l->v, l->n);
    }
    case T_STAGES: {
        cJSON *list = cJSON_CreateArray();
        int stage_networks = 0; /* any stage with a network of its own (train.stages[i].model) */
        for (int i = 0; i < cfg->train.n_stages; i++) {
            const StageModel *sm = &cfg->train.stages[i].model;
            stage_networks |= sm->hidden_size >= 0 || sm->blocks >= 0 || sm->heads >= 0 || sm->mlp_ratio >= 0 ||
                              sm->patch_size[0] >= 0 || sm->patch_size[1] >= 0 || sm->patch_size[2] >= 0;
        }
        for (int i = 0; i < cfg->train.n_stages; i++) { /* as run: what a stage inherited is written out */
            const Stage st = config_stage(&cfg->train, cfg->model.input_size, i);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToObject(o, "input_size", cJSON_CreateIntArray(st.input_size, 3));
            if (st.steps > 0) cJSON_AddNumberToObject(o, "steps", st.steps);
            else cJSON_AddNumberToObject(o, "epochs", st.epochs);
            cJSON_AddNumberToObject(o, "batch_size", st.batch_size);
            cJSON_AddNumberToObject(o, "lr", st.lr);
            if (stage_networks) { /* a cascade's networks as run: every key, inherited ones filled in */
                ModelConfig mc;
                config_stage_model(&cfg->model, &cfg->train, i, &mc);
                cJSON *net = cJSON_AddObjectToObject(o, "model");
                cJSON_AddNumberToObject(net, "hidden_size", mc.vit.hidden_size);
                cJSON_AddNumberToObject(net, "blocks", mc.vit.blocks);
                cJSON_AddNumberToObject(net, "heads", mc.vit.heads);
                cJSON_AddItemToObject(net, "patch_size", cJSON_CreateIntArray(mc.vit.patch_size, 3));
                cJSON_AddNumberToObject(net, "mlp_ratio", mc.vit.mlp_ratio);
            }
            cJSON_AddItemToArray(list, o);
        }
        return list;
    }
    }
    return NULL;
}

char *config_to_json(const Config *cfg) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < NKEYS; i++) {
        cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, SCHEMA[i].section);
        if (!sec) sec = cJSON_AddObjectToObject(root, SCHEMA[i].section);
        cJSON_AddItemToObject(sec, SCHEMA[i].key, value_to_json(cfg, &SCHEMA[i]));
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

void config_write(const Config *cfg, const char *path) {
    char *s = config_to_json(cfg);
    size_t n = strlen(s);
    s = realloc(s, n + 2);
    s[n] = '\n';
    fs_write_atomic(path, s, n + 1);
    free(s);
}


uint64_t config_model_fingerprint(const ModelConfig *model) {
    /* FNV-1a over the keys that change the parameter count or layout (checkpoints hold it: the same values in the
     * same order, whatever the struct around them looks like) */
    uint64_t h = 1469598103934665603ull;
    if (strncmp(model->family, "vit3d", 5) == 0) { /* its own tag, then the keys that shape its parameters */
        const ViTConfig *v = &model->vit;
        const int diffusion = strcmp(model->family, "vit3d_diffusion") == 0;
        const int keys[] = {diffusion ? 0x718 : 0x717, model->in_channels, model->input_size[0], model->input_size[1],
                            model->input_size[2], v->hidden_size, v->blocks, v->heads, v->patch_size[0],
                            v->patch_size[1], v->patch_size[2], v->mlp_ratio,
                            /* the denoiser's view tokens (vit3d's keys stop before them, as its checkpoints hold) */
                            model->diff.img_size, model->diff.patch_size};
        const unsigned char *p = (const unsigned char *)keys;
        const size_t bytes = diffusion ? sizeof keys : sizeof keys - 2 * sizeof(int);
        for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
        /* a cascade's earlier networks (held in the checkpoint's buffers): none leaves the hash as before */
        for (int k = 0; diffusion && k < model->cascade_n; k++) {
            const CascadeLevel *c = &model->cascade[k];
            const int level[] = {0xCA5, c->input_size[0], c->input_size[1], c->input_size[2], c->hidden_size, c->blocks,
                                 c->heads, c->patch_size[0], c->patch_size[1], c->patch_size[2], c->mlp_ratio};
            const unsigned char *q = (const unsigned char *)level;
            for (size_t i = 0; i < sizeof level; i++) h = (h ^ q[i]) * 1099511628211ull;
        }
        return h;
    }
    if (strcmp(model->family, "densenet") == 0) {
        const ModelConfig *m = model;
        const DenseNetConfig *d = &m->densenet;
        int layers[CONFIG_MAX_LIST];
        const int blocks = config_densenet_blocks(m, layers); /* the layers, not the depth that named them */
        const int keys[] = {0xDE5, m->in_channels, m->resnet.spatial_dims, d->growth_rate, d->init_features,
                            d->bn_size, m->head.num_classes, blocks};
        const unsigned char *p = (const unsigned char *)keys;
        for (size_t i = 0; i < sizeof keys; i++) h = (h ^ p[i]) * 1099511628211ull;
        p = (const unsigned char *)layers;
        for (size_t i = 0; i < (size_t)blocks * sizeof(int); i++) h = (h ^ p[i]) * 1099511628211ull;
        return h;
    }
    if (strcmp(model->family, "ae3d") != 0) { /* a family of its own: its tag first, so no ae3d config matches */
        const ModelConfig *m = model;
        const int keys[] = {0x5E5, m->in_channels, m->resnet.depth, m->resnet.spatial_dims, m->resnet.conv1_t_size,
                            (int)lround(m->resnet.widen_factor * 4096), m->resnet.bias_downsample, m->head.num_classes};
        const unsigned char *p = (const unsigned char *)keys;
        for (size_t i = 0; i < sizeof keys; i++) h = (h ^ p[i]) * 1099511628211ull;
        return h;
    }
    int keys[] = {model->in_channels, model->levels, model->res_blocks, model->latent_channels, model->norm_groups};
    const unsigned char *p = (const unsigned char *)keys;
    for (size_t i = 0; i < sizeof keys; i++) h = (h ^ p[i]) * 1099511628211ull;
    p = (const unsigned char *)model->channels;
    for (size_t i = 0; i < (size_t)model->levels * sizeof(int); i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

int config_key_count(void) { return NKEYS; }

const char *config_key_name(int i, char *out, size_t len) {
    snprintf(out, len, "%s.%s", SCHEMA[i].section, SCHEMA[i].key);
    return out;
}

char *config_key_json(const Config *cfg, int i) {
    cJSON *v = value_to_json(cfg, &SCHEMA[i]);
    char *s = cJSON_PrintUnformatted(v);
    cJSON_Delete(v);
    if (!s) vx_exit_error(VX_EXIT_MEMORY, "out of memory printing config key %s.%s", SCHEMA[i].section, SCHEMA[i].key);
    return s;
}

void config_print_help(FILE *out) {
    fprintf(out, "Config keys (JSON sections model, train, data, output, dist, diffusion, xray, loss):\n");
    for (int i = 0; i < NKEYS; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.%s", SCHEMA[i].section, SCHEMA[i].key);
        fprintf(out, "  %-22s default %-14s %s\n", name, SCHEMA[i].def, SCHEMA[i].help);
    }
}

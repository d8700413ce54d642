/* safetensors.c: the safetensors reader and writer (see safetensors.h). The header's JSON is read by cJSON (already
 * the config's parser); everything cJSON lets through that the format forbids is checked here. */
#include "core/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/util.h"

static const struct {
    const char *name;
    size_t size;
} DTYPES[ST_N_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},     [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2}, [ST_U16] = {"U16", 2}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4}, [ST_U32] = {"U32", 4}, [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8}, [ST_U64] = {"U64", 8},
};

const char *st_dtype_name(StDtype dt) { return dt < ST_N_DTYPES ? DTYPES[dt].name : "?"; }
size_t st_dtype_size(StDtype dt) { return dt < ST_N_DTYPES ? DTYPES[dt].size : 0; }
int st_is_float(StDtype dt) { return dt == ST_F16 || dt == ST_BF16 || dt == ST_F32 || dt == ST_F64; }

int64_t st_count(const StTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

void st_shape_text(const int64_t *shape, int ndim, char *out, size_t len) {
    size_t at = (size_t)snprintf(out, len, "[");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(out + at, len - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < len) snprintf(out + at, len - at, "]");
}

/* ---- reading ---------------------------------------------------------------------------------------------- */

/* Whether s[n] is valid UTF-8 (no overlong forms, no surrogates, nothing beyond U+10FFFF), as JSON text must be. */
static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        size_t k;
        unsigned cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) k = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) k = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) k = 3, cp = c & 0x07;
        else return 0;
        if (i + k >= n) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* A JSON number that is a whole number in 0..2^53 (what a double holds exactly): 1 and *out, else 0. */
static int whole(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    const double v = j->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* The name of tensor key (escaped) for error lines. */
static const char *esc(const char *s, char *buf, size_t len) { return vx_escape(s, buf, len); }

static void parse_tensor(const cJSON *e, const char *origin, StTensor *t) {
    char n[160];
    esc(e->string, n, sizeof n);
    if (!cJSON_IsObject(e))
        vx_usage_error("%s: tensor \"%s\" of the header is not an object {dtype, shape, data_offsets}", origin, n);
    const cJSON *dt = NULL, *shape = NULL, *off = NULL;
    for (const cJSON *f = e->child; f; f = f->next) {
        const cJSON **slot = strcmp(f->string, "dtype") == 0 ? &dt : strcmp(f->string, "shape") == 0 ? &shape
                             : strcmp(f->string, "data_offsets") == 0 ? &off : NULL;
        char k[96];
        if (!slot) vx_usage_error("%s: tensor \"%s\" has a key \"%s\" safetensors does not define", origin, n,
                                  esc(f->string, k, sizeof k));
        if (*slot) vx_usage_error("%s: tensor \"%s\" gives \"%s\" twice", origin, n, f->string);
        *slot = f;
    }
    if (!dt || !shape || !off)
        vx_usage_error("%s: tensor \"%s\" lacks \"%s\"", origin, n, !dt ? "dtype" : !shape ? "shape" : "data_offsets");
    t->dtype = ST_N_DTYPES;
    for (int d = 0; d < ST_N_DTYPES && cJSON_IsString(dt); d++)
        if (strcmp(dt->valuestring, DTYPES[d].name) == 0) t->dtype = (StDtype)d;
    if (t->dtype == ST_N_DTYPES) {
        char v[64];
        vx_usage_error("%s: tensor \"%s\" has dtype %s%s%s, not one of safetensors' (F32, F16, BF16, F64, I64, ...)",
                       origin, n, cJSON_IsString(dt) ? "\"" : "", cJSON_IsString(dt) ? esc(dt->valuestring, v, sizeof v)
                       : "(not a string)", cJSON_IsString(dt) ? "\"" : "");
    }
    const int nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    if (nd < 0 || nd > ST_MAX_DIMS)
        vx_usage_error("%s: tensor \"%s\" has a shape that is %s", origin, n,
                       nd < 0 ? "not an array" : "more than 8 dimensions deep");
    t->ndim = nd;
    /* the byte count, computed without overflow: every factor is checked against what is left of 2^63 */
    unsigned __int128 bytes = st_dtype_size(t->dtype);
    int i = 0;
    for (const cJSON *s = shape->child; s; s = s->next, i++) {
        uint64_t v;
        if (!whole(s, &v)) vx_usage_error("%s: tensor \"%s\": shape entry %d is not a whole number >= 0", origin, n, i);
        t->shape[i] = (int64_t)v;
        bytes *= v;
        if (bytes > ((unsigned __int128)1 << 63)) vx_usage_error("%s: tensor \"%s\": its shape holds more bytes than any "
                                                                 "file", origin, n);
    }
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !whole(off->child, &b) || !whole(off->child->next, &en))
        vx_usage_error("%s: tensor \"%s\": data_offsets must be two whole numbers [begin, end]", origin, n);
    if (en < b) vx_usage_error("%s: tensor \"%s\": data_offsets [%llu, %llu] end before they begin", origin, n,
                               (unsigned long long)b, (unsigned long long)en);
    if ((unsigned __int128)(en - b) != bytes) {
        char sh[128];
        st_shape_text(t->shape, t->ndim, sh, sizeof sh);
        vx_usage_error("%s: tensor \"%s\": dtype %s and shape %s make %llu bytes, its data_offsets [%llu, %llu] hold "
                       "%llu", origin, n, DTYPES[t->dtype].name, sh, (unsigned long long)bytes,
                       (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b));
    }
    t->begin = b;
    t->end = en;
}

static int by_offset(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1) : x->end != y->end ? (x->end < y->end ? -1 : 1) : 0;
}
static int by_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

/* Every byte of the data section belongs to exactly one tensor: sorted by offset, each begins where the one before
 * ends, the first at 0 and the last at the section's end. Names are unique. */
static void check_layout(StFile *f, uint64_t data_bytes) {
    if (f->n == 0) {
        if (data_bytes) vx_usage_error("%s: the header lists no tensor but %llu data bytes follow it", f->origin,
                                       (unsigned long long)data_bytes);
        return;
    }
    const StTensor **s = vx_malloc((size_t)f->n * sizeof *s);
    for (int i = 0; i < f->n; i++) s[i] = &f->t[i];
    qsort(s, (size_t)f->n, sizeof *s, by_name);
    char a[160], b[160];
    for (int i = 1; i < f->n; i++)
        if (strcmp(s[i - 1]->name, s[i]->name) == 0)
            vx_usage_error("%s: the header names tensor \"%s\" twice", f->origin, esc(s[i]->name, a, sizeof a));
    qsort(s, (size_t)f->n, sizeof *s, by_offset);
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        const StTensor *t = s[i];
        if (t->end > data_bytes)
            vx_usage_error("%s: tensor \"%s\" ends at data byte %llu, past the end of the file (its data section holds "
                           "%llu bytes): the file is truncated or its offsets are wrong", f->origin,
                           esc(t->name, a, sizeof a), (unsigned long long)t->end, (unsigned long long)data_bytes);
        if (t->begin < at)
            vx_usage_error("%s: tensors \"%s\" and \"%s\" overlap (bytes %llu..%llu and %llu..%llu of the data)",
                           f->origin, esc(s[i - 1]->name, a, sizeof a), esc(t->name, b, sizeof b),
                           (unsigned long long)s[i - 1]->begin, (unsigned long long)s[i - 1]->end,
                           (unsigned long long)t->begin, (unsigned long long)t->end);
        if (t->begin > at)
            vx_usage_error("%s: data bytes %llu..%llu belong to no tensor (before \"%s\"): the offsets are wrong",
                           f->origin, (unsigned long long)at, (unsigned long long)t->begin, esc(t->name, a, sizeof a));
        at = t->end;
    }
    free(s);
    if (at != data_bytes)
        vx_usage_error("%s: the tensors end at data byte %llu but the file holds %llu: bytes after the last tensor "
                       "belong to none", f->origin, (unsigned long long)at, (unsigned long long)data_bytes);
}

static void parse_metadata(StFile *f, const cJSON *e) {
    if (!cJSON_IsObject(e)) vx_usage_error("%s: \"__metadata__\" is not an object of strings", f->origin);
    const int n = cJSON_GetArraySize(e);
    f->meta_key = vx_calloc((size_t)n + 1, sizeof(char *));
    f->meta_val = vx_calloc((size_t)n + 1, sizeof(char *));
    for (const cJSON *m = e->child; m; m = m->next) {
        char k[96];
        if (!cJSON_IsString(m))
            vx_usage_error("%s: \"__metadata__\" entry \"%s\" is not a string", f->origin, esc(m->string, k, sizeof k));
        for (int i = 0; i < f->n_meta; i++)
            if (strcmp(f->meta_key[i], m->string) == 0)
                vx_usage_error("%s: \"__metadata__\" gives \"%s\" twice", f->origin, esc(m->string, k, sizeof k));
        f->meta_key[f->n_meta] = strdup(m->string);
        f->meta_val[f->n_meta++] = strdup(m->valuestring);
    }
}

void st_parse(const unsigned char *buf, size_t len, const char *origin, StFile *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->origin, sizeof out->origin, "%s", origin);
    out->buf = buf;
    out->len = len;
    if (len < 8)
        vx_usage_error("%s: %zu bytes: too short for a safetensors file (it starts with an 8-byte header length)",
                       origin, len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | buf[i];
    if (hl > len - 8)
        vx_usage_error("%s: the header length %llu runs past the end of the file (%zu bytes): not a safetensors file, "
                       "or a truncated one", origin, (unsigned long long)hl, len);
    if (hl > ST_MAX_HEADER)
        vx_usage_error("%s: the header length %llu is beyond safetensors' bound of %llu bytes", origin,
                       (unsigned long long)hl, ST_MAX_HEADER);
    const char *h = (const char *)buf + 8;
    if (hl < 2 || h[0] != '{')
        vx_usage_error("%s: the header does not start with '{': not a safetensors file", origin);
    if (memchr(h, 0, hl) || !valid_utf8((const unsigned char *)h, hl))
        vx_usage_error("%s: the header is not UTF-8 JSON text (a NUL or an invalid byte in it)", origin);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(h, hl, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        const size_t at = root ? hl : (size_t)(end ? end - h : 0);
        cJSON_Delete(root);
        vx_usage_error("%s: the header is not one JSON object (bad JSON near byte %zu of %llu)", origin, at,
                       (unsigned long long)hl);
    }
    for (const char *p = end; p < h + hl; p++)
        if (*p != ' ') {
            cJSON_Delete(root);
            vx_usage_error("%s: the header has text after its JSON object (byte %zu; only spaces may pad it)", origin,
                           (size_t)(p - h));
        }
    out->data_at = 8 + (size_t)hl;
    const int n = cJSON_GetArraySize(root);
    out->t = vx_calloc((size_t)n + 1, sizeof *out->t);
    int seen_meta = 0;
    /* (an error below exits: the process ends, or a fuzz harness longjmps; the harness frees through st_free) */
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta++) vx_usage_error("%s: the header gives \"__metadata__\" twice", origin);
            parse_metadata(out, e);
            continue;
        }
        char nm[160];
        if (!e->string[0]) vx_usage_error("%s: the header has a tensor with an empty name", origin);
        if (strlen(e->string) > 4096) vx_usage_error("%s: tensor name \"%.60s...\" is over 4096 bytes", origin,
                                                     esc(e->string, nm, sizeof nm));
        StTensor *t = &out->t[out->n];
        t->name = strdup(e->string);
        out->n++;
        parse_tensor(e, origin, t);
    }
    cJSON_Delete(root);
    check_layout(out, (uint64_t)(len - out->data_at));
}

void st_read(const char *path, size_t max_bytes, StFile *out) {
    memset(out, 0, sizeof *out);
    char why[200], p[300];
    vx_escape(path, p, sizeof p);
    if (!fs_input_kind(path, 0, NULL, why, sizeof why)) vx_usage_error("%s: cannot read it: %s", p, why);
    size_t len = 0;
    unsigned char *buf = (unsigned char *)fs_read_file(path, max_bytes, &len);
    if (!buf)
        vx_usage_error("%s: cannot read it (%s)", p, errno == EFBIG ? "larger than any weights file this reads" :
                       strerror(errno));
    st_parse(buf, len, p, out);
    out->owned = buf;
}

void st_free(StFile *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < f->n_meta; i++) free(f->meta_key[i]), free(f->meta_val[i]);
    free(f->meta_key);
    free(f->meta_val);
    free(f->owned);
    memset(f, 0, sizeof *f);
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
    return NULL;
}

/* IEEE half to float, every case (subnormals, infinities, NaN) */
static float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 0x400), (int)e - 25);
    uint32_t bits;
    memcpy(&bits, &v, 4);
    bits |= sign;
    memcpy(&v, &bits, 4);
    return v;
}

void st_to_f32(const StFile *f, const StTensor *t, float *out) {
    const unsigned char *p = f->buf + f->data_at + t->begin;
    const int64_t n = st_count(t);
    for (int64_t i = 0; i < n; i++) { /* little endian in the file, as on every machine this builds for */
        if (t->dtype == ST_F32) memcpy(&out[i], p + 4 * i, 4);
        else if (t->dtype == ST_F64) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            out[i] = (float)d;
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            if (t->dtype == ST_F16) out[i] = half_to_float(h);
            else {
                const uint32_t bits = (uint32_t)h << 16;
                memcpy(&out[i], &bits, 4);
            }
        }
    }
}

/* ---- writing ---------------------------------------------------------------------------------------------- */

struct StWriter {
    StTensor *t;
    unsigned char **data;
    int n, cap;
    char **meta_key, **meta_val;
    int n_meta, cap_meta;
};

StWriter *st_writer_new(void) { return vx_calloc(1, sizeof(StWriter)); }

void st_writer_meta(StWriter *w, const char *key, const char *value) {
    if (w->n_meta == w->cap_meta) {
        w->cap_meta = w->cap_meta ? 2 * w->cap_meta : 8;
        w->meta_key = vx_realloc(w->meta_key, (size_t)w->cap_meta * sizeof(char *));
        w->meta_val = vx_realloc(w->meta_val, (size_t)w->cap_meta * sizeof(char *));
    }
    w->meta_key[w->n_meta] = strdup(key);
    w->meta_val[w->n_meta++] = strdup(value);
}

void st_writer_add(StWriter *w, const char *name, StDtype dt, int ndim, const int64_t *shape, const void *data) {
    if (ndim > ST_MAX_DIMS) vx_fatal("st_writer_add: %d dimensions", ndim);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->t = vx_realloc(w->t, (size_t)w->cap * sizeof *w->t);
        w->data = vx_realloc(w->data, (size_t)w->cap * sizeof *w->data);
    }
    StTensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    const size_t bytes = (size_t)st_count(t) * st_dtype_size(dt);
    t->begin = w->n ? w->t[w->n - 1].end : 0;
    t->end = t->begin + bytes;
    w->data[w->n] = vx_malloc(bytes ? bytes : 1);
    if (bytes) memcpy(w->data[w->n], data, bytes);
    w->n++;
}

unsigned char *st_writer_bytes(const StWriter *w, size_t *len) {
    cJSON *root = cJSON_CreateObject();
    if (w->n_meta) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < w->n_meta; i++) cJSON_AddStringToObject(meta, w->meta_key[i], w->meta_val[i]);
    }
    for (int i = 0; i < w->n; i++) {
        const StTensor *t = &w->t[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dtype));
        cJSON *s = cJSON_AddArrayToObject(e, "shape");
        for (int k = 0; k < t->ndim; k++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)t->shape[k]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)t->begin));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)t->end));
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) vx_fatal("cannot format the safetensors header");
    const size_t jl = strlen(json), hl = (jl + 7) / 8 * 8; /* spaces pad it: the data starts 8-byte aligned */
    const size_t data = w->n ? (size_t)w->t[w->n - 1].end : 0, total = 8 + hl + data;
    unsigned char *buf = vx_malloc(total ? total : 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, jl);
    memset(buf + 8 + jl, ' ', hl - jl);
    free(json);
    for (int i = 0; i < w->n; i++) memcpy(buf + 8 + hl + w->t[i].begin, w->data[i], w->t[i].end - w->t[i].begin);
    *len = total;
    return buf;
}

void st_writer_save(const StWriter *w, const char *path) {
    size_t len;
    unsigned char *buf = st_writer_bytes(w, &len);
    fs_write_atomic(path, buf, len);
    free(buf);
}

void st_writer_free(StWriter *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->t[i].name), free(w->data[i]);
    free(w->t);
    free(w->data);
    for (int i = 0; i < w->n_meta; i++) free(w->meta_key[i]), free(w->meta_val[i]);
    free(w->meta_key);
    free(w->meta_val);
    free(w);
}

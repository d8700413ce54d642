/* weights.c: export to and initialisation from safetensors in PyTorch's names and layouts (see weights.h). */
#include "ckpt/weights.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define BN_COUNTER ".num_batches_tracked"
#define LIST_MAX 8 /* keys listed per kind in the report; the rest counted */

static int two_d(const Model *m) {
    return (m->family == FAMILY_RESNET3D || m->family == FAMILY_DENSENET) && m->cfg.resnet.spatial_dims == 2;
}

int weights_torch_shape(const Model *m, const ParamView *p, int64_t shape[5]) {
    if (p->ndim != 5) {
        for (int i = 0; i < p->ndim; i++) shape[i] = p->shape[i];
        return p->ndim;
    }
    /* ours [out][kd][kh][kw][in] -> [out][in][kd][kh][kw]; a 2-D net's kd is 1 and PyTorch has no such axis */
    shape[0] = p->shape[0];
    shape[1] = p->shape[4];
    const int skip = two_d(m);
    for (int a = skip; a < 3; a++) shape[2 + a - skip] = p->shape[1 + a];
    return 5 - skip;
}

/* A conv weight between our layout (src, packed) and PyTorch's (dst): to_torch 1, or back (0). */
static void permute(const ParamView *p, const float *src, float *dst, int to_torch) {
    if (p->ndim != 5) {
        memcpy(dst, src, (size_t)p->count * sizeof(float));
        return;
    }
    const long O = p->shape[0], K = (long)p->shape[1] * p->shape[2] * p->shape[3], I = p->shape[4];
    for (long o = 0; o < O; o++)
        for (long k = 0; k < K; k++)
            for (long i = 0; i < I; i++) {
                const long ours = (o * K + k) * I + i, torch = (o * I + i) * K + k;
                if (to_torch) dst[torch] = src[ours];
                else dst[ours] = src[torch];
            }
}

/* "layer1.0.bn1.running_mean" -> its BatchNorm's "layer1.0.bn1" (len of the prefix), for num_batches_tracked */
static size_t bn_prefix(const char *buffer_name) {
    const char *dot = strrchr(buffer_name, '.');
    return dot ? (size_t)(dot - buffer_name) : strlen(buffer_name);
}

void weights_export(const Model *m, const float *packed, const float *buffers, int64_t bn_batches, StWriter *w) {
    float *tmp = vx_malloc(sizeof(float));
    long cap = 1;
    for (int i = 0; i < m->n_params; i++) {
        const ParamView *p = &m->params[i];
        if (p->count > cap) tmp = vx_realloc(tmp, (size_t)(cap = p->count) * sizeof(float));
        permute(p, packed + p->packed_offset, tmp, 1);
        int64_t shape[5];
        const int nd = weights_torch_shape(m, p, shape);
        st_writer_add(w, p->name, ST_F32, nd, shape, tmp);
    }
    const int ema = model_ema_view(m);
    for (int i = 0; ema >= 0 && i < m->n_params; i++) { /* the average per parameter, as the parameter */
        const ParamView *p = &m->params[i];
        permute(p, buffers + m->buffers[ema].offset + p->offset, tmp, 1);
        int64_t shape[5];
        const int nd = weights_torch_shape(m, p, shape);
        char name[128];
        snprintf(name, sizeof name, "ema.%s", p->name);
        st_writer_add(w, name, ST_F32, nd, shape, tmp);
    }
    for (int i = 0; i < m->n_buffers; i++) {
        const BufferView *b = &m->buffers[i];
        if (i == ema) continue;
        const int64_t shape[1] = {b->count};
        st_writer_add(w, b->name, ST_F32, 1, shape, buffers + b->offset);
        if (strcmp(b->name + bn_prefix(b->name), ".running_var") == 0) {
            char name[128];
            snprintf(name, sizeof name, "%.*s%s", (int)bn_prefix(b->name), b->name, BN_COUNTER);
            st_writer_add(w, name, ST_I64, 0, NULL, &bn_batches);
        }
    }
    free(tmp);
}

/* Whether key matches one of allow's comma-separated glob patterns. */
static int allowed(const char *allow, const char *key) {
    char pat[CONFIG_STR];
    for (const char *p = allow; *p;) {
        const size_t n = strcspn(p, ",");
        size_t a = 0, b = n;
        while (a < b && p[a] == ' ') a++;
        while (b > a && p[b - 1] == ' ') b--;
        snprintf(pat, sizeof pat, "%.*s", (int)(b - a), p + a);
        if (pat[0] && fnmatch(pat, key, 0) == 0) return 1;
        p += n + (p[n] == ',');
    }
    return 0;
}

/* Whether a num_batches_tracked key belongs to one of the model's BatchNorms. */
static int bn_counter_of_model(const Model *m, const char *key) {
    const size_t n = strlen(key), c = strlen(BN_COUNTER);
    if (n <= c || strcmp(key + n - c, BN_COUNTER) != 0) return 0;
    for (int i = 0; i < m->n_buffers; i++)
        if (bn_prefix(m->buffers[i].name) == n - c && strncmp(m->buffers[i].name, key, n - c) == 0) return 1;
    return 0;
}

/* The differences found, by kind, for the report and the refusal. */
enum { D_MISSING, D_SHAPE, D_UNEXPECTED, D_KINDS };
typedef struct {
    char key[128];
    char detail[320];
} Diff;
typedef struct {
    Diff *d[D_KINDS];
    int n[D_KINDS], refused[D_KINDS];
    int first_kind, first_index; /* the first difference not allowed: d[first_kind][first_index]; kind -1: none */
} Diffs;

static void add_diff(Diffs *ds, int kind, const char *key, const char *detail, const char *allow) {
    ds->d[kind] = vx_realloc(ds->d[kind], (size_t)(ds->n[kind] + 1) * sizeof(Diff));
    Diff *d = &ds->d[kind][ds->n[kind]++];
    vx_escape(key, d->key, sizeof d->key);
    snprintf(d->detail, sizeof d->detail, "%s", detail);
    if (!allowed(allow, key)) {
        ds->refused[kind]++;
        if (ds->first_kind < 0) ds->first_kind = kind, ds->first_index = ds->n[kind] - 1;
    }
}

static void report(const Diffs *ds, const char *what, const char *allow) {
    static const char *const KIND[D_KINDS] = {"missing in the file", "of another shape or dtype in the file",
                                              "in the file but not in the model"};
    for (int k = 0; k < D_KINDS; k++) {
        if (!ds->n[k]) continue;
        char line[1400];
        size_t at = (size_t)snprintf(line, sizeof line, "%s: %d %s%s:", what, ds->n[k], KIND[k],
                                     ds->refused[k] ? "" : k == D_UNEXPECTED ? ", not used (train.init_allow)"
                                                                             : ", initialised fresh (train.init_allow)");
        for (int i = 0; i < ds->n[k] && i < LIST_MAX && at < sizeof line; i++)
            at += (size_t)snprintf(line + at, sizeof line - at, "%s %s %s%s", i ? "," : "", ds->d[k][i].key,
                                   ds->d[k][i].detail, allowed(allow, ds->d[k][i].key) ? "" : " (not allowed)");
        if (ds->n[k] > LIST_MAX && at < sizeof line)
            snprintf(line + at, sizeof line - at, ", and %d more", ds->n[k] - LIST_MAX);
        vx_log("%s\n", line);
    }
}

/* The file's tensor t must hold values a network computes with: finite (a NaN in a weight ends the run at its
 * first step), within +-WEIGHTS_BOUND (finite 3e38 weights overflowed the first convolution's sums to inf, then NaN:
 * predict wrote NaN probabilities for every volume with exit 0), and for a BatchNorm running variance not negative
 * (its square root is NaN). Checked before anything is applied. */
static void check_values(const StFile *f, const StTensor *t) {
    const int64_t n = st_count(t);
    const size_t len = strlen(t->name), tail = strlen("running_var");
    const int variance = len >= tail && strcmp(t->name + len - tail, "running_var") == 0;
    float *v = vx_malloc((size_t)(n ? n : 1) * sizeof(float));
    st_to_f32(f, t, v);
    for (int64_t i = 0; i < n; i++) {
        const int bad = !isfinite(v[i]) || fabsf(v[i]) > WEIGHTS_BOUND || (variance && v[i] < 0);
        if (!bad) continue;
        char k[128];
        const double x = v[i];
        free(v);
        vx_escape(t->name, k, sizeof k);
        if (!isfinite(x))
            vx_usage_error("%s: tensor \"%s\" holds %g at element %lld: these weights diverged or are damaged",
                           f->origin, k, x, (long long)i);
        if (fabs(x) > WEIGHTS_BOUND)
            vx_usage_error("%s: tensor \"%s\" holds %g at element %lld, beyond the +-%g a weight or statistic may "
                           "hold (the network's float32 sums of it overflow to inf and NaN): these weights are damaged "
                           "or not a trained network's", f->origin, k, x, (long long)i, WEIGHTS_BOUND);
        vx_usage_error("%s: tensor \"%s\" holds %g at element %lld: a BatchNorm running variance is never negative "
                       "(its square root is NaN): these weights are damaged", f->origin, k, x, (long long)i);
    }
    free(v);
}

/* Matches one model key (a parameter's or a buffer's) of the torch shape want[nd]: the file's index, or -1 */
static int match(const StFile *f, const char *key, const int64_t *want, int nd, Diffs *ds, const char *allow,
                 char *used) {
    const StTensor *t = st_find(f, key);
    char a[128], b[128], detail[300];
    st_shape_text(want, nd, a, sizeof a);
    if (!t) {
        add_diff(ds, D_MISSING, key, a, allow);
        return -1;
    }
    used[t - f->t] = 1;
    int same = t->ndim == nd;
    for (int i = 0; same && i < nd; i++) same = t->shape[i] == want[i];
    if (!st_is_float(t->dtype) || !same) {
        st_shape_text(t->shape, t->ndim, b, sizeof b);
        snprintf(detail, sizeof detail, "(file %s %s, model F32 %s)", st_dtype_name(t->dtype), b, a);
        add_diff(ds, D_SHAPE, key, detail, allow);
        return -1;
    }
    check_values(f, t);
    return (int)(t - f->t);
}

void weights_read(const char *path, const Model *m, const char *allow, const char *what, int verbose,
                  WeightsInit *out) {
    memset(out, 0, sizeof *out);
    st_read(path, (size_t)1 << 40, &out->file);
    const StFile *f = &out->file;
    out->param_src = vx_malloc((size_t)(m->n_params + 1) * sizeof(int));
    out->buffer_src = vx_malloc((size_t)(m->n_buffers + 1) * sizeof(int));
    char *used = vx_calloc((size_t)f->n + 1, 1);
    Diffs ds = {.first_kind = -1};
    for (int i = 0; i < m->n_params; i++) {
        int64_t shape[5];
        const int nd = weights_torch_shape(m, &m->params[i], shape);
        out->param_src[i] = match(f, m->params[i].name, shape, nd, &ds, allow, used);
        out->loaded += out->param_src[i] >= 0;
    }
    int buffers = 0;
    for (int i = 0; i < m->n_buffers; i++) {
        out->buffer_src[i] = -1;
        if (strcmp(m->buffers[i].name, MODEL_EMA_BUFFER) == 0) continue; /* its parameters' "ema." keys, below */
        const int64_t shape[1] = {m->buffers[i].count};
        out->buffer_src[i] = match(f, m->buffers[i].name, shape, 1, &ds, allow, used);
        out->loaded += out->buffer_src[i] >= 0;
        buffers++;
    }
    out->total = m->n_params + buffers;
    /* the weights' average of an export: "ema.<parameter>" in the parameter's torch shape */
    const int keeps_ema = model_ema_view(m) >= 0;
    out->ema_src = vx_malloc((size_t)(m->n_params + 1) * sizeof(int));
    for (int i = 0; i < m->n_params; i++) {
        char key[128];
        snprintf(key, sizeof key, "ema.%s", m->params[i].name);
        const StTensor *t = st_find(f, key);
        int64_t shape[5];
        const int nd = weights_torch_shape(m, &m->params[i], shape);
        int same = t && st_is_float(t->dtype) && t->ndim == nd;
        for (int a = 0; same && a < nd; a++) same = t->shape[a] == shape[a];
        out->ema_src[i] = -1;
        if (!same) continue; /* absent, or of another shape: left to the unexpected keys' report below */
        used[t - f->t] = 1;
        if (keeps_ema) {
            check_values(f, t);
            out->ema_src[i] = (int)(t - f->t);
            out->ema_loaded++;
        } else {
            out->ema_ignored++;
        }
    }
    int counters = 0;
    for (int i = 0; i < f->n; i++) {
        if (used[i]) continue;
        if (bn_counter_of_model(m, f->t[i].name)) {
            counters++;
            continue;
        }
        char sh[128];
        st_shape_text(f->t[i].shape, f->t[i].ndim, sh, sizeof sh);
        add_diff(&ds, D_UNEXPECTED, f->t[i].name, sh, allow);
    }
    free(used);
    if (verbose) {
        vx_log("%s: %s: %d of the model's %d parameters and buffers loaded%s\n", what, f->origin, out->loaded,
               out->total, counters ? "; num_batches_tracked not used (BatchNorm follows model.bn_momentum)" : "");
        if (out->ema_loaded) vx_log("%s: the weights' average (ema.*) of %d parameters loaded\n", what, out->ema_loaded);
        if (out->ema_ignored)
            vx_log("%s: %d ema.* keys (the weights' average) not used: this run keeps no average (train.ema_decay "
                   "0)\n", what, out->ema_ignored);
        report(&ds, what, allow);
    }
    const char *family = m->cfg.family;
    if (out->loaded == 0) {
        char k[128] = "(none)";
        if (f->n) vx_escape(f->t[0].name, k, sizeof k);
        vx_usage_error("%s: none of the model's %d parameters and buffers is in this file (its first tensor is "
                       "\"%s\", the model's first parameter \"%s\"): weights of another family or model than this "
                       "%s one; use weights of the same network (model.family, depth, channels)", f->origin, out->total,
                       k, m->params[0].name, family);
    }
    if (ds.first_kind >= 0) {
        const Diff *first = &ds.d[ds.first_kind][ds.first_index];
        static const char *const KIND[D_KINDS] = {"is missing in the file", "has another shape or dtype in the file",
                                                  "is in the file but not in the model"};
        const int refused = ds.refused[0] + ds.refused[1] + ds.refused[2];
        char top[128];
        snprintf(top, sizeof top, "%.*s.*", (int)strcspn(first->key, "."), first->key);
        vx_usage_error("%s: key \"%s\" %s %s%s; allow the keys that may differ with --init-allow PATTERNS "
                       "(train.init_allow, e.g. \"%s\": they keep their fresh values) or use weights of this model",
                       f->origin, first->key, KIND[ds.first_kind], first->detail,
                       refused > 1 ? " (and more: listed above)" : "", top);
    }
    for (int k = 0; k < D_KINDS; k++) free(ds.d[k]);
}

/* The file's tensors src[i] (-1: none for parameter i) into the device's packed buffer dst, the others kept. */
static void apply_tensors(const StFile *f, const Model *m, const int *src, float *dst, float *packed) {
    model_download_packed(m, dst, packed);
    float *tmp = vx_malloc(sizeof(float));
    long cap = 1;
    for (int i = 0; i < m->n_params; i++) {
        if (src[i] < 0) continue;
        const ParamView *p = &m->params[i];
        if (p->count > cap) tmp = vx_realloc(tmp, (size_t)(cap = p->count) * sizeof(float));
        st_to_f32(f, &f->t[src[i]], tmp);
        permute(p, tmp, packed + p->packed_offset, 0);
    }
    model_upload_packed(m, packed, dst);
    free(tmp);
}

void weights_apply(const WeightsInit *wi, Model *m) {
    const StFile *f = &wi->file;
    float *packed = vx_malloc((size_t)(m->param_count ? m->param_count : 1) * sizeof(float));
    apply_tensors(f, m, wi->param_src, m->param, packed);
    model_sync_lp(m);
    model_ema_reset(m); /* the average starts at the loaded weights, then takes the file's where it has them */
    if (wi->ema_loaded) apply_tensors(f, m, wi->ema_src, model_ema(m), packed);
    free(packed);
    if (!m->n_buffers) return;
    float *bufs = vx_malloc((size_t)m->buffer_floats * sizeof(float));
    model_download_buffers(m, bufs);
    for (int i = 0; i < m->n_buffers; i++)
        if (wi->buffer_src[i] >= 0) st_to_f32(f, &f->t[wi->buffer_src[i]], bufs + m->buffers[i].offset);
    model_upload_buffers(m, bufs); /* (the average's, downloaded just above, goes back as it was) */
    free(bufs);
}

void weights_free(WeightsInit *wi) {
    st_free(&wi->file);
    free(wi->param_src);
    free(wi->buffer_src);
    free(wi->ema_src);
    memset(wi, 0, sizeof *wi);
}

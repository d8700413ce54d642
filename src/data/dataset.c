/* dataset.c: the sample stream of a run from the phantoms or from files, with its cache (see dataset.h). */
#include "data/dataset.h"
#include "data/dataset_state.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "core/progress.h"
#include "core/stop_signal.h"
#include "core/util.h"
#include "data/affine.h"
#include "data/labels.h"
#include "data/phantom.h"
#include "data/manifest.h"
#include "data/resize.h"
#include "data/transform.h"
#include "data/views.h"
#include "data/volume.h"
#include "common/rng.h"

#define RNG_STREAM_EPOCH 0xE90Cull   /* the order of an epoch's samples */
#define RNG_STREAM_FILES 0xF11Eull   /* the order the window slides along */
#define RNG_STREAM_CROP 0xC409ull    /* a sample's crop, per axis */
#define RNG_STREAM_AUGMENT 0xA06ull  /* a sample's flips and rotation */


/* ---- the order of things ----------------------------------------------------------------------------------- */

static void shuffle(uint32_t *a, uint32_t n, uint64_t seed, uint64_t stream) {
    for (uint32_t i = 0; i < n; i++) a[i] = i;
    for (uint32_t i = n; i > 1; i--) { /* Fisher-Yates on the counter-based hash */
        const uint32_t j = (uint32_t)(vx_hash3(seed, stream, i) % i);
        const uint32_t t = a[i - 1];
        a[i - 1] = a[j], a[j] = t;
    }
}

/* The sample order of epoch e (a permutation of the window), computed once and kept for two epochs. Locked. */
static const uint32_t *epoch_order(Dataset *ds, int64_t e) {
    for (int k = 0; k < 2; k++)
        if (ds->perm[k] && ds->perm_epoch[k] == e) return ds->perm[k];
    const int k = ds->perm_epoch[0] < ds->perm_epoch[1] ? 0 : 1; /* the older one goes */
    if (!ds->perm[k]) ds->perm[k] = vx_malloc((size_t)ds->window * sizeof(uint32_t));
    shuffle(ds->perm[k], (uint32_t)ds->window, (uint64_t)ds->seed ^ (uint64_t)e, RNG_STREAM_EPOCH);
    ds->perm_epoch[k] = e;
    return ds->perm[k];
}

/* The training file of position p of epoch e's window. */
static int file_at(const Dataset *ds, int64_t e, int64_t p) {
    return (int)ds->order[(uint64_t)(e * ds->slide + p) % (uint64_t)ds->n_train];
}

static int in_window(const Dataset *ds, int f, int64_t e) {
    if (e < 0) return 0;
    const int64_t pos = ((int64_t)ds->where[f] - (e * ds->slide) % ds->n_train + ds->n_train) % ds->n_train;
    return pos < ds->window;
}

/* ---- decoding and the cache ------------------------------------------------------------------------------ */

/* " (list.csv row 3)", or " (list.csv row 3, column \"drr_ap\")" for a file of another column (col >= 0: a view) */
static const char *row_of(const Dataset *ds, int m, int col, char *buf, size_t len) {
    if (ds->man.e[m].row > 0 && col >= 0)
        snprintf(buf, len, " (%s row %d, column \"%s\")", ds->man.origin, ds->man.e[m].row, ds->view_col[col]);
    else if (ds->man.e[m].row > 0) snprintf(buf, len, " (%s row %d)", ds->man.origin, ds->man.e[m].row);
    else buf[0] = 0;
    return buf;
}

/* A volume, or one of its views (file: the view's path, col its column; NULL, -1: the volume), that cannot be
 * used: a warning and a count with data.skip_bad (or skip_anyway: data.nonfinite=skip), once per manifest entry,
 * which is then skipped unread; else the end of the run (exit 2), at once when the dataset opens, through
 * dataset_error when a worker met it. `hint` says what to do (NULL: fix it or set data.skip_bad). Called with the
 * lock held, or at open. */
void dataset_bad_file(Dataset *ds, int m, const char *file, int col, const char *why, const char *hint,
                      int skip_anyway, int at_open) {
    char row[2 * CONFIG_STR + 64];
    if (!file) file = ds->man.e[m].path;
    if (!hint) hint = "fix or remove it, or set data.skip_bad=1 to skip such volumes";
    if (!ds->cfg.skip_bad && !skip_anyway) {
        if (at_open) vx_usage_error("%s%s: %s; %s", file, row_of(ds, m, col, row, sizeof row), why, hint);
        if (!ds->error[0])
            snprintf(ds->error, sizeof ds->error, "%s%s: %s; %s", file, row_of(ds, m, col, row, sizeof row), why,
                     hint);
        return;
    }
    if (ds->noted[m] & NOTED_BAD) return; /* warned once: later reads skip it unread (counted as bad_reads) */
    ds->noted[m] |= NOTED_BAD;
    vx_error_line("warning: %s%s: %s; skipped (%s)", file, row_of(ds, m, col, row, sizeof row), why,
                  skip_anyway ? "data.nonfinite=skip" : "data.skip_bad");
    ds->st.skipped++;
}

static void bad_volume(Dataset *ds, int m, const char *why, const char *hint, int skip_anyway, int at_open) {
    dataset_bad_file(ds, m, NULL, -1, why, hint, skip_anyway, at_open);
}

/* data.nonfinite for a decoded volume with non-finite voxels: 1 when it may be used (zero: they are 0 now), 0
 * when it was refused or left out (reported). Locks. */
static int nonfinite_policy(Dataset *ds, int m, Volume *v) {
    if (v->nonfinite == 0) return 1;
    const int64_t n = (int64_t)v->d * v->h * v->w * v->c;
    char why[256];
    snprintf(why, sizeof why, "%lld of its %lld voxels are not finite (NaN or +-Inf, in the file or beyond float32 "
             "once scaled by scl_slope)", (long long)v->nonfinite, (long long)n);
    pthread_mutex_lock(&ds->mu);
    int ok = 0;
    if (strcmp(ds->cfg.nonfinite, "zero") == 0) {
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(v->v[i])) v->v[i] = 0.0f;
        if (!(ds->noted[m] & NOTED_ZEROED)) {
            char row[CONFIG_STR + 64];
            vx_error_line("warning: %s%s: %s; set to 0 (data.nonfinite=zero)", ds->man.e[m].path,
                          row_of(ds, m, -1, row, sizeof row), why);
            ds->noted[m] |= NOTED_ZEROED;
        }
        ok = 1;
    } else {
        bad_volume(ds, m, why, "fix the file, or set data.nonfinite=zero (they become 0) or skip (the volume is left "
                   "out)", strcmp(ds->cfg.nonfinite, "skip") == 0, 0);
    }
    pthread_mutex_unlock(&ds->mu);
    return ok;
}

/* Entry m's two views into *views (malloc'd [2][img][img]; NULL when none are given): 1, or 0 when one cannot be
 * used (reported or counted). */
static int decode_views(Dataset *ds, int m, float **views) {
    *views = NULL;
    if (!ds->view_img) return 1;
    const long plane = (long)ds->view_img * ds->view_img;
    float *out = vx_malloc(2 * (size_t)plane * sizeof(float));
    for (int k = 0; k < 2; k++) {
        char why[512];
        if (!views_read(ds->view_file[2 * m + k], ds->view_img, out + k * plane, why, sizeof why)) {
            pthread_mutex_lock(&ds->mu);
            dataset_bad_file(ds, m, ds->view_file[2 * m + k], k, why, NULL, 0, 0);
            pthread_mutex_unlock(&ds->mu);
            free(out);
            return 0;
        }
    }
    *views = out;
    return 1;
}

/* Decodes and normalises manifest entry m, and reads its views when they are given (views: NULL, or where they go);
 * 0 when it cannot be used (already reported or counted). */
static int decode(Dataset *ds, int m, Volume *v, float *pad, float **views) {
    char why[512];
    pthread_mutex_lock(&ds->mu);
    const int known_bad = ds->noted[m] & NOTED_BAD;
    pthread_mutex_unlock(&ds->mu);
    if (known_bad) return 0;
    const int *dims = ds->dims + 3 * m; /* as probed: data.resize's size comes from them */
    if (!resize_read_sized(ds->man.e[m].path, ds->c, ds->cfg.resize, dims[1], dims[2], ds->size[1], ds->size[2], v,
                           why, sizeof why)) {
        pthread_mutex_lock(&ds->mu);
        bad_volume(ds, m, why, NULL, 0, 0);
        pthread_mutex_unlock(&ds->mu);
        return 0;
    }
    if (!nonfinite_policy(ds, m, v)) {
        volume_free(v);
        return 0;
    }
    if (views && !decode_views(ds, m, views)) {
        volume_free(v);
        return 0;
    }
    transform_normalize(v, ds->cfg.normalize, ds->cfg.clip_low, ds->cfg.clip_high);
    *pad = transform_min(v);
    return 1;
}

static void slot_free(Slot *s) {
    volume_free(&s->vol);
    free(s->views);
    s->views = NULL;
}

/* Training file f's volume: from the cache, or decoded now. 0 when it is bad. Takes a reference (slot_release). */
static int slot_get(Dataset *ds, int f, Slot *out, int *hit) {
    if (!ds->cache) { /* nothing kept: each sample decodes its volume */
        *hit = 0;
        out->refs = 0;
        return decode(ds, ds->train[f], &out->vol, &out->pad, &out->views);
    }
    Slot *s = &ds->slot[f];
    pthread_mutex_lock(&ds->mu);
    while (s->state == SLOT_LOADING) pthread_cond_wait(&ds->cv, &ds->mu);
    *hit = s->state == SLOT_READY;
    if (s->state == SLOT_ABSENT) {
        s->state = SLOT_LOADING;
        pthread_mutex_unlock(&ds->mu);
        Volume v;
        float pad, *views;
        const int ok = decode(ds, ds->train[f], &v, &pad, &views);
        pthread_mutex_lock(&ds->mu);
        s->state = ok ? SLOT_READY : SLOT_BAD;
        if (ok) s->vol = v, s->pad = pad, s->views = views;
        ds->st.decoded += ok;
        pthread_cond_broadcast(&ds->cv);
    }
    const int ok = s->state == SLOT_READY;
    if (ok) {
        s->refs++;
        *out = *s;
    }
    pthread_mutex_unlock(&ds->mu);
    return ok;
}

static void slot_release(Dataset *ds, int f, Slot *held) {
    if (!ds->cache) {
        slot_free(held);
        return;
    }
    pthread_mutex_lock(&ds->mu);
    Slot *s = &ds->slot[f];
    s->refs--;
    /* a volume the window has left goes once nobody reads it */
    if (s->refs == 0 && s->state == SLOT_READY && !in_window(ds, f, ds->epoch_now) &&
        !in_window(ds, f, ds->epoch_now + 1)) {
        slot_free(s);
        s->state = SLOT_ABSENT;
        ds->st.evicted++;
    }
    pthread_mutex_unlock(&ds->mu);
}

/* The background thread: decodes the files queued by enter_epoch, ahead of the samples that need them. */
static void *decode_ahead(void *arg) {
    Dataset *ds = arg;
    pthread_mutex_lock(&ds->mu);
    for (;;) {
        while (!ds->stop && ds->n_todo == 0) pthread_cond_wait(&ds->cv, &ds->mu);
        if (ds->stop) break;
        const int f = ds->todo[--ds->n_todo];
        pthread_mutex_unlock(&ds->mu);
        Slot held;
        int hit;
        if (slot_get(ds, f, &held, &hit)) slot_release(ds, f, &held);
        pthread_mutex_lock(&ds->mu);
    }
    pthread_mutex_unlock(&ds->mu);
    return NULL;
}

/* The first sample of epoch e: the window moves on. Volumes outside the windows of e and e+1 are dropped and the
 * newcomers of e+1 queued for the background thread. Locked. */
static void enter_epoch(Dataset *ds, int64_t e) {
    if (e <= ds->epoch_now) return;
    ds->epoch_now = e;
    ds->st.epochs_entered++;
    for (int f = 0; f < ds->n_train; f++) {
        Slot *s = &ds->slot[f];
        if (s->state == SLOT_READY && s->refs == 0 && !in_window(ds, f, e) && !in_window(ds, f, e + 1)) {
            slot_free(s);
            s->state = SLOT_ABSENT;
            ds->st.evicted++;
        }
    }
    if (ds->slide == 0) return;
    ds->n_todo = 0;
    for (int p = ds->window - ds->slide; p < ds->window; p++) { /* the next window's newcomers */
        const int f = file_at(ds, e + 1, p);
        if (ds->slot[f].state == SLOT_ABSENT) ds->todo[ds->n_todo++] = f;
    }
    if (!ds->ahead_started) {
        if (pthread_create(&ds->ahead, NULL, decode_ahead, ds) != 0) vx_fatal("cannot start the cache's thread");
        ds->ahead_started = 1;
    }
    pthread_cond_broadcast(&ds->cv);
}

/* ---- samples ----------------------------------------------------------------------------------------------- */

/* Phantom `index` of stream `seed` (data.phantom: the volumes' ellipsoids, or chest films) into out, and its labels */
static void phantom_sample(const Dataset *ds, uint64_t seed, uint64_t index, float *out) {
    const int *n = ds->size;
    if (strcmp(ds->cfg.phantom, "chest") == 0)
        phantom_chest_generate(seed, index, n[1], n[2], ds->c, (float)ds->cfg.noise,
                               ds->n_labels ? ds->num_classes : 4, out);
    else
        phantom_generate(seed, index, n[0], n[1], n[2], ds->c, (float)ds->cfg.noise, out);
}

void dataset_phantom_labels(const Dataset *ds, uint64_t seed, uint64_t index, float *labels) {
    if (strcmp(ds->cfg.phantom, "chest") == 0) phantom_chest_labels(seed, index, ds->num_classes, labels);
    else phantom_labels(seed, index, ds->task, ds->num_classes, labels);
}

int dataset_train_sample(Dataset *ds, int64_t i, int augment, float *out, float *labels, float *views) {
    const int *n = ds->size;
    if (!ds->files) {
        phantom_sample(ds, (uint64_t)ds->seed, (uint64_t)i, out);
        if (labels && ds->n_labels) dataset_phantom_labels(ds, (uint64_t)ds->seed, (uint64_t)i, labels);
        return 1;
    }
    const int64_t e = i / ds->window, k = i % ds->window;
    pthread_mutex_lock(&ds->mu);
    if (ds->cache) enter_epoch(ds, e);
    const int64_t p = epoch_order(ds, e)[k];
    pthread_mutex_unlock(&ds->mu);
    /* a bad file (data.skip_bad) hands the sample to the next position of the window */
    Slot held;
    int f = -1, hit = 0;
    for (int64_t tries = 0; f < 0; tries++) {
        pthread_mutex_lock(&ds->mu);
        if (tries == ds->window && !ds->error[0])
            snprintf(ds->error, sizeof ds->error, "%s: every volume of the epoch's window is unusable (data.skip_bad)",
                     ds->man.origin);
        const int failed = ds->error[0] != 0;
        pthread_mutex_unlock(&ds->mu);
        if (failed) return 0;
        f = file_at(ds, e, (p + tries) % ds->window);
        if (!slot_get(ds, f, &held, &hit)) {
            f = -1;
            pthread_mutex_lock(&ds->mu);
            ds->st.bad_reads++; /* the sample moves on to the next file: counted, not warned again */
            pthread_mutex_unlock(&ds->mu);
        }
    }
    pthread_mutex_lock(&ds->mu);
    ds->st.hits += hit;
    ds->st.misses += !hit;
    pthread_mutex_unlock(&ds->mu);
    uint64_t bits[3];
    for (int a = 0; a < 3; a++) bits[a] = vx_hash3((uint64_t)ds->seed, RNG_STREAM_CROP + (uint64_t)a, (uint64_t)i);
    int off[3];
    transform_window(&held.vol, n, bits, off);
    const uint32_t code = augment ? dataset_augment_code(ds, i) : 0;
    if (code == 0) {
        transform_crop(&held.vol, off, n, held.pad, out);
    } else {
        float *tmp = vx_malloc((size_t)n[0] * n[1] * n[2] * ds->c * sizeof(float));
        transform_crop(&held.vol, off, n, held.pad, tmp);
        augment_cpu(n[0], n[1], n[2], ds->c, code, tmp, out);
        free(tmp);
    }
    if (ds->cfg.affine.n == 3 && (ds->cfg.affine.v[0] > 0 || ds->cfg.affine.v[1] > 0 || ds->cfg.affine.v[2] > 0)) {
        /* data.affine (2-D films): a small rotation, zoom and shift of the crop, per sample */
        const AffineParams ap = affine_draw((uint64_t)ds->seed, (uint64_t)i, ds->cfg.affine.v, n[1], n[2]);
        const size_t floats = (size_t)n[1] * n[2] * ds->c;
        float *tmp = vx_malloc(floats * sizeof(float));
        memcpy(tmp, out, floats * sizeof(float));
        affine_apply(tmp, n[1], n[2], ds->c, &ap, held.pad, out);
        free(tmp);
    }
    if (views && ds->view_img) { /* augmented alike, here whichever side augments the volume (they are small) */
        const uint32_t vcode = dataset_augment_code(ds, i);
        if (vcode) views_augment(ds->view_img, vcode, held.views, views);
        else memcpy(views, held.views, (size_t)dataset_views(ds) * sizeof(float));
    }
    slot_release(ds, f, &held);
    if (labels && ds->n_labels) /* the file's own labels: a bad file's sample went to the next one, labels too */
        memcpy(labels, ds->entry_labels + (size_t)ds->train[f] * ds->n_labels, (size_t)ds->n_labels * sizeof(float));
    return 1;
}

const char *dataset_error(Dataset *ds) {
    pthread_mutex_lock(&ds->mu);
    const char *e = ds->error[0] ? ds->error : NULL;
    pthread_mutex_unlock(&ds->mu);
    return e;
}

uint32_t dataset_augment_code(const Dataset *ds, int64_t i) {
    if (!ds->files || !ds->cfg.augment) return 0;
    return augment_code(vx_hash3((uint64_t)ds->seed, RNG_STREAM_AUGMENT, (uint64_t)i), ds->size[1], ds->size[2]);
}

int dataset_val_sample(Dataset *ds, int j, float *out, float *views) {
    const int *n = ds->size;
    if (!ds->files) {
        phantom_sample(ds, (uint64_t)ds->seed ^ VAL_SEED_SALT, (uint64_t)j, out);
        return 1;
    }
    if (j >= ds->n_val) vx_fatal("validation volume %d of %d", j, ds->n_val);
    Volume v;
    float pad, *given;
    if (!decode(ds, ds->val[j], &v, &pad, &given)) { /* counted with data.skip_bad, else the end of the run */
        const char *e = dataset_error(ds);
        if (e) vx_usage_error("%s", e);
        return 0;
    }
    int off[3];
    transform_window(&v, n, NULL, off);
    transform_crop(&v, off, n, pad, out);
    volume_free(&v);
    if (views && given) memcpy(views, given, (size_t)dataset_views(ds) * sizeof(float));
    free(given);
    return 1;
}

/* ---- opening --------------------------------------------------------------------------------------------- */

/* Reads every entry's header: usable ones go to the training or validation list. */
static void probe_all(Dataset *ds, const int max_size[3]) {
    ds->train = vx_malloc((size_t)ds->man.n * sizeof(int));
    ds->val = vx_malloc((size_t)ds->man.n * sizeof(int));
    ds->dims = vx_calloc(3 * (size_t)ds->man.n, sizeof(int));
    for (int m = 0; m < ds->man.n; m++) {
        int dims[4];
        char why[512];
        if (!volume_probe(ds->man.e[m].path, ds->c, dims, why, sizeof why)) {
            bad_volume(ds, m, why, NULL, 0, 1);
            continue;
        }
        memcpy(ds->dims + 3 * m, dims, 3 * sizeof(int)); /* as stored: decode() resizes from these */
        resize_target(ds->cfg.resize, dims[1], dims[2], ds->size[1], ds->size[2], &dims[1], &dims[2]);
        if (!ds->cfg.pad && (dims[0] < max_size[0] || dims[1] < max_size[1] || dims[2] < max_size[2])) {
            snprintf(why, sizeof why, "%d x %d x %d%s is smaller than the input %d x %d x %d and data.pad is 0%s",
                     dims[0], dims[1], dims[2], strcmp(ds->cfg.resize, "none") ? " (resized)" : "", max_size[0],
                     max_size[1], max_size[2], strcmp(ds->cfg.resize, "fit") ? "" : " (data.resize fit pads)");
            bad_volume(ds, m, why, NULL, 0, 1);
            continue;
        }
        const double bytes = (double)dims[0] * dims[1] * dims[2] * dims[3] * sizeof(float);
        if (ds->man.e[m].val) ds->val[ds->n_val++] = m;
        else {
            ds->train[ds->n_train++] = m;
            if (bytes > ds->vol_bytes) ds->vol_bytes = bytes;
        }
    }
    if (ds->n_train == 0) vx_usage_error("%s: no usable training volume", ds->man.origin);
}

/* The cache's bytes against data.cache_max_gib (a volume's bytes include its views once they are given). */
void dataset_check_cache_bound(const Dataset *ds) {
    const double need = dataset_cache_bytes(ds), bound = ds->cfg.cache_max_gib * 1073741824.0;
    if (need > bound)
        vx_exit_error(VX_EXIT_MEMORY, "%s: caching %d volumes of up to %.1f MiB needs %.2f GiB, more than "
                      "data.cache_max_gib = %g; lower data.cache_rate or raise data.cache_max_gib", ds->man.origin,
                      ds->window + ds->slide, ds->vol_bytes / 1048576.0, need / 1073741824.0,
                      ds->cfg.cache_max_gib);
}

Dataset *dataset_open(const DataConfig *cfg, int64_t seed, int channels, const int size[3], const int max_size[3],
                      int verbose) {
    Dataset *ds = vx_calloc(1, sizeof *ds);
    ds->cfg = *cfg;
    ds->seed = seed;
    ds->c = channels;
    memcpy(ds->size, size, sizeof ds->size);
    pthread_mutex_init(&ds->mu, NULL);
    pthread_cond_init(&ds->cv, NULL);
    ds->epoch_now = -1;
    ds->perm_epoch[0] = ds->perm_epoch[1] = -1;
    if (strcmp(cfg->source, "phantom") == 0) return ds;
    ds->files = 1;
    manifest_load(&ds->man, cfg, seed);
    if (verbose) manifest_report(&ds->man); /* once, by rank 0 */
    ds->noted = vx_calloc((size_t)ds->man.n, 1);
    probe_all(ds, max_size);
    ds->cache = cfg->cache_rate > 0;
    ds->window = ds->cache ? (int)lround(cfg->cache_rate * ds->n_train) : ds->n_train;
    if (ds->window < 1) ds->window = 1;
    ds->slide = ds->cache && ds->window < ds->n_train ? (int)lround(cfg->replace_rate * ds->window) : 0;
    ds->order = vx_malloc((size_t)ds->n_train * sizeof(uint32_t));
    ds->where = vx_malloc((size_t)ds->n_train * sizeof(uint32_t));
    shuffle(ds->order, (uint32_t)ds->n_train, (uint64_t)seed, RNG_STREAM_FILES);
    for (int f = 0; f < ds->n_train; f++) ds->where[ds->order[f]] = (uint32_t)f;
    ds->slot = vx_calloc((size_t)ds->n_train, sizeof(Slot));
    ds->todo = vx_malloc((size_t)(ds->slide + 1) * sizeof(int));
    dataset_check_cache_bound(ds);
    if (verbose)
        vx_log("data: %s: %d training and %d validation volumes%s; an epoch is %d samples; cache %s\n", ds->man.origin,
               ds->n_train, ds->n_val, ds->st.skipped ? " (some skipped: data.skip_bad)" : "", ds->window,
               ds->cache ? "on" : "off (every sample decodes its volume)");
    return ds;
}

/* ---- checking every file before the run writes anything --------------------------------------------------- */

typedef struct {
    Dataset *ds;
    int *todo; /* a training file's index f, or -1 - j for validation file j */
    int n, next;
    Progress prog; /* 400 volumes took minutes under load */
} Check;

static void *check_worker(void *arg) {
    Check *c = arg;
    Dataset *ds = c->ds;
    for (;;) {
        pthread_mutex_lock(&ds->mu);
        /* (on SIGINT/SIGTERM the workers end; the caller honours the stop) */
        const int k = c->next < c->n && !ds->error[0] && !stop_signal_requested() ? c->next++ : -1;
        pthread_mutex_unlock(&ds->mu);
        if (k < 0) break;
        const int item = c->todo[k], f = item >= 0 ? item : -1;
        Slot s = {0};
        const int ok = decode(ds, f >= 0 ? ds->train[f] : ds->val[-1 - item], &s.vol, &s.pad, &s.views);
        progress_add(&c->prog, 1);
        if (!ok) continue; /* reported */
        pthread_mutex_lock(&ds->mu);
        if (f >= 0 && ds->cache && in_window(ds, f, 0) && ds->slot[f].state == SLOT_ABSENT) {
            s.state = SLOT_READY;
            ds->slot[f] = s; /* the first window: kept, not decoded again */
            ds->st.decoded++;
        } else {
            slot_free(&s);
        }
        pthread_mutex_unlock(&ds->mu);
    }
    return NULL;
}

void dataset_check_files(Dataset *ds, int rank, int world, int threads, int verbose) {
    if (!ds->files) return;
    const double t0 = vx_now();
    Check c = {.ds = ds, .todo = vx_malloc((size_t)(ds->n_train + ds->n_val) * sizeof(int))};
    if (rank == 0)
        for (int j = 0; j < ds->n_val; j++) c.todo[c.n++] = -1 - j;
    for (int f = rank; f < ds->n_train; f += world) c.todo[c.n++] = f;
    if (threads > c.n) threads = c.n;
    if (threads < 1) threads = 1;
    progress_begin(&c.prog, ds->cache ? "data: decoding and caching the volumes" : "data: decoding the volumes", c.n,
                   "volumes");
    pthread_t *th = vx_malloc((size_t)threads * sizeof *th);
    int started = 0;
    for (; started < threads; started++)
        if (pthread_create(&th[started], NULL, check_worker, &c) != 0) break;
    if (started == 0) check_worker(&c); /* no thread could start: this one does the work */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    free(c.todo);
    progress_end(&c.prog);
    stop_signal_honour("the data checks", "nothing was written");
    if (ds->error[0]) vx_usage_error("%s", ds->error);
    if (verbose)
        vx_log("data: %d volume(s) decoded and checked before the run starts (%.1f s%s)%s\n", c.n, vx_now() - t0,
               world > 1 ? "; each rank checks its share of the training volumes" : "",
               ds->st.skipped ? "; bad ones skipped (warned above)" : "");
}

int dataset_views(const Dataset *ds) { return ds->view_img ? 2 * ds->view_img * ds->view_img : 0; }

void dataset_set_size(Dataset *ds, const int size[3]) { memcpy(ds->size, size, sizeof ds->size); }

int64_t dataset_epoch_samples(const Dataset *ds) { return ds->files ? ds->window : 0; }

int dataset_val_count(const Dataset *ds) { return ds->files ? ds->n_val : -1; }

double dataset_cache_bytes(const Dataset *ds) {
    return ds->files && ds->cache ? (double)(ds->window + ds->slide) * ds->vol_bytes : 0.0;
}

DatasetStats dataset_stats(Dataset *ds) {
    pthread_mutex_lock(&ds->mu);
    const DatasetStats s = ds->st;
    pthread_mutex_unlock(&ds->mu);
    return s;
}

void dataset_close(Dataset *ds) {
    if (ds) free(ds->entry_labels);
    if (!ds) return;
    pthread_mutex_lock(&ds->mu);
    ds->stop = 1;
    pthread_cond_broadcast(&ds->cv);
    pthread_mutex_unlock(&ds->mu);
    if (ds->ahead_started) pthread_join(ds->ahead, NULL);
    for (int f = 0; f < ds->n_train && ds->slot; f++) slot_free(&ds->slot[f]);
    for (int m = 0; ds->view_file && m < 2 * ds->man.n; m++) free(ds->view_file[m]);
    free(ds->view_file);
    free(ds->slot);
    free(ds->todo);
    free(ds->order);
    free(ds->where);
    free(ds->perm[0]);
    free(ds->perm[1]);
    free(ds->train);
    free(ds->val);
    free(ds->noted);
    free(ds->dims);
    manifest_free(&ds->man);
    pthread_mutex_destroy(&ds->mu);
    pthread_cond_destroy(&ds->cv);
    free(ds);
}

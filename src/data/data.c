/* data.c: the phantom generator and the prefetching loader thread (see data.h). */
#include "data/data.h"

#include <math.h>
#include <string.h>

#include "core/util.h"
#include "rng.h"
#include "trace/trace.h"

#define MAX_ELLIPSOIDS 8

typedef struct {
    float cz, cy, cx;       /* centre, in [0,1] coordinates */
    float rz, ry, rx;       /* radii */
    float rot[3][3];        /* rotation into the ellipsoid's axes */
    float intensity[4];     /* per channel (channels beyond 4 reuse them) */
} Ellipsoid;

/* A deterministic uniform in [lo, hi) for draw number k of a volume. */
static float draw(uint64_t seed, uint64_t index, uint64_t k, float lo, float hi) {
    return lo + (hi - lo) * vx_uniform01(vx_hash3(seed, index, k));
}

static void rotation(float a, float b, float g, float r[3][3]) {
    float ca = cosf(a), sa = sinf(a), cb = cosf(b), sb = sinf(b), cg = cosf(g), sg = sinf(g);
    float m[3][3] = {{ca * cb, ca * sb * sg - sa * cg, ca * sb * cg + sa * sg},
                     {sa * cb, sa * sb * sg + ca * cg, sa * sb * cg - ca * sg},
                     {-sb, cb * sg, cb * cg}};
    memcpy(r, m, sizeof m);
}

void phantom_generate(uint64_t seed, uint64_t index, int d, int h, int w, int c, float noise, float *out) {
    uint64_t k = 0;
    int ne = 2 + (int)draw(seed, index, k++, 0, MAX_ELLIPSOIDS - 1);
    Ellipsoid e[MAX_ELLIPSOIDS];
    for (int i = 0; i < ne; i++) {
        e[i].cz = draw(seed, index, k++, 0.25f, 0.75f);
        e[i].cy = draw(seed, index, k++, 0.25f, 0.75f);
        e[i].cx = draw(seed, index, k++, 0.25f, 0.75f);
        /* The first ellipsoid is the large "body"; the rest are smaller structures inside it. */
        float rmin = i == 0 ? 0.30f : 0.06f, rmax = i == 0 ? 0.42f : 0.20f;
        e[i].rz = draw(seed, index, k++, rmin, rmax);
        e[i].ry = draw(seed, index, k++, rmin, rmax);
        e[i].rx = draw(seed, index, k++, rmin, rmax);
        float alpha = draw(seed, index, k++, 0, 6.2831853f), beta = draw(seed, index, k++, 0, 6.2831853f);
        float gamma = draw(seed, index, k++, 0, 6.2831853f);
        rotation(alpha, beta, gamma, e[i].rot);
        for (int ch = 0; ch < 4; ch++) e[i].intensity[ch] = draw(seed, index, k++, i == 0 ? 0.2f : -0.3f, i == 0 ? 0.4f : 0.5f);
    }
    /* Smooth bias field: 1 + a*sin(f.z + phase) products, as MRI coils leave. */
    float fz = draw(seed, index, k++, 1, 4), fy = draw(seed, index, k++, 1, 4), fx = draw(seed, index, k++, 1, 4);
    float pz = draw(seed, index, k++, 0, 6.28f), py = draw(seed, index, k++, 0, 6.28f), px = draw(seed, index, k++, 0, 6.28f);
    float amp = draw(seed, index, k++, 0.05f, 0.2f);
    const float soft = 0.05f; /* edge width, in units of the normalized radius */
    /* Single-threaded on purpose: this runs on the loader thread beside the training step's own OpenMP team. */
    uint64_t noise_stream = vx_mix64(seed ^ 0xA015Eull);

    for (int z = 0; z < d; z++) {
        float Z = (z + 0.5f) / d;
        for (int y = 0; y < h; y++) {
            float Y = (y + 0.5f) / h;
            for (int x = 0; x < w; x++) {
                float X = (x + 0.5f) / w;
                float v[4] = {0, 0, 0, 0};
                for (int i = 0; i < ne; i++) {
                    float dz = Z - e[i].cz, dy = Y - e[i].cy, dx = X - e[i].cx;
                    float a = (e[i].rot[0][0] * dz + e[i].rot[0][1] * dy + e[i].rot[0][2] * dx) / e[i].rz;
                    float b = (e[i].rot[1][0] * dz + e[i].rot[1][1] * dy + e[i].rot[1][2] * dx) / e[i].ry;
                    float g = (e[i].rot[2][0] * dz + e[i].rot[2][1] * dy + e[i].rot[2][2] * dx) / e[i].rx;
                    float r = sqrtf(a * a + b * b + g * g);
                    float inside = 1.0f / (1.0f + expf((r - 1.0f) / soft));
                    for (int ch = 0; ch < 4; ch++) v[ch] += inside * e[i].intensity[ch];
                }
                float bias = (1 + amp * sinf(fz * Z + pz)) * (1 + amp * sinf(fy * Y + py)) * (1 + amp * sinf(fx * X + px));
                long voxel = ((long)z * h + y) * w + x;
                for (int ch = 0; ch < c; ch++) {
                    float n = noise > 0 ? noise * vx_normal(noise_stream, index, (uint64_t)(voxel * c + ch)) : 0.0f;
                    out[voxel * c + ch] = v[ch % 4] * bias + n;
                }
            }
        }
    }
}

void phantom_batch(uint64_t seed, const Config *cfg, int count, int64_t first, float *out) {
    int d = cfg->input_size[0], h = cfg->input_size[1], w = cfg->input_size[2], c = cfg->in_channels;
    for (int b = 0; b < count; b++)
        phantom_generate(seed, (uint64_t)(first + b), d, h, w, c, (float)cfg->data_noise, out + (long)b * d * h * w * c);
}

static void *loader_main(void *arg) {
    Loader *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        int slot = (int)(l->next_produce % l->slots);
        if (l->slot_batch[slot] != -1) { /* ring full: wait for the consumer */
            pthread_cond_wait(&l->cv, &l->mu);
            continue;
        }
        int64_t k = l->next_produce++;
        pthread_mutex_unlock(&l->mu);
        trace_set_thread_name("data loader"); /* fails harmlessly when no trace is recording */
        trace_range_push("generate batch", "dataloader");
        phantom_batch(l->seed, &l->cfg, l->batch, l->first_sample + k * l->stride, l->buf[slot]);
        trace_range_pop();
        pthread_mutex_lock(&l->mu);
        l->slot_batch[slot] = k;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

void loader_start(Loader *l, const Config *cfg, int batch, int64_t first_sample, int64_t stride, const Backend *be) {
    if (first_sample < 0 || batch < 1 || stride < batch)
        vx_fatal("loader_start: first sample %lld, batch %d, stride %lld", (long long)first_sample, batch,
                 (long long)stride);
    memset(l, 0, sizeof *l);
    l->first_sample = first_sample;
    l->stride = stride;
    l->be = be;
    l->cfg = *cfg;
    l->batch = batch;
    l->volume_count = (long)cfg->input_size[0] * cfg->input_size[1] * cfg->input_size[2] * cfg->in_channels;
    l->seed = (uint64_t)cfg->seed;
    l->slots = cfg->prefetch;
    l->buf = vx_calloc((size_t)l->slots, sizeof *l->buf);
    l->slot_batch = vx_calloc((size_t)l->slots, sizeof *l->slot_batch);
    for (int s = 0; s < l->slots; s++) {
        l->buf[s] = be->alloc_host((size_t)batch * l->volume_count * sizeof(float));
        l->slot_batch[s] = -1;
    }
    l->next_produce = l->next_consume = 0;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (pthread_create(&l->thread, NULL, loader_main, l) != 0) vx_fatal("cannot start the data loader thread");
}

const float *loader_next(Loader *l) {
    double t0 = vx_now();
    int slot = (int)(l->next_consume % l->slots);
    pthread_mutex_lock(&l->mu);
    while (l->slot_batch[slot] != l->next_consume) pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
    l->wait_seconds += vx_now() - t0;
    return l->buf[slot];
}

void loader_release(Loader *l) {
    int slot = (int)(l->next_consume % l->slots);
    pthread_mutex_lock(&l->mu);
    l->slot_batch[slot] = -1;
    l->next_consume++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void loader_stop(Loader *l) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    for (int s = 0; s < l->slots; s++) l->be->release_host(l->buf[s]);
    free(l->buf);
    free(l->slot_batch);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
}

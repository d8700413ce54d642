/* attention_cpu_parts.h: what the CPU attention's two paths share (attention_cpu.c: the cpu_sgemm path and the
 * dispatch; attention_cpu_tile.c: the register-tile path): the job and tile sizes, addressing, and the tile path's
 * entry points. Internal to kernels/attention. */
#pragma once
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attention.h"
#include "core/util.h"

#define ATT_BQ 64   /* queries per forward / dq job, and per query tile of the dk dv jobs (times 2 on the sgemm path) */
#define ATT_BK 256  /* keys per backward tile of the dq jobs (and of the sgemm path's dk dv jobs) */
/* keys per forward tile: a row of scores up to this long is one product, one softmax and one product (no online
 * rescaling); 1024 keys x ATT_BQ queries is 256 KiB a thread, inside a core's L2 */
#define ATT_FWD_BK 1024
#define ATT_BKB 128 /* keys per dk dv job (64: 128 x 64 products, the backward 10% slower here) */
/* bytes of probabilities a node may keep from its forward for its backward: vit3d-diffusion-64's 512-token
 * self-attention keeps 12 MiB (batch 2, 6 heads); longer sequences recompute (P grows with tq * tk) */
#define ATT_SAVED_MAX (32L << 20)
/* score elements times d below which a call runs on the calling thread (a parallel region costs more; the jobs,
 * and so the bits, are the same either way) */
#define ATT_PARALLEL_MIN (1L << 20)

/* element (b, token t, head h, column 0) of a [batch][tokens][ld] tensor */
static inline size_t att_at(int b, int tokens, int t, int ld, int h, int d) {
    return ((size_t)b * (size_t)tokens + (size_t)t) * (size_t)ld + (size_t)h * (size_t)d;
}

static inline double att_work(const AttentionShape *s) { return (double)s->batch * s->heads * s->tq * s->tk * s->d; }

static inline float *att_job_alloc(size_t floats) {
    float *p = malloc(floats * sizeof(float));
    if (!p) vx_fatal("attention: out of memory for a %zu-float tile", floats);
    return p;
}

/* dst = beta*dst + acc over `rows` rows of d (dst rows ld apart) */
static inline void att_store_grad(int rows, int d, const float *acc, float *dst, int ld, float beta) {
    for (int r = 0; r < rows; r++) {
        float *o = dst + (size_t)r * ld;
        const float *a = acc + (size_t)r * d;
        if (beta != 0.0f)
            for (int c = 0; c < d; c++) o[c] = beta * o[c] + a[c];
        else memcpy(o, a, sizeof(float) * (size_t)d);
    }
}

/* ---- the register-tile path (attention_cpu_tile.c) ---------------------------------------------------------- */

/* 1 where shape s runs on the tile path: a build with CPU_TILE_W (AVX2 or AVX-512) and d a multiple of it */
int attention_cpu_tile_ok(const AttentionShape *s);
/* floats of P the tile path's forward saves for s (query blocks of ATT_BQ, each [tk][ATT_BQ]), 0 where none */
size_t attention_cpu_tile_saved_floats(const AttentionShape *s);
/* P: saved_floats of the memory for the forward's P, or NULL (the caller, attention_cpu.c, checks that it fits) */
void attention_cpu_tile_forward(const AttentionShape *s, const float *Q, const float *K, const float *V, float *O,
                                float *lse, float *P);
/* delta given and P as the forward left it, or NULL (attention_cpu.c); part: dq's per-key-block partials
 * [b][h][key block][tq][d] for the caller to sum, or NULL for the separate dq pass */
void attention_cpu_tile_backward(const AttentionShape *s, const float *Q, const float *K, const float *V,
                                 const float *dO, const float *lse, const float *delta, const float *P, float *part,
                                 float *dQ, float *dK, float *dV, float beta);

/* optim_spec.c: the optimizer's entries in the op spec table (common/op_spec.h): AdamW (with the low-precision
 * copy in 16-bit storage) and the squared norm, with float64 references. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "common/rng.h"
#include "optim/optim.h"

/* the backend's table of this op, as the entries receive it */
static const OptimOps *table(const OpHead *ops) { return (const OptimOps *)(const void *)ops; }

static const OptimConfig ADAMW_CFG = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
static const double ADAMW_LR = 1e-3;
static const int64_t ADAMW_T = 3;
static const float ADAMW_GS = 0.5f; /* clip / loss scale */
enum { STATE_FLOATS = (sizeof(OptimState) + 3) / 4 };
/* p g m v (float32), the optimizer state (OptimState's bytes), and with a 16-bit storage type the parameters'
 * low-precision copy (act) */
static void adamw_setup(KernelCase *k, const OpHead *ops) {
    const long c = k->count;
    const int lp = k->dtype != DT_F32;
    op_spec_bufs(k, 5 + lp, (long[]){c, c, c, c, STATE_FLOATS, c},
         (KernelBufRole[]){KB_INOUT, KB_IN, KB_INOUT, KB_INOUT, KB_IN, KB_OUT}, lp ? 0x20 : 0, 0);
    k->bytes -= STATE_FLOATS * 4.0;
}
static void adamw_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->adamw(k->count, b[0], b[1], b[2], b[3], b[4], k->dtype, k->nbuf > 5 ? b[5] : NULL);
}
static void adamw_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const OptimConfig *a = &ADAMW_CFG;
    const double bc1 = 1 - pow(a->beta1, (double)ADAMW_T), bc2 = 1 - pow(a->beta2, (double)ADAMW_T);
    for (long i = 0; i < k->count; i++) {
        const double g = (double)in[1][i] * ADAMW_GS;
        double p = in[0][i] * (1 - ADAMW_LR * a->weight_decay);
        const double m = a->beta1 * in[2][i] + (1 - a->beta1) * g, v = a->beta2 * in[3][i] + (1 - a->beta2) * g * g;
        p -= ADAMW_LR * (m / bc1) / (sqrt(v / bc2) + a->eps);
        ref[0][i] = p, ref[2][i] = m, ref[3][i] = v;
        if (k->nbuf > 5) ref[5][i] = p;
    }
}
static void adamw_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 4) { /* what optim_prepare leaves for update t */
        OptimState st = {.lr = ADAMW_LR, .loss_scale = 1.0f, .adam_step = ADAMW_T, .clip = 1.0f};
        st.c = adamw_consts(&ADAMW_CFG, ADAMW_LR, ADAMW_T, ADAMW_GS);
        memset(h, 0, (size_t)count * sizeof(float));
        memcpy(h, &st, sizeof st);
        return;
    }
    for (long i = 0; i < count; i++) {
        const double u = vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
        h[i] = b == 3 ? (float)(1e-4 * u) : (float)(2 * u - 1); /* v >= 0 */
    }
}
static void sumsq_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){k->count, 1}, (KernelBufRole[]){KB_IN, KB_OUT}, 0, 0);
}
static void sumsq_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->sumsq(k->count, b[0], b[1]);
}
static void sumsq_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    double s = 0;
    for (long i = 0; i < k->count; i++) s += (double)in[0][i] * in[0][i];
    ref[1][0] = s;
}

/* sharded (ZeRO): the squared norm of x as two shards' parts joined: x IN, parts (two doubles, as 4 floats: scratch,
 * not compared) IN, out [1] */
static void sumsq_sharded_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 3, (long[]){k->count, 4, 1}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0, 0);
}
static void sumsq_sharded_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const long half = (k->count / 2) & ~15L; /* a shard boundary on a 64-byte one, as the shards have */
    double *parts = b[1];
    table(ops)->sumsq_part(half, b[0], parts);
    table(ops)->sumsq_part(k->count - half, (const float *)b[0] + half, parts + 1);
    table(ops)->sumsq_join(2, parts, b[2]);
}
static void sumsq_sharded_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    double s = 0;
    for (long i = 0; i < k->count; i++) s += (double)in[0][i] * in[0][i];
    ref[2][0] = s;
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp optim_specs[] = {
    {"adamw", OPTIM_ADAMW, 0, 1e-6, adamw_setup, adamw_run, adamw_ref, adamw_fill},
    {"sumsq", OPTIM_SUMSQ, 0, 1e-6, sumsq_setup, sumsq_run, sumsq_ref, NULL},
    {"sumsq_sharded", OPTIM_SUMSQ_SHARDED, 0, 1e-6, sumsq_sharded_setup, sumsq_sharded_run, sumsq_sharded_ref, NULL},
};
const int optim_specs_count = sizeof optim_specs / sizeof optim_specs[0];

/* model_carry.c: parameter-shaped arrays between layouts: the flat buffer and the packed one (model_pack_params),
 * and carried from one model to another of the same family built at another input size (train.stages): every view
 * copied as it is, except a learned position table (the weight of an OP_POS node: vit3d's and vit3d_diffusion's
 * pos_embed [tokens][C]) whose token grid changed, which is resampled trilinearly over the grid (kernels/resample's
 * CPU kernel), as timm's resample_abs_pos_embed does in 2-D (see model.h). */
#include <string.h>

#include "core/util.h"
#include "graph/model.h"
#include "resample/resample.h"

void model_pack_params(const Model *m, const float *flat, float *packed) {
    for (int i = 0; i < m->n_params; i++) {
        const ParamView *p = &m->params[i];
        memcpy(packed + p->packed_offset, flat + p->offset, (size_t)p->count * sizeof(float));
    }
}

void model_unpack_params(const Model *m, const float *packed, float *flat) {
    memset(flat, 0, (size_t)m->param_floats * sizeof(float));
    for (int i = 0; i < m->n_params; i++) {
        const ParamView *p = &m->params[i];
        memcpy(flat + p->offset, packed + p->packed_offset, (size_t)p->count * sizeof(float));
    }
}

/* The OP_POS node whose weight is view v, or NULL. */
static const Node *pos_node_of(const Model *m, int v) {
    for (int i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].kind == OP_POS && m->nodes[i].weight == v) return &m->nodes[i];
    return NULL;
}

int model_same_layout(const Model *a, const Model *b) {
    if (a->n_params != b->n_params || a->param_count != b->param_count) return 0;
    for (int i = 0; i < a->n_params; i++)
        if (a->params[i].count != b->params[i].count || strcmp(a->params[i].name, b->params[i].name) != 0) return 0;
    return 1;
}

/* the kernel's CPU reference (resample.h) on one sample: the arithmetic model.h promises (double, rounded once) */
void model_resample_grid(const float *src, const int gin[3], float *dst, const int gout[3], int c) {
    resample_trilinear_cpu(1, gin, gout, c, src, dst);
}

void model_carry_packed(const Model *from, const float *src, const Model *to, float *dst) {
    VX_CHECK(from->n_params == to->n_params, "stage change: %d parameter views become %d", from->n_params,
             to->n_params);
    for (int i = 0; i < to->n_params; i++) {
        const ParamView *a = &from->params[i], *b = &to->params[i];
        VX_CHECK(strcmp(a->name, b->name) == 0, "stage change: view %d is %s, was %s", i, b->name, a->name);
        if (a->count == b->count) {
            memcpy(dst + b->packed_offset, src + a->packed_offset, (size_t)b->count * sizeof(float));
            continue;
        }
        const Node *pa = pos_node_of(from, i), *pb = pos_node_of(to, i);
        VX_CHECK(pa && pb, "stage change: %s has %ld floats at one size and %ld at the other, and is no position "
                 "table", b->name, a->count, b->count);
        const Dims da = from->tensors[pa->out].dims, db = to->tensors[pb->out].dims;
        VX_CHECK(da.c == db.c && (long)da.d * da.h * da.w * da.c == a->count && (long)db.d * db.h * db.w * db.c == b->count,
                 "stage change: %s's grid does not match its view", b->name);
        model_resample_grid(src + a->packed_offset, (const int[3]){da.d, da.h, da.w}, dst + b->packed_offset,
                            (const int[3]){db.d, db.h, db.w}, db.c);
    }
}

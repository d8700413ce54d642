/* patch.h: a volume's patches as tokens and back (ViT's patchify / unpatchify), NDHWC, a pure permutation:
 *   volume  [n][d][h][w][c]
 *   tokens  [n][(d/pd)(h/ph)(w/pw)][pd*ph*pw*c]   token (zd, zh, zw) in row-major order, inside it (kd, kh, kw, c)
 *   to_tokens  tokens[n][t][(kd*ph + kh)*pw*c + kw*c + ch] = volume[n][zd*pd + kd][zh*ph + kh][zw*pw + kw][ch]
 *   to_volume  its inverse.
 * The order inside a token is conv3d's filter order ([c_out][kd][kh][kw][c_in]), so to_tokens followed by a GEMM with
 * the filter as [c_out][pd*ph*pw*c] is conv3d with kernel = stride = patch (what the patch embedding is, run by
 * conv3d itself), and the token order is conv3d's output order: that conv's output [n][od][oh][ow][hidden] already
 * is [n][tokens][hidden]. to_volume is the un-patchify after the last Linear (tokens of pd*ph*pw*c values); each
 * function is the other's backward. A 2-D view is a volume with d = pd = 1.
 * beta 0 overwrites the output without reading it (NaN stays out), 1 adds to it (a gradient's second writer).
 * Storage: shape.dtype for both; the CPU float32, CUDA every type, one element moved per thread (adds in float). */
#pragma once
#include "common/dtype.h"
#include "common/op.h"
#include "common/vx_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, d, h, w, c;
    int p[3];    /* patch size per axis: d, h, w (each dividing its axis) */
    DType dtype; /* storage of volume and tokens */
} PatchShape;

/* The op's sub-table (kernels/backend/ops.def): be->patch->... */
enum { PATCH_TO_TOKENS, PATCH_TO_VOLUME }; /* its functions, for supports() */
typedef struct PatchOps {
    OpHead head;
    void (*to_tokens)(const PatchShape *s, const void *volume, void *tokens, float beta);
    void (*to_volume)(const PatchShape *s, const void *tokens, void *volume, float beta);
} PatchOps;
extern const PatchOps patch_ops_cpu;
extern const PatchOps patch_ops_cuda; /* CUDA builds only */

static inline long patch_count(const PatchShape *s) { return (long)s->n * s->d * s->h * s->w * s->c; }
static inline long patch_tokens(const PatchShape *s) {
    return (long)(s->d / s->p[0]) * (s->h / s->p[1]) * (s->w / s->p[2]);
}
static inline int patch_token_dim(const PatchShape *s) { return s->p[0] * s->p[1] * s->p[2] * s->c; }
/* "" when s is valid, else what is wrong (one line) */
static inline const char *patch_shape_error(const PatchShape *s) {
    if (s->n < 0 || s->d < 1 || s->h < 1 || s->w < 1 || s->c < 1) return "empty or negative volume sizes";
    if (s->p[0] < 1 || s->p[1] < 1 || s->p[2] < 1) return "a patch size below 1";
    if (s->d % s->p[0] || s->h % s->p[1] || s->w % s->p[2]) return "a patch size that does not divide its axis";
    return "";
}
/* the volume element of element e of the tokens (both row-major), the one index map both backends use */
VX_HD long patch_volume_index(const PatchShape *s, long e) {
    const int c = s->c, pd = s->p[0], ph = s->p[1], pw = s->p[2];
    const int gd = s->d / pd, gh = s->h / ph, gw = s->w / pw;
    const long per = (long)pd * ph * pw * c;
    long t = e / per, in = e % per;
    const int ch = (int)(in % c), kw = (int)(in / c % pw), kh = (int)(in / c / pw % ph), kd = (int)(in / c / pw / ph);
    const int zw = (int)(t % gw), zh = (int)(t / gw % gh), zd = (int)(t / gw / gh % gd);
    const long b = t / gw / gh / gd;
    return ((((b * s->d + zd * pd + kd) * s->h) + zh * ph + kh) * s->w + zw * pw + kw) * c + ch;
}

#ifdef __cplusplus
}
#endif

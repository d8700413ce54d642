/* build_vit3d.c: the vit3d family (issue 21's skeleton): a 3-D ViT over the volume's patches that reconstructs the
 * volume, parameter names as timm's / DiT's:
 *   x [n][D][H][W][c] -> patch_embed.proj: conv3d with kernel = stride = patch (its NDHWC output is [n][tokens][C])
 *   -> + pos_embed [tokens][C] (learned)
 *   -> blocks.i: x + attn.proj(attention(attn.qkv(norm1(x))));  x + mlp.fc2(gelu(mlp.fc1(norm2(x))))
 *   -> norm -> head: Linear to p^3 c per token -> un-patchify (patch.h) -> recon [n][D][H][W][c]
 *   loss: model.loss (L1 or MSE) of recon against the float32 input, as ae3d's
 * The denoiser (noise and timestep in, adaLN-Zero modulation, cross-attention to the X-ray views) is
 * build_vit3d_diffusion.c, on the pieces build_vit.h shares from here. */
#include <math.h>
#include <stdio.h>

#include "core/util.h"
#include "families/build.h"
#include "families/build_vit.h"

static int rows_of(const Model *m, int t) { return (int)(m->tensors[t].count / m->tensors[t].dims.c); }

int vit_layernorm(Model *m, const char *name, int x, int affine) {
    const Dims d = m->tensors[x].dims;
    Node *nd = build_node(m, OP_LAYERNORM, name, x, -1, d);
    nd->ln = (LayerNormShape){.rows = rows_of(m, x), .c = d.c, .eps = (float)m->cfg.vit.ln_eps, .affine = affine,
                              .dtype = m->dtype};
    if (affine) {
        nd->weight = build_param(m, name, "weight", 1, (int[]){d.c});
        nd->bias = build_param(m, name, "bias", 1, (int[]){d.c});
    }
    return nd->out;
}
static int layernorm(Model *m, const char *name, int x) { return vit_layernorm(m, name, x, 1); }

int vit_linear(Model *m, const char *name, int x, int out, int gelu) {
    const Dims d = m->tensors[x].dims;
    const int rows = rows_of(m, x);
    Node *nd = build_node(m, OP_GEMM, name, x, -1, (Dims){d.n, d.d, d.h, d.w, out});
    nd->gemm = (GemmShape){.batch = 1, .m = rows, .n = out, .k = d.c, .trans_b = 1, .stride_a = (long)rows * d.c,
                           .stride_b = (long)out * d.c, .stride_c = (long)rows * out, .alpha = 1.0f,
                           .epilogue = gelu ? GEMM_EPI_GELU_ERF : GEMM_EPI_NONE, .dtype = m->dtype,
                           .sample_rows = rows / d.n, .bf16_math = m->bf16_gemm};
    nd->weight = build_param(m, name, "weight", 2, (int[]){out, d.c});
    nd->bias = build_param(m, name, "bias", 1, (int[]){out});
    return nd->out;
}

static int linear(Model *m, const char *name, int x, int out, int gelu) { return vit_linear(m, name, x, out, gelu); }

int vit_add(Model *m, const char *name, int a, int b) {
    return build_node(m, OP_ADD, name, a, b, m->tensors[a].dims)->out;
}
static int add(Model *m, const char *name, int a, int b) { return vit_add(m, name, a, b); }

void vit_checkpoint_block(Model *m, int first) {
    build_segment(m, first);
}

static int block(Model *m, int i, int x) {
    const ViTConfig *v = &m->cfg.vit;
    const Dims d = m->tensors[x].dims;
    const int first = m->n_nodes;
    char p[48], name[96];
    snprintf(p, sizeof p, "blocks.%d", i);
#define NAME(s) (snprintf(name, sizeof name, "%s.%s", p, s), name)
    int h = layernorm(m, NAME("norm1"), x);
    h = linear(m, NAME("attn.qkv"), h, 3 * d.c, 0);
    Node *at = build_node(m, OP_ATTENTION, NAME("attn"), h, -1, d);
    const int tokens = d.d * d.h * d.w, hd = d.c / v->heads;
    at->att = (AttentionShape){.batch = d.n, .heads = v->heads, .tq = tokens, .tk = tokens, .d = hd, .ld_q = 3 * d.c,
                               .ld_k = 3 * d.c, .ld_v = 3 * d.c, .ld_o = d.c, .scale = 1.0f / sqrtf((float)hd),
                               .dtype = m->dtype};
    h = linear(m, NAME("attn.proj"), at->out, d.c, 0);
    x = add(m, NAME("add1"), x, h);
    h = layernorm(m, NAME("norm2"), x);
    h = linear(m, NAME("mlp.fc1"), h, v->mlp_ratio * d.c, 1);
    h = linear(m, NAME("mlp.fc2"), h, d.c, 0);
    x = add(m, NAME("add2"), x, h);
    vit_checkpoint_block(m, first); /* norm1 .. add2: only x comes in from outside */
    return x;
#undef NAME
}

void build_vit3d(Model *m) {
    const ModelConfig *c = &m->cfg;
    const ViTConfig *v = &c->vit;
    const int *ps = v->patch_size;
    VX_CHECK(v->hidden_size >= 1 && v->heads >= 1 && v->hidden_size % v->heads == 0 && v->blocks >= 0 &&
                 v->mlp_ratio >= 1,
             "vit3d: hidden_size %d must be a positive multiple of heads %d (blocks %d, mlp_ratio %d)", v->hidden_size,
             v->heads, v->blocks, v->mlp_ratio);
    for (int a = 0; a < 3; a++)
        VX_CHECK(ps[a] >= 1 && c->input_size[a] % ps[a] == 0, "vit3d: patch_size[%d] = %d does not divide %d", a,
                 ps[a], c->input_size[a]);
    build_input(m);
    int x = build_conv(m, "patch_embed.proj", m->t_input_lp, c->in_channels, v->hidden_size, ps, ps,
                       (const int[3]){0, 0, 0}, 1);
    const Dims d = m->tensors[x].dims;
    Node *pos = build_node(m, OP_POS, "pos_embed", x, -1, d);
    pos->weight = build_param(m, "pos_embed", "weight", 2, (int[]){d.d * d.h * d.w, d.c});
    x = pos->out;
    for (int i = 0; i < v->blocks; i++) x = block(m, i, x);
    x = layernorm(m, "norm", x);
    const int per_token = ps[0] * ps[1] * ps[2] * c->in_channels;
    x = linear(m, "head", x, per_token, 0);
    Node *un = build_node(m, OP_UNPATCH, "unpatchify", x, -1,
                          (Dims){m->batch, c->input_size[0], c->input_size[1], c->input_size[2], c->in_channels});
    un->patch = (PatchShape){.n = m->batch, .d = c->input_size[0], .h = c->input_size[1], .w = c->input_size[2],
                             .c = c->in_channels, .p = {ps[0], ps[1], ps[2]}, .dtype = m->dtype};
    m->t_recon = un->out;
}

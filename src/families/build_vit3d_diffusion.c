/* build_vit3d_diffusion.c: the vit3d_diffusion family (issue 21): a DiT-style denoiser of the volume, conditioned on
 * the diffusion timestep by adaLN-Zero and on two X-ray views (DRRs) by cross-attention, predicting v (or eps):
 *   x0 [n][D][H][W][c] (the data) -> q_sample: x_t = a x0 + s eps, the target v = a eps - s x0 (model_exec_diff.c)
 *   x0 -> xray_views: two DRRs [n][2][img][img] (the conditioning, rendered from the volume on the device)
 *        -> view_embed.proj: a 2-D patch conv (1 x p x p, shared by both views) -> + view_pos_embed [2 g^2][C]
 *   t  -> t_embedder: sinusoidal (256) -> mlp.0 Linear -> SiLU -> mlp.2 Linear = c [n][C];  SiLU(c) feeds every
 *        adaLN_modulation Linear (zero-initialised: each block starts as the identity, DiT's "Zero")
 *   with xray.backproject: the views -> view_backprojection [n][D][H][W][2] (each voxel's AP and lateral ray value,
 *        drr.h) -> concatenated after x_t's channels (x_t_views): what patch_embed reads (the lifting of X-ray to CT
 *        networks: the denoiser sees along which rays each voxel lies, not only which view tokens to attend)
 *   in a cascade's later stage (model.cascade_n > 0): the earlier stage's network's estimate of x0 at its own grid,
 *        resampled to this one (cascade_condition, OP_CASCADE: model_build.c), concatenated after those channels
 *   x_t -> patch_embed.proj (conv, kernel = stride = patch) -> + pos_embed -> blocks.i:
 *        mod = adaLN_modulation(SiLU c) [n][6C]: shift, scale, gate of the attention, then of the MLP
 *        x = x + gate_msa * attn(modulate(norm1(x), shift_msa, scale_msa))        (norm1, norm2: no affine)
 *        x = x + cross_attn.proj(attention(cross_attn.q(norm_cross(x)), cross_attn.kv(view tokens)))
 *        x = x + gate_mlp * mlp(modulate(norm2(x), shift_mlp, scale_mlp))
 *   -> final_layer: modulate(norm_final(x), shift, scale from its own adaLN) -> linear (zero-initialised) to p^3 c
 *   -> un-patchify: the prediction [n][D][H][W][c] (t_recon), regressed on the target by the loss (model_exec.c). */
#include <math.h>
#include <stdio.h>

#include "core/util.h"
#include "families/build.h"
#include "families/build_vit.h"

#define TIME_FREQ_DIM 256 /* DiT's frequency_embedding_size */

static Node *conditioned(Model *m, OpKind kind, const char *name, int x, int branch, int mod, int chunk) {
    Node *nd = build_node(m, kind, name, x, branch, m->tensors[x].dims);
    nd->in[2] = mod;
    nd->chunk = chunk;
    return nd;
}

/* modulate(x, shift = mod[chunk], scale = mod[chunk + 1]) */
static int modulate(Model *m, const char *name, int x, int mod, int chunk) {
    return conditioned(m, OP_MODULATE, name, x, -1, mod, chunk)->out;
}
/* res + mod[chunk] * branch */
static int gate(Model *m, const char *name, int res, int branch, int mod, int chunk) {
    return conditioned(m, OP_GATE, name, res, branch, mod, chunk)->out;
}

static AttentionShape attention_of(const Model *m, int tq, int tk, int ld_q, int ld_kv) {
    const ViTConfig *v = &m->cfg.vit;
    const int hd = v->hidden_size / v->heads;
    return (AttentionShape){.batch = m->batch, .heads = v->heads, .tq = tq, .tk = tk, .d = hd, .ld_q = ld_q,
                            .ld_k = ld_kv, .ld_v = ld_kv, .ld_o = v->hidden_size, .scale = 1.0f / sqrtf((float)hd),
                            .dtype = m->dtype};
}

static int block(Model *m, int i, int x, int cond, int views) {
    const int C = m->cfg.vit.hidden_size;
    const Dims d = m->tensors[x].dims;
    const int tokens = d.d * d.h * d.w, view_tokens = (int)(m->tensors[views].count / m->batch / C);
    const int first = m->n_nodes;
    char p[48], name[128];
    snprintf(p, sizeof p, "blocks.%d", i);
#define NAME(s) (snprintf(name, sizeof name, "%s.%s", p, s), name)
    const int mod = vit_linear(m, NAME("adaLN_modulation.1"), cond, 6 * C, 0);
    int h = modulate(m, NAME("modulate_msa"), vit_layernorm(m, NAME("norm1"), x, 0), mod, 0);
    h = vit_linear(m, NAME("attn.qkv"), h, 3 * C, 0);
    Node *at = build_node(m, OP_ATTENTION, NAME("attn"), h, -1, d);
    at->att = attention_of(m, tokens, tokens, 3 * C, 3 * C);
    h = vit_linear(m, NAME("attn.proj"), at->out, C, 0);
    x = gate(m, NAME("gate_msa"), x, h, mod, 2);
    /* cross-attention to the views: queries from the volume's tokens, keys and values from the views' */
    h = vit_linear(m, NAME("cross_attn.q"), vit_layernorm(m, NAME("norm_cross"), x, 1), C, 0);
    const int kv = vit_linear(m, NAME("cross_attn.kv"), views, 2 * C, 0);
    Node *ca = build_node(m, OP_ATTENTION, NAME("cross_attn"), h, kv, d);
    ca->att = attention_of(m, tokens, view_tokens, C, 2 * C);
    h = vit_linear(m, NAME("cross_attn.proj"), ca->out, C, 0);
    x = vit_add(m, NAME("add_cross"), x, h);
    h = modulate(m, NAME("modulate_mlp"), vit_layernorm(m, NAME("norm2"), x, 0), mod, 3);
    h = vit_linear(m, NAME("mlp.fc1"), h, m->cfg.vit.mlp_ratio * C, 1);
    h = vit_linear(m, NAME("mlp.fc2"), h, C, 0);
    x = gate(m, NAME("gate_mlp"), x, h, mod, 5);
    vit_checkpoint_block(m, first); /* adaLN_modulation .. gate_mlp: x, the condition and the view tokens come in */
    return x;
#undef NAME
}

/* t -> sinusoidal embedding -> Linear -> SiLU -> Linear: c [n][C]; returns SiLU(c), what every adaLN reads */
static int timestep_condition(Model *m) {
    const int C = m->cfg.vit.hidden_size;
    Node *te = build_node(m, OP_TIMESTEP, "t_embedder.freq", m->t_input, -1, (Dims){m->batch, 1, 1, 1, TIME_FREQ_DIM});
    m->tensors[te->out].no_grad = 1;
    int c = vit_linear(m, "t_embedder.mlp.0", te->out, C, 0);
    c = build_node(m, OP_SILU, "t_embedder.mlp.1", c, -1, m->tensors[c].dims)->out;
    c = vit_linear(m, "t_embedder.mlp.2", c, C, 0);
    return build_node(m, OP_SILU, "adaLN_silu", c, -1, m->tensors[c].dims)->out;
}

/* x0 -> two DRRs -> 2-D patch tokens of both views [n][2 g^2][C] with their positions */
static int view_tokens(Model *m) {
    const DiffusionConfig *df = &m->cfg.diff;
    const int C = m->cfg.vit.hidden_size, img = df->img_size, p = df->patch_size, g = img / p;
    Node *dr = build_node(m, OP_DRR, "xray_views", m->t_input, -1, (Dims){2 * m->batch, 1, img, img, 1});
    m->tensors[dr->out].dtype = DT_F32; /* the projection loss's target too */
    m->tensors[dr->out].no_grad = 1;
    m->t_views = dr->out;
    int v = dr->out;
    if (m->dtype != DT_F32) {
        Node *cast = build_node(m, OP_CAST, "xray_views_cast", v, -1, m->tensors[v].dims);
        m->tensors[cast->out].no_grad = 1;
        v = cast->out;
    }
    v = build_conv(m, "view_embed.proj", v, 1, C, (const int[3]){1, p, p}, (const int[3]){1, p, p},
                   (const int[3]){0, 0, 0}, 1);
    Node *pos = build_node(m, OP_POS, "view_pos_embed", v, -1, (Dims){m->batch, 2, g, g, C});
    pos->weight = build_param(m, "view_pos_embed", "weight", 2, (int[]){2 * g * g, C});
    return pos->out;
}

void build_vit3d_diffusion(Model *m) {
    const ModelConfig *c = &m->cfg;
    const ViTConfig *v = &c->vit;
    const int *ps = v->patch_size, C = v->hidden_size;
    VX_CHECK(C >= 1 && v->heads >= 1 && C % v->heads == 0 && v->blocks >= 0 && v->mlp_ratio >= 1,
             "vit3d_diffusion: hidden_size %d must be a positive multiple of heads %d", C, v->heads);
    VX_CHECK(c->diff.patch_size >= 1 && c->diff.img_size % c->diff.patch_size == 0,
             "vit3d_diffusion: xray.patch_size %d does not divide xray.img_size %d", c->diff.patch_size,
             c->diff.img_size);
    for (int a = 0; a < 3; a++)
        VX_CHECK(ps[a] >= 1 && c->input_size[a] % ps[a] == 0, "vit3d_diffusion: patch_size[%d] = %d does not divide %d",
                 a, ps[a], c->input_size[a]);
    /* the data: float32 [n][D][H][W][c], read by the noise and the views only (no low-precision copy of it) */
    m->t_input = m->t_input_lp = build_tensor(m, (Dims){m->batch, c->input_size[0], c->input_size[1], c->input_size[2],
                                                        c->in_channels}, -1, DT_F32);
    /* the noisy volume, in the model's type, from the float32 data (no gradient: it is data) */
    Node *q = build_node(m, OP_QSAMPLE, "q_sample", m->t_input, -1, m->tensors[m->t_input].dims);
    m->tensors[q->out].no_grad = 1;
    m->t_xt = q->out;
    const int views = view_tokens(m);
    const int cond = timestep_condition(m);
    int parts[3] = {m->t_xt}, n_parts = 1, in_c = c->in_channels;
    if (c->diff.backproject) {
        Dims bd = m->tensors[m->t_xt].dims;
        bd.c = 2;
        Node *bp = build_node(m, OP_BACKPROJECT, "view_backprojection", m->t_views, -1, bd);
        m->tensors[bp->out].no_grad = 1;
        parts[n_parts++] = bp->out;
        in_c += 2;
    }
    if (c->cascade_n > 0) { /* a cascade's later stage: the earlier network's estimate of x0 (model_build.c) */
        Node *cc = build_node(m, OP_CASCADE, "cascade_condition", m->t_input, -1, m->tensors[m->t_xt].dims);
        m->tensors[cc->out].no_grad = 1;
        m->t_cascade = cc->out;
        parts[n_parts++] = cc->out;
        in_c += c->in_channels;
    }
    int in = m->t_xt;
    if (n_parts > 1) {
        in = build_concat(m, n_parts == 2 && c->diff.backproject ? "x_t_views" : "x_t_conditions", parts, n_parts);
        m->tensors[in].no_grad = 1;
    }
    int x = build_conv(m, "patch_embed.proj", in, in_c, C, ps, ps, (const int[3]){0, 0, 0}, 1);
    const Dims d = m->tensors[x].dims;
    Node *pos = build_node(m, OP_POS, "pos_embed", x, -1, d);
    pos->weight = build_param(m, "pos_embed", "weight", 2, (int[]){d.d * d.h * d.w, C});
    x = pos->out;
    for (int i = 0; i < v->blocks; i++) x = block(m, i, x, cond, views);
    const int mod = vit_linear(m, "final_layer.adaLN_modulation.1", cond, 2 * C, 0);
    x = modulate(m, "final_layer.modulate", vit_layernorm(m, "final_layer.norm_final", x, 0), mod, 0);
    x = vit_linear(m, "final_layer.linear", x, ps[0] * ps[1] * ps[2] * c->in_channels, 0);
    Node *un = build_node(m, OP_UNPATCH, "unpatchify", x, -1, m->tensors[m->t_input].dims);
    un->patch = (PatchShape){.n = m->batch, .d = c->input_size[0], .h = c->input_size[1], .w = c->input_size[2],
                             .c = c->in_channels, .p = {ps[0], ps[1], ps[2]}, .dtype = m->dtype};
    m->t_recon = un->out;
}

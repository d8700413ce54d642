"""vit3d_diffusion in PyTorch, written out op by op from voxscale's contracts (src/model/build_vit3d_diffusion.c, the
kernels' headers), in float64: the reference `voxscale probe` is compared with (tests/integration/test_vit3d_diffusion.py).

It reads a probe (PREFIX.json / PREFIX.bin: the clean volumes x0, the noisy x_t, the target, the views, the
prediction, the per-sample coefficients, the parameters and their gradients, all in voxscale's layouts: volumes
[N][D][H][W][C], conv weights [out][kd][kh][kw][in], Linear weights [out][in]), recomputes the views from x0 (the
DRR: a parallel-beam line integral, bilinear resampling as F.interpolate(align_corners=False), Beer-Lambert), the
noise from x_t, the target from both, then the prediction, the diffusion loss, the projection loss and every
parameter's gradient by autograd, and prints the largest differences as JSON. Debian's torch has no fused SDPA:
attention is written out (softmax of the scores). Usage: vit3d_diffusion.py PREFIX"""
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F


def load(prefix):
    meta = json.load(open(prefix + ".json"))
    raw = np.fromfile(prefix + ".bin", dtype=np.float32)
    return meta, raw


def array(meta, raw, key, count):
    at = int(meta[key])
    return torch.from_numpy(raw[at:at + count].astype(np.float64))


def drr(vol, view, img, mu_scale):
    """vol [N][D][H][W] -> [N][img][img]: view 0 along H (image over D x W), view 1 along W (over D x H)"""
    along = vol.shape[2] if view == 0 else vol.shape[3]
    line = mu_scale * (1.0 / along) * (vol.sum(dim=2) if view == 0 else vol.sum(dim=3))  # [N][D][cols]
    lr = F.interpolate(line.unsqueeze(1), size=(img, img), mode="bilinear", align_corners=False).squeeze(1)
    return 1.0 - torch.exp(-lr)


def views_of(vol, img, mu_scale):
    return torch.stack([drr(vol, 0, img, mu_scale), drr(vol, 1, img, mu_scale)], dim=1)  # [N][2][img][img]


def timestep_embedding(t, dim, max_period=10000.0):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64) / half)
    args = t[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=1)
    return emb


def linear(p, name, x):
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def attention(q, k, v, heads):
    n, tq, c = q.shape
    d = c // heads
    q = q.reshape(n, tq, heads, d).transpose(1, 2)
    k = k.reshape(n, k.shape[1], heads, d).transpose(1, 2)
    v = v.reshape(n, v.shape[1], heads, d).transpose(1, 2)
    s = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
    return (s @ v).transpose(1, 2).reshape(n, tq, c)


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


def forward(p, cfg, x_t, views, t):
    m, df, xr = cfg["model"], cfg["diffusion"], cfg["xray"]
    C, heads, eps = m["hidden_size"], m["heads"], m["ln_eps"]
    pd, ph, pw = m["patch_size"]
    n, D, H, W, c = x_t.shape
    ln = lambda x: F.layer_norm(x, (C,), eps=eps)
    # the volume's patches: a conv with kernel = stride = patch, as a GEMM over (kd, kh, kw, c) in each token
    tok = x_t.reshape(n, D // pd, pd, H // ph, ph, W // pw, pw, c).permute(0, 1, 3, 5, 2, 4, 6, 7)
    tok = tok.reshape(n, -1, pd * ph * pw * c)
    x = tok @ p["patch_embed.proj.weight"].reshape(C, -1).T + p["patch_embed.proj.bias"] + p["pos_embed.weight"]
    # the views' 2-D patches (one conv shared by both views) and their positions
    g, vp = xr["img_size"] // xr["patch_size"], xr["patch_size"]
    vt = views.reshape(n, 2, g, vp, g, vp).permute(0, 1, 2, 4, 3, 5).reshape(n, 2 * g * g, vp * vp)
    vt = vt @ p["view_embed.proj.weight"].reshape(C, -1).T + p["view_embed.proj.bias"] + p["view_pos_embed.weight"]
    # the timestep: sinusoidal -> Linear -> SiLU -> Linear, then the SiLU every adaLN reads
    cond = linear(p, "t_embedder.mlp.2", F.silu(linear(p, "t_embedder.mlp.0", timestep_embedding(t, 256))))
    cond = F.silu(cond)
    for i in range(m["blocks"]):
        b = "blocks.%d." % i
        mod = linear(p, b + "adaLN_modulation.1", cond).chunk(6, dim=1)
        h = modulate(ln(x), mod[0], mod[1])
        qkv = linear(p, b + "attn.qkv", h)
        h = linear(p, b + "attn.proj", attention(qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:], heads))
        x = x + mod[2][:, None] * h
        h = F.layer_norm(x, (C,), p[b + "norm_cross.weight"], p[b + "norm_cross.bias"], eps)
        q = linear(p, b + "cross_attn.q", h)
        kv = linear(p, b + "cross_attn.kv", vt)
        x = x + linear(p, b + "cross_attn.proj", attention(q, kv[..., :C], kv[..., C:], heads))
        h = modulate(ln(x), mod[3], mod[4])
        h = linear(p, b + "mlp.fc2", F.gelu(linear(p, b + "mlp.fc1", h)))
        x = x + mod[5][:, None] * h
    shift, scale = linear(p, "final_layer.adaLN_modulation.1", cond).chunk(2, dim=1)
    out = linear(p, "final_layer.linear", modulate(ln(x), shift, scale))
    out = out.reshape(n, D // pd, H // ph, W // pw, pd, ph, pw, c).permute(0, 1, 4, 2, 5, 3, 6, 7)
    return out.reshape(n, D, H, W, c)


def compare(prefix):
    meta, raw = load(prefix)
    cfg = meta["config"]
    shape = meta["input_shape"]
    n, count = shape[0], int(np.prod(shape))
    img = cfg["xray"]["img_size"]
    x0 = array(meta, raw, "input", count).reshape(shape)
    x_t = array(meta, raw, "x_t", count).reshape(shape)
    target = array(meta, raw, "target", count).reshape(shape)
    views_vx = array(meta, raw, "views", n * 2 * img * img).reshape(n, 2, img, img)
    pred_vx = array(meta, raw, "pred", count).reshape(shape)
    coef = array(meta, raw, "coefficients", 4 * n).reshape(4, n)
    t, a, s, w = coef[0], coef[1], coef[2], coef[3]
    params = {}
    for q in meta["params"]:
        k = int(np.prod(q["shape"]))
        params[q["name"]] = array(meta, raw, "param_values", meta["param_count"])[q["offset"]:q["offset"] + k] \
            .reshape(q["shape"]).clone().requires_grad_(True)
    grads_vx = array(meta, raw, "grad_values", meta["param_count"])
    bshape = (n,) + (1,) * (len(shape) - 1)
    # the forward process: the noise x_t was made with, and the target it implies
    eps = (x_t - a.reshape(bshape) * x0) / s.reshape(bshape)
    v_param = cfg["diffusion"]["prediction"] == "v"
    want_target = a.reshape(bshape) * eps - s.reshape(bshape) * x0 if v_param else eps
    mu = cfg["xray"]["mu_scale"]
    views = views_of(x0[..., 0], img, mu)
    pred = forward(params, cfg, x_t, views, t)
    per_sample = ((pred - target) ** 2).reshape(n, -1).mean(dim=1)
    diffusion = (w * per_sample).mean()
    x0hat = a.reshape(bshape) * x_t - s.reshape(bshape) * pred if v_param else \
        (x_t - s.reshape(bshape) * pred) / a.reshape(bshape)
    projection = ((views_of(x0hat[..., 0], img, mu) - views) ** 2).mean()
    pw = cfg["loss"]["physics_weight"]
    total = diffusion + pw * projection if pw > 0 else diffusion
    total.backward()
    worst_grad, worst_name = 0.0, ""
    for q in meta["params"]:
        k = int(np.prod(q["shape"]))
        mine = params[q["name"]].grad.reshape(-1)
        theirs = grads_vx[q["offset"]:q["offset"] + k]
        scale = max(mine.abs().max().item(), 1e-12)
        e = (mine - theirs).abs().max().item() / scale
        if e > worst_grad:
            worst_grad, worst_name = e, q["name"]
    rel = lambda x, y: ((x - y).abs().max() / max(y.abs().max().item(), 1e-12)).item()
    out = {
        "views_rel": rel(views_vx, views), "target_rel": rel(target, want_target), "pred_rel": rel(pred_vx, pred),
        "diffusion": diffusion.item(), "diffusion_vx": meta["losses"]["diffusion"],
        "projection": projection.item(), "projection_vx": meta["losses"]["projection"],
        "grad_rel": worst_grad, "grad_worst": worst_name,
        "grad_norm": math.sqrt(sum(float((params[q["name"]].grad ** 2).sum()) for q in meta["params"])),
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    compare(sys.argv[1])

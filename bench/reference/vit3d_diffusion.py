"""vit3d_diffusion in PyTorch, written out op by op from voxscale's contracts (src/families/build_vit3d_diffusion.c, the
kernels' headers), in float64: the reference `voxscale probe` is compared with (tests/integration/test_vit3d_diffusion.py).

It reads a probe (PREFIX.json / PREFIX.bin: the clean volumes x0, the noisy x_t, the target, the views, the
prediction, the per-sample coefficients, the parameters and their gradients, all in voxscale's layouts: volumes
[N][D][H][W][C], conv weights [out][kd][kh][kw][in], Linear weights [out][in]), recomputes the views from x0 (the
DRR: a parallel-beam line integral, bilinear resampling as F.interpolate(align_corners=False), Beer-Lambert), with
xray.backproject their lifting into the volume (the rays' line integrals resampled back), the noise from x_t and
diffusion.data_scale, the target from both, then the prediction, the diffusion loss, the projection loss and every
parameter's gradient by autograd, and prints the largest differences as JSON. Debian's torch has no fused SDPA:
attention is written out (softmax of the scores). Usage: vit3d_diffusion.py PREFIX

The same forward is also the PyTorch baseline of `voxscale bench step` (bench/side_by_side.sh): ViT3DDiffusion is a
torch.nn.Module holding the parameters under voxscale's names and shapes (nn.Linear for the Linears, the patch
convolutions' weights in voxscale's [out][kd][kh][kw][in], applied as the GEMM over each patch that a conv with
kernel = stride = patch is), and its forward is forward() below. --bench times voxscale's training step in float32
(or bf16 autocast): q_sample of x0 at random timesteps with fresh noise, the two DRRs of x0, the prediction, the
(min-SNR-weighted) v or eps MSE plus physics_weight times the projection MSE, backward, global-norm clip, AdamW:
  python bench/reference/vit3d_diffusion.py --config configs/test/vit3d-diffusion-tiny.json --bench [--iters 10]"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
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


def backproject(views, D, H, W, mu_scale):
    """xray.backproject (drr.h's backproject): views [N][2][img][img] -> [N][D][H][W][2], each view's line integral
    -log(1 - min(image, 1 - 1e-6)) resampled to its rays (F.interpolate, bilinear, align_corners=False) over mu_scale:
    channel 0 the AP ray's value (d, w) along H, channel 1 the lateral ray's (d, h) along W"""
    line = -torch.log1p(-views.clamp(max=1.0 - 1e-6))
    ap = F.interpolate(line[:, 0:1], size=(D, W), mode="bilinear", align_corners=False)[:, 0] / mu_scale  # [N][D][W]
    lat = F.interpolate(line[:, 1:2], size=(D, H), mode="bilinear", align_corners=False)[:, 0] / mu_scale  # [N][D][H]
    n = views.shape[0]
    return torch.stack([ap[:, :, None, :].expand(n, D, H, W), lat[:, :, :, None].expand(n, D, H, W)], dim=-1)


def timestep_embedding(t, dim, max_period=10000.0):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=t.dtype, device=t.device) / half)
    args = t[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=1)
    return emb


# --best (the baseline a PyTorch 2.x user would pick): F.linear (one addmm) and F.scaled_dot_product_attention (the
# fused kernel) instead of the written-out forms, which stay the float64 reference's
BEST = False


def linear(p, name, x):
    if BEST:
        return F.linear(x, p[name + ".weight"], p[name + ".bias"])
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def attention(q, k, v, heads):
    n, tq, c = q.shape
    d = c // heads
    q = q.reshape(n, tq, heads, d).transpose(1, 2)
    k = k.reshape(n, k.shape[1], heads, d).transpose(1, 2)
    v = v.reshape(n, v.shape[1], heads, d).transpose(1, 2)
    if BEST:
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, tq, c)
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
    x_in = x_t
    if xr["backproject"]:  # the views lifted along their rays, as channels after x_t's
        x_in = torch.cat([x_t, backproject(views, D, H, W, xr["mu_scale"]).to(x_t.dtype)], dim=-1)
    ci = x_in.shape[-1]
    # the volume's patches: a conv with kernel = stride = patch, as a GEMM over (kd, kh, kw, c) in each token
    tok = x_in.reshape(n, D // pd, pd, H // ph, ph, W // pw, pw, ci).permute(0, 1, 3, 5, 2, 4, 6, 7)
    tok = tok.reshape(n, -1, pd * ph * pw * ci)
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


class Weight(nn.Module):
    """A bare weight (and bias): the patch convolutions in voxscale's layout, the position tables."""

    def __init__(self, shape, bias=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(*shape))
        if bias is not None:
            self.bias = nn.Parameter(torch.zeros(bias))


class Linears(nn.Module):
    def __init__(self, **shapes):
        super().__init__()
        for name, (i, o) in shapes.items():
            setattr(self, name, nn.Linear(i, o))


def adaln(c, out):
    """DiT's adaLN_modulation (SiLU, Linear): forward() applies the SiLU once to c for every block, as voxscale does"""
    return nn.Sequential(nn.SiLU(), nn.Linear(c, out))


class Block(nn.Module):
    def __init__(self, C, mlp, eps):
        super().__init__()
        self.adaLN_modulation = adaln(C, 6 * C)
        self.attn = Linears(qkv=(C, 3 * C), proj=(C, C))
        self.norm_cross = nn.LayerNorm(C, eps=eps)
        self.cross_attn = Linears(q=(C, C), kv=(C, 2 * C), proj=(C, C))
        self.mlp = Linears(fc1=(C, mlp * C), fc2=(mlp * C, C))


class ViT3DDiffusion(nn.Module):
    """voxscale's vit3d_diffusion: named_parameters() gives its parameter names and shapes, in its order"""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        m, xr = cfg["model"], cfg["xray"]
        C, c, ps, vp = m["hidden_size"], m["in_channels"], m["patch_size"], xr["patch_size"]
        g = xr["img_size"] // vp
        tokens = int(np.prod([s // p for s, p in zip(m["input_size"], ps)]))
        self.view_embed = nn.Module()
        self.view_embed.proj = Weight((C, 1, vp, vp, 1), C)
        self.view_pos_embed = Weight((2 * g * g, C))
        self.t_embedder = nn.Module()
        self.t_embedder.mlp = nn.Sequential(nn.Linear(256, C), nn.SiLU(), nn.Linear(C, C))
        self.patch_embed = nn.Module()
        self.patch_embed.proj = Weight((C, ps[0], ps[1], ps[2], c + 2 * xr["backproject"]), C)
        self.pos_embed = Weight((tokens, C))
        self.blocks = nn.ModuleList(Block(C, m["mlp_ratio"], m["ln_eps"]) for _ in range(m["blocks"]))
        self.final_layer = nn.Module()
        self.final_layer.adaLN_modulation = adaln(C, 2 * C)
        self.final_layer.linear = nn.Linear(C, ps[0] * ps[1] * ps[2] * c)
        # DiT's initialisation: Xavier-uniform Linears, zero biases, positions N(0, 0.02), adaLN and the last Linear 0
        for mod in self.modules():
            if isinstance(mod, nn.Linear):
                nn.init.xavier_uniform_(mod.weight)
                nn.init.zeros_(mod.bias)
        for w in (self.pos_embed.weight, self.view_pos_embed.weight):
            nn.init.normal_(w, std=0.02)
        for proj in (self.patch_embed.proj, self.view_embed.proj):
            nn.init.xavier_uniform_(proj.weight.view(C, -1))
        for lin in [b.adaLN_modulation[1] for b in self.blocks] + [self.final_layer.adaLN_modulation[1],
                                                                   self.final_layer.linear]:
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x_t, views, t):
        return forward(dict(self.named_parameters()), self.cfg, x_t, views, t)


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
    # the forward process on k x0 (diffusion.data_scale): the noise x_t was made with, and the target it implies
    k = cfg["diffusion"]["data_scale"]
    eps = (x_t - a.reshape(bshape) * k * x0) / s.reshape(bshape)
    v_param = cfg["diffusion"]["prediction"] == "v"
    want_target = a.reshape(bshape) * eps - s.reshape(bshape) * k * x0 if v_param else eps
    mu = cfg["xray"]["mu_scale"]
    views = views_of(x0[..., 0], img, mu)
    pred = forward(params, cfg, x_t, views, t)
    per_sample = ((pred - target) ** 2).reshape(n, -1).mean(dim=1)
    diffusion = (w * per_sample).mean()
    x0hat = (a.reshape(bshape) * x_t - s.reshape(bshape) * pred if v_param else
             (x_t - s.reshape(bshape) * pred) / a.reshape(bshape)) / k
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


def alphabar(schedule, T):
    """src/graph/diffusion_schedule.c's cumulative alpha per timestep (float64)"""
    t = np.arange(T, dtype=np.float64)
    if schedule == "cosine":
        f = lambda u: np.cos((u + 0.008) / 1.008 * np.pi / 2) ** 2
        beta = np.minimum(1 - f((t + 1) / T) / f(t / T), 0.999)
    else:
        beta = 1e-4 + (2e-2 - 1e-4) * t / max(T - 1, 1) if T > 1 else np.full(1, 1e-4)
    return np.cumprod(1 - beta)


def train_step(model, cfg, x0, ab, opt, amp):
    """One of voxscale's training steps (src/graph/model_exec_diff.c, train/step.c) on the clean volumes x0
    [N][D][H][W][C]: fresh timesteps and noise, x_t and the target, the views of x0, the loss, backward, clip, AdamW"""
    df, xr, t_cfg = cfg["diffusion"], cfg["xray"], cfg["train"]
    n, dev = x0.shape[0], x0.device
    v_param = df["prediction"] == "v"
    opt.zero_grad(set_to_none=True)
    t = torch.randint(0, df["timesteps"], (n,), device=dev)
    abt = ab[t]
    bshape = (n,) + (1,) * (x0.dim() - 1)
    a, s = abt.sqrt().reshape(bshape), (1 - abt).sqrt().reshape(bshape)
    eps = torch.randn_like(x0)
    k = df["data_scale"]
    x_t = a * k * x0 + s * eps
    target = a * eps - s * k * x0 if v_param else eps
    with torch.no_grad():
        views = views_of(x0[..., 0], xr["img_size"], xr["mu_scale"])
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp == "bf16"):
        pred = model(x_t, views, t.to(x0.dtype))
    pred = pred.float()
    per_sample = ((pred - target) ** 2).reshape(n, -1).mean(dim=1)
    gamma = cfg["loss"]["min_snr_gamma"]
    if gamma > 0:
        snr = abt / (1 - abt)
        per_sample = per_sample * (snr.clamp(max=gamma) / (snr + 1 if v_param else snr))
    loss = per_sample.mean()
    pw = cfg["loss"]["physics_weight"]
    if pw > 0:
        x0hat = (a * x_t - s * pred if v_param else (x_t - s * pred) / a) / k
        loss = loss + pw * ((views_of(x0hat[..., 0], xr["img_size"], xr["mu_scale"]) - views) ** 2).mean()
    loss.backward()
    if t_cfg["grad_clip"] > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), t_cfg["grad_clip"])
    opt.step()
    return loss


def bench(cfg, config_path, batch, iters, warmup, threads, device="cpu", tf32=1, amp="off", best=False):
    """Median time of the training step above (after warmup steps), the fields bench/side_by_side.sh reads. best:
    F.linear and fused SDPA, the model under torch.compile, AdamW fused (PyTorch 2.x; refused on older ones)"""
    global BEST
    if best and not (hasattr(torch, "compile") and hasattr(F, "scaled_dot_product_attention")):
        raise SystemExit("vit3d_diffusion.py: --best needs PyTorch 2.x (torch.compile, SDPA); this is %s"
                         % torch.__version__)
    BEST = best
    torch.set_num_threads(threads)
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(tf32)
    torch.manual_seed(cfg["train"]["seed"])
    model = ViT3DDiffusion(cfg).to(dev)
    model.train()
    m, t = cfg["model"], cfg["train"]
    x0 = torch.rand(batch, *m["input_size"], m["in_channels"], device=dev)
    ab = torch.tensor(alphabar(cfg["diffusion"]["schedule"], cfg["diffusion"]["timesteps"]), dtype=torch.float32,
                      device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["adam_eps"],
                            weight_decay=t["weight_decay"], **({"fused": True} if best else {}))
    if best:
        model = torch.compile(model)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    t_start = time.perf_counter()
    for i in range(iters + warmup):
        sync()
        t0 = time.perf_counter()
        train_step(model, cfg, x0, ab, opt, amp)
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
        elif i == warmup - 1:
            t_warm = time.perf_counter() - t_start
    med = float(np.median(times))
    return {"framework": "pytorch " + torch.__version__,
            "mode": "best (torch.compile, F.linear, fused SDPA, fused AdamW)" if best else "eager",
            "warmup_s": t_warm if warmup else 0.0, "model": "bench/reference/vit3d_diffusion.py ViT3DDiffusion",
            "config": config_path, "batch": batch, "input_size": list(m["input_size"]), "threads": threads,
            "device": str(dev), "precision": "bf16 autocast" if amp == "bf16" else "fp32", "tf32": tf32,
            "torch": torch.__version__, "params": sum(p.numel() for p in model.parameters()),
            "step_ms_median": 1e3 * med, "step_ms_min": 1e3 * float(np.min(times)), "samples_per_s": batch / med,
            "iters": iters, "warmup": warmup,
            "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None}


# voxscale's defaults of the keys this script reads (src/core/config_schema.c), for configs that leave them out
DEFAULTS = {"model": {"in_channels": 1, "input_size": [64, 64, 64], "hidden_size": 384, "blocks": 6, "heads": 6,
                      "patch_size": [8, 8, 8], "mlp_ratio": 4, "ln_eps": 1e-6},
            "diffusion": {"timesteps": 1000, "schedule": "cosine", "prediction": "v", "data_scale": 1.0},
            "xray": {"img_size": 64, "patch_size": 8, "mu_scale": 3.0, "backproject": 0},
            "loss": {"physics_weight": 0.1, "min_snr_gamma": 0.0},
            "train": {"batch_size": 2, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "adam_eps": 1e-8,
                      "weight_decay": 0.01, "grad_clip": 1.0, "seed": 0}}


def resolve(raw):
    cfg = json.loads(json.dumps(DEFAULTS))
    for sec in cfg:
        cfg[sec].update(raw.get(sec, {}))
    return cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--bench", action="store_true", help="time training steps")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=0)
    ap.add_argument("--iters", "--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--tf32", type=int, default=1, help="TF32 in CUDA matmuls and convolutions (1, as voxscale)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="fp32, or bf16 autocast")
    ap.add_argument("--best", action="store_true", help="PyTorch 2.x's fastest: torch.compile, F.linear, fused SDPA, "
                    "fused AdamW")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", "--json", dest="out", default="")
    a = ap.parse_args()
    if not a.bench:
        ap.error("nothing to do: pass --bench (or a probe PREFIX alone to compare)")
    cfg = resolve(json.load(open(a.config)))
    batch = a.batch_size or cfg["train"]["batch_size"]
    r = bench(cfg, a.config, batch, a.iters, a.warmup, a.threads, a.device, a.tf32, a.dtype, a.best)
    print(json.dumps(r))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        torch.set_default_dtype(torch.float64)
        compare(sys.argv[1])
    else:
        main()

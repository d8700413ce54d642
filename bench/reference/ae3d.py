"""The voxscale autoencoder in PyTorch: the reference our C/CUDA model is checked against, and the baseline our
benchmarks are compared with. Parameter names and the forward pass mirror src/model/model_build.c exactly:

  encoder: conv_in 3^3 -> per level: ResBlocks, stride-2 conv 3^3 between levels -> GN -> SiLU -> 1x1 mu, logvar
  latent:  z = mu + exp(0.5 * clamp(logvar)) * eps
  decoder: conv_in 3^3 -> per level (reversed): ResBlocks, nearest x2 + conv 3^3 between levels -> GN -> SiLU
           -> conv_out 3^3
  loss = L1 or MSE (mean) + kl_weight * KL (mean over samples of the per-sample sum)

Use as a library (build_model, load_probe, step_loss) or as a benchmark:
  python bench/reference/ae3d.py --config configs/ae3d-64.json --bench [--device cuda] [--dtype bf16]
  python bench/reference/ae3d.py --config configs/ae3d-64.json --bench --device cuda --modes eager,compile --tf32 1,0
The second form times every (mode, TF32) pair in one process (one torch import and CUDA start for all; each pair
gets a fresh model, optimizer and peak-memory count) and writes {"runs": [...]}, one result per pair; a single pair
writes the result itself, as before. Each pair's result is also printed as one JSON line as soon as it is in, so a
caller that has to stop the process early keeps what finished.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ResBlock(nn.Module):
    def __init__(self, cin, cout, groups, eps):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=eps)
        self.conv1 = nn.Conv3d(cin, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, cout, eps=eps)
        self.conv2 = nn.Conv3d(cout, cout, 3, padding=1)
        self.shortcut = nn.Conv3d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return h + (self.shortcut(x) if self.shortcut is not None else x)


class Level(nn.Module):
    def __init__(self, cin, cout, blocks, groups, eps, resample):
        super().__init__()
        self.res = nn.ModuleList()
        for _ in range(blocks):
            self.res.append(ResBlock(cin, cout, groups, eps))
            cin = cout
        # "down": a stride-2 conv; "up": nearest x2 then a conv; None: the last level of the encoder / first of decoder
        self.kind = resample
        if resample == "down":
            self.downsample = nn.Conv3d(cout, cout, 3, stride=2, padding=1)
        elif resample == "up":
            self.upsample = nn.Conv3d(cout, cout, 3, padding=1)


class Encoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        ch, g, eps = m["channels"], m["norm_groups"], m["norm_eps"]
        self.conv_in = nn.Conv3d(m["in_channels"], ch[0], 3, padding=1)
        self.down = nn.ModuleList()
        c = ch[0]
        for l, cl in enumerate(ch):
            self.down.append(Level(c, cl, m["res_blocks"], g, eps, "down" if l < len(ch) - 1 else None))
            c = cl
        self.norm_out = nn.GroupNorm(g, c, eps=eps)
        self.mu = nn.Conv3d(c, m["latent_channels"], 1)
        self.logvar = nn.Conv3d(c, m["latent_channels"], 1)

    def forward(self, x):
        h = self.conv_in(x)
        for level in self.down:
            for block in level.res:
                h = block(h)
            if level.kind == "down":
                h = level.downsample(h)
        h = F.silu(self.norm_out(h))
        return self.mu(h), self.logvar(h)


class Decoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        ch, g, eps = m["channels"], m["norm_groups"], m["norm_eps"]
        self.conv_in = nn.Conv3d(m["latent_channels"], ch[-1], 3, padding=1)
        # Indexed by level like the encoder, run from the last level to the first.
        levels = [None] * len(ch)
        c = ch[-1]
        for l in reversed(range(len(ch))):
            levels[l] = Level(c, ch[l], m["res_blocks"], g, eps, "up" if l > 0 else None)
            c = ch[l]
        self.up = nn.ModuleList(levels)
        self.norm_out = nn.GroupNorm(g, c, eps=eps)
        self.conv_out = nn.Conv3d(c, m["in_channels"], 3, padding=1)

    def forward(self, z):
        h = self.conv_in(z)
        for level in reversed(self.up):
            for block in level.res:
                h = block(h)
            if level.kind == "up":
                h = level.upsample(F.interpolate(h, scale_factor=2, mode="nearest"))
        return self.conv_out(F.silu(self.norm_out(h)))


class AE3D(nn.Module):
    def __init__(self, model_cfg):
        super().__init__()
        self.cfg = model_cfg
        self.encoder = Encoder(model_cfg)
        self.decoder = Decoder(model_cfg)

    def forward(self, x, eps=None):
        """x: [N][C][D][H][W]. Returns recon, mu, logvar (clamped). eps None: z = mu."""
        mu, logvar = self.encoder(x)
        lv = torch.clamp(logvar, self.cfg["logvar_min"], self.cfg["logvar_max"])
        z = mu if eps is None else mu + torch.exp(0.5 * lv) * eps
        return self.decoder(z), mu, lv


def step_loss(model, x, eps):
    """The training loss of src/model/model_exec.c: returns total, recon, kl (tensors) and the reconstruction."""
    m = model.cfg
    recon, mu, lv = model(x, eps)
    diff = recon - x
    rec = diff.abs().mean() if m["loss"] == "l1" else (diff * diff).mean()
    kl = 0.5 * (mu * mu + torch.exp(lv) - 1.0 - lv).flatten(1).sum(1).mean()
    return rec + m["kl_weight"] * kl, rec, kl, recon


def ndhwc_to_ncdhw(a):
    return a.permute(0, 4, 1, 2, 3).contiguous()


def load_probe(prefix, dtype=torch.float64):
    """Reads `voxscale probe` output; returns (meta, model with its parameters, x, eps, C recon, C grads by name)."""
    meta = json.load(open(prefix + ".json"))
    data = np.fromfile(prefix + ".bin", dtype=np.float32)
    n_in = int(np.prod(meta["input_shape"]))
    n_lat = int(np.prod(meta["latent_shape"]))
    arr = lambda key, n: data[int(meta[key]):int(meta[key]) + n]
    x = torch.from_numpy(arr("input", n_in).reshape(meta["input_shape"]).astype(np.float64))
    eps = torch.from_numpy(arr("eps", n_lat).reshape(meta["latent_shape"]).astype(np.float64))
    recon_c = torch.from_numpy(arr("recon", n_in).reshape(meta["input_shape"]).astype(np.float64))
    pvals = arr("param_values", meta["param_count"])
    gvals = arr("grad_values", meta["param_count"])
    model = AE3D(meta["config"]["model"]).to(dtype)
    named = dict(model.named_parameters())
    grads_c = {}
    for p in meta["params"]:
        if p["name"] not in named:
            raise KeyError("C parameter %s has no PyTorch counterpart" % p["name"])
        n = int(np.prod(p["shape"]))
        def to_torch(v):
            t = torch.from_numpy(v[p["offset"]:p["offset"] + n].reshape(p["shape"]).astype(np.float64))
            return t.permute(0, 4, 1, 2, 3).contiguous() if t.dim() == 5 else t  # [o][k][k][k][i] -> [o][i][k][k][k]
        with torch.no_grad():
            named[p["name"]].copy_(to_torch(pvals))
        grads_c[p["name"]] = to_torch(gvals)
    if len(named) != len(meta["params"]):
        raise KeyError("PyTorch has parameters the C model lacks: %s" % sorted(set(named) - {p["name"] for p in meta["params"]}))
    return meta, model, ndhwc_to_ncdhw(x).to(dtype), ndhwc_to_ncdhw(eps).to(dtype), ndhwc_to_ncdhw(recon_c), grads_c


def time_steps(model_cfg, batch, dev, tf32, compiled, dtype, iters, warmup, channels_last, threads):
    """Median training-step time of a fresh model: forward, L1/MSE+KL loss, backward, clip, AdamW."""
    # TF32 in convolutions is PyTorch's default on Ampere and newer; voxscale's train.tf32 mirrors it, and the
    # side-by-side passes voxscale's setting here so both run the same math.
    torch.backends.cudnn.allow_tf32 = bool(tf32)
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
    if threads:
        torch.set_num_threads(threads)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = AE3D(model_cfg).to(dev)
    if channels_last:
        model = model.to(memory_format=torch.channels_last_3d)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                            fused=(dev.type == "cuda")) if dev.type == "cuda" else torch.optim.AdamW(model.parameters(), lr=1e-4)
    D, H, W = model_cfg["input_size"]
    x = torch.rand(batch, model_cfg["in_channels"], D, H, W, device=dev)
    amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]

    def step():
        with torch.autocast(dev.type, dtype=amp, enabled=amp is not None):
            eps = torch.randn(batch, model_cfg["latent_channels"], *[s // 2 ** (len(model_cfg["channels"]) - 1) for s in (D, H, W)], device=dev)
            loss, _, _, _ = step_loss(model, x, eps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    if compiled:
        torch._dynamo.reset()  # each pair compiles its own graphs (the on-disk caches still help)
        step = torch.compile(step)
    times, t_warm = [], time.perf_counter()
    for i in range(warmup + iters):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i == warmup - 1:
            t_warm = time.perf_counter() - t_warm
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    med = float(np.median(times))
    out = {"mode": "compile" if compiled else "eager", "tf32": int(tf32), "step_ms_median": med * 1e3,
           "step_ms_min": min(times) * 1e3, "samples_per_s": batch / med,
           "warmup_s": t_warm if warmup else 0.0}  # with compile: the compilation, mostly
    if dev.type == "cuda":
        out["peak_memory_mib"] = torch.cuda.max_memory_allocated() / 2**20
    del opt, model, x
    return out


def bench(args):
    cfg = json.load(open(args.config))
    model_cfg = {"in_channels": 1, "res_blocks": 1, "norm_groups": 8, "latent_channels": 4, "kl_weight": 1e-6,
                 "loss": "l1", "logvar_min": -30.0, "logvar_max": 20.0, "norm_eps": 1e-6, **cfg["model"]}
    batch = args.batch_size or cfg.get("train", {}).get("batch_size", 2)
    dev = torch.device(args.device)
    modes = args.modes.split(",") if args.modes else ["compile" if args.compile else "eager"]
    tf32s = [int(t) for t in args.tf32.split(",")]
    common = {"framework": "pytorch " + torch.__version__, "cudnn": torch.backends.cudnn.version(),
              "config": args.config, "device": str(dev), "dtype": args.dtype, "batch": batch, "iters": args.iters,
              "warmup": args.warmup, "channels_last": int(args.channels_last)}
    if dev.type == "cuda":
        common["gpu"] = torch.cuda.get_device_name(dev)
    runs = []
    for mode in modes:  # eager first: the quick figures are in hand before any compilation starts
        for tf32 in tf32s:
            r = dict(common, **time_steps(model_cfg, batch, dev, tf32, mode == "compile", args.dtype, args.iters,
                                          args.warmup, args.channels_last, args.threads))
            r["threads"] = torch.get_num_threads()
            runs.append(r)
            print(json.dumps(r), flush=True)
    out = runs[0] if len(runs) == 1 else dict(common, runs=runs)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--bench", action="store_true", help="time training steps")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--batch-size", type=int, default=0)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true", help="torch.compile the step (same as --modes compile)")
    ap.add_argument("--modes", help="comma-separated: eager, compile (default: eager, or compile with --compile)")
    ap.add_argument("--tf32", default="1", help="allow TF32 in cuDNN convolutions: 1 (default), 0, or a list (1,0)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads (default: all cores)")
    ap.add_argument("--out", help="also write the JSON result to this file")
    a = ap.parse_args()
    if not a.bench:
        ap.error("nothing to do: pass --bench")
    if a.modes and any(m not in ("eager", "compile") for m in a.modes.split(",")):
        ap.error("--modes takes eager and/or compile, comma-separated, not %r" % a.modes)
    if any(t not in ("0", "1") for t in a.tf32.split(",")):
        ap.error("--tf32 takes 0, 1 or a comma-separated list of them, not %r" % a.tf32)
    bench(a)

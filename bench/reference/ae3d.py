"""The voxscale autoencoder in PyTorch: the reference our C/CUDA model is checked against, and the baseline our
benchmarks are compared with. Parameter names and the forward pass mirror src/families/model_build.c exactly:

  encoder: conv_in 3^3 -> per level: ResBlocks, stride-2 conv 3^3 between levels -> GN -> SiLU -> 1x1 mu, logvar
  latent:  z = mu + exp(0.5 * clamp(logvar)) * eps
  decoder: conv_in 3^3 -> per level (reversed): ResBlocks, nearest x2 + conv 3^3 between levels -> GN -> SiLU
           -> conv_out 3^3
  loss = L1 or MSE (mean) + kl_weight * KL (mean over samples of the per-sample sum)

Use as a library (build_model, load_probe, step_loss) or as a benchmark:
  python bench/reference/ae3d.py --config configs/ae3d-64.json --bench [--device cuda] [--dtype bf16]
  python bench/reference/ae3d.py --config configs/ae3d-64.json --bench --device cuda --modes eager,compile --tf32 1,0
  python bench/reference/ae3d.py --config configs/ae3d-64.json --bench --device cuda --modes eager,compile \
      --dtypes bf16 --channels-last
`--cudnn-benchmark 0,1` times each with torch.backends.cudnn.benchmark off and on (default: off, as scripts leave it).
The second and third forms time every (mode, dtype, TF32) combination in one process (one torch import and CUDA
start for all; each gets a fresh model, optimizer and peak-memory count) and write {"runs": [...]}, one result per
combination; a single one writes the result itself, as before. Each result is also printed as one JSON line as soon
as it is in, so a caller that has to stop the process early keeps what finished.

The step is PyTorch's own AMP recipe (the "Automatic Mixed Precision" tutorial and torch.amp's docs): forward and
loss under torch.autocast (bf16 or fp16), backward outside it; fp16 scales the loss with a GradScaler and unscales
the gradients before the global-norm clip; AdamW is the fused one on CUDA. --channels-last puts the parameters and
the input in channels_last_3d (NDHWC in memory, voxscale's layout), which cuDNN's 3-D tensor-core kernels want.
"""
import argparse
import contextlib
import gc
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GroupNorm(nn.GroupNorm):
    """nn.GroupNorm that computes in float32 when CPU autocast hands it a bf16 input. CUDA's autocast runs
    group_norm in float32 itself (it is on its float32 list), so on a GPU this is the plain module; the CPU autocast
    of older PyTorch (Debian's 1.13, on which the tests run this file) has no such rule, and its kernel refuses a
    bf16 input with float32 parameters. The cast here is what CUDA's autocast does."""

    def forward(self, x):
        if x.device.type == "cpu" and x.dtype in (torch.bfloat16, torch.float16) and self.weight.dtype == torch.float32:
            x = x.float()
        return super().forward(x)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, groups, eps):
        super().__init__()
        self.norm1 = GroupNorm(groups, cin, eps=eps)
        self.conv1 = nn.Conv3d(cin, cout, 3, padding=1)
        self.norm2 = GroupNorm(groups, cout, eps=eps)
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
        self.norm_out = GroupNorm(g, c, eps=eps)
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
        self.norm_out = GroupNorm(g, c, eps=eps)
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
    """The training loss of src/graph/model_exec.c: returns total, recon, kl (tensors) and the reconstruction."""
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


AMP_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_conv_dtype(dev, amp):
    """The dtype a convolution yields under this autocast on this device: an autocast that does nothing here (a
    dtype this PyTorch does not autocast to on this device) must not be timed and reported as mixed precision."""
    w = torch.ones(1, 1, 1, 1, 1, device=dev)
    try:
        with torch.autocast(dev.type, dtype=amp):
            return F.conv3d(torch.ones(1, 1, 2, 2, 2, device=dev), w).dtype
    except RuntimeError as e:  # e.g. PyTorch 1.13's CPU autocast refuses float16 outright
        return "refused (%s)" % str(e).splitlines()[0]


def grad_scaler(dev):
    """torch.amp.GradScaler where this PyTorch has it (2.3 and newer), else the older CUDA-only class."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(dev.type)
    return torch.cuda.amp.GradScaler(enabled=dev.type == "cuda")


def release_memory(dev):
    """Frees what earlier runs in this process left allocated: torch.compile's caches hold the compiled model
    (parameters, and through the optimizer its state), which would otherwise count in the next run's peak."""
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def time_steps(model_cfg, batch, dev, tf32, compiled, dtype, iters, warmup, channels_last, threads,
               cudnn_benchmark=0, fused_cpu=False):
    """Median training-step time of a fresh model: forward and loss (under autocast for bf16/fp16), backward,
    global-norm clip, AdamW; with its peak memory on CUDA. cudnn_benchmark: PyTorch's cudnn.benchmark (off by
    default, as in most scripts; on, cuDNN times its algorithms per shape in the warm-up steps and keeps the
    fastest: the fairer baseline for a speed claim)."""
    torch.backends.cudnn.benchmark = bool(cudnn_benchmark)
    # TF32 in convolutions is PyTorch's default on Ampere and newer; voxscale's train.tf32 mirrors it, and the
    # side-by-side passes voxscale's setting here so both run the same math.
    torch.backends.cudnn.allow_tf32 = bool(tf32)
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
    if threads:
        torch.set_num_threads(threads)
    amp = AMP_DTYPES[dtype]
    if amp is not None:
        got = autocast_conv_dtype(dev, amp)
        if got != amp:
            raise SystemExit("ae3d.py: %s autocast on %s with PyTorch %s does not run convolutions in %s (a "
                             "convolution gave %s); not timing it" % (dtype, dev.type, torch.__version__, dtype, got))
    release_memory(dev)
    start_bytes = 0
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        start_bytes = torch.cuda.memory_allocated()  # 0 unless something outlived release_memory
    model = AE3D(model_cfg).to(dev)
    fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    # fused=True: one multi-tensor kernel for the whole update (PyTorch's fastest AdamW; CUDA only in older PyTorch,
    # on CPUs with --best)
    fused = dev.type == "cuda" or fused_cpu
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, **({"fused": True} if fused else {}))
    scaler = grad_scaler(dev) if dtype == "fp16" else None
    D, H, W = model_cfg["input_size"]
    x = torch.rand(batch, model_cfg["in_channels"], D, H, W, device=dev).to(memory_format=fmt)
    lat = [batch, model_cfg["latent_channels"]] + [s // 2 ** (len(model_cfg["channels"]) - 1) for s in (D, H, W)]
    # the strides themselves: with one channel (the input, conv_out's weight) a tensor passes is_contiguous for
    # both layouts, but convolutions choose their layout from the strides
    layout_ok = all(t.stride() == torch.empty(t.shape, device="meta", memory_format=fmt).stride()
                    for t in [x] + [p for p in model.parameters() if p.dim() == 5])

    def step():
        eps = torch.empty(lat, device=dev, memory_format=fmt).normal_()
        # PyTorch's AMP recipe: autocast around the forward pass and the loss only; backward runs outside it
        with torch.autocast(dev.type, dtype=amp) if amp is not None else contextlib.nullcontext():
            loss, _, _, _ = step_loss(model, x, eps)
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        else:  # fp16: scale the loss, unscale before clipping so the clip sees true gradients, skip on inf/NaN
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()

    if compiled:
        if not hasattr(torch, "compile"):
            raise SystemExit("ae3d.py: PyTorch %s has no torch.compile" % torch.__version__)
        step = torch.compile(step)  # each run compiles its own graphs (release_memory reset dynamo; disk caches help)
    times, t_warm, warm_peak = [], time.perf_counter(), 0
    for i in range(warmup + iters):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i == warmup - 1:
            t_warm = time.perf_counter() - t_warm
            if dev.type == "cuda":  # the peak so far (compilation, the optimizer state's first allocation)
                warm_peak = torch.cuda.max_memory_allocated()
                torch.cuda.reset_peak_memory_stats()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    med = float(np.median(times))
    out = {"mode": ("best (channels_last_3d, torch.compile, fused AdamW)" if fused_cpu else
                    "compile" if compiled else "eager"), "dtype": dtype, "tf32": int(tf32),
           "channels_last": int(channels_last), "layout_checked": int(layout_ok), "fused_adamw": int(fused),
           "grad_scaler": int(scaler is not None and scaler.is_enabled()), "step_ms_median": med * 1e3,
           "step_ms_min": min(times) * 1e3, "samples_per_s": batch / med,
           "warmup_s": t_warm if warmup else 0.0,  # with compile: the compilation, mostly
           # on CUDA, torch.cuda.max_memory_allocated after a reset made before the model was built: the whole run
           # (warm-up included) and the timed steps alone; what was allocated at the reset is taken off both
           "peak_memory_mib": None, "peak_memory_steady_mib": None, "memory_at_start_mib": start_bytes / 2**20}
    if dev.type == "cuda":
        steady = torch.cuda.max_memory_allocated()
        out["peak_memory_mib"] = (max(warm_peak, steady) - start_bytes) / 2**20
        out["peak_memory_steady_mib"] = (steady - start_bytes) / 2**20
    del step, opt, model, x, scaler
    return out


def bench(args):
    cfg = json.load(open(args.config))
    model_cfg = {"in_channels": 1, "res_blocks": 1, "norm_groups": 8, "latent_channels": 4, "kl_weight": 1e-6,
                 "loss": "l1", "logvar_min": -30.0, "logvar_max": 20.0, "norm_eps": 1e-6, **cfg["model"]}
    batch = args.batch_size or cfg.get("train", {}).get("batch_size", 2)
    dev = torch.device(args.device)
    modes = args.modes.split(",") if args.modes else ["compile" if args.compile else "eager"]
    dtypes = args.dtypes.split(",") if args.dtypes else [args.dtype]
    tf32s = [int(t) for t in args.tf32.split(",")]
    benchmarks = [int(b) for b in args.cudnn_benchmark.split(",")]
    common = {"framework": "pytorch " + torch.__version__, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
              "config": args.config, "device": str(dev),
              "batch": batch, "input_size": list(model_cfg["input_size"]), "iters": args.iters,
              "warmup": args.warmup, "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None}
    runs = []
    # eager first: the quick figures are in hand before any compilation starts
    for mode in modes:
        for dtype in dtypes:
            for tf32 in tf32s:
                for bm in benchmarks:
                    r = dict(common, **time_steps(model_cfg, batch, dev, tf32, mode == "compile", dtype, args.iters,
                                                  args.warmup, args.channels_last, args.threads, bm, args.best))
                    r["threads"] = torch.get_num_threads()
                    r["cudnn_benchmark"] = bm
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
    ap.add_argument("--dtype", default="fp32", choices=list(AMP_DTYPES),
                    help="fp32, or autocast to bf16 or fp16 (fp16 with a GradScaler)")
    ap.add_argument("--dtypes", help="comma-separated dtypes to time one after the other (overrides --dtype)")
    ap.add_argument("--batch-size", type=int, default=0)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--channels-last", action="store_true", help="channels_last_3d parameters and input")
    ap.add_argument("--compile", action="store_true", help="torch.compile the step (same as --modes compile)")
    ap.add_argument("--modes", help="comma-separated: eager, compile (default: eager, or compile with --compile)")
    ap.add_argument("--best", action="store_true", help="PyTorch 2.x's fastest on this device: --channels-last "
                    "--compile and AdamW fused (also on CPUs)")
    ap.add_argument("--tf32", default="1", help="allow TF32 in cuDNN convolutions: 1 (default), 0, or a list (1,0)")
    ap.add_argument("--cudnn-benchmark", default="0",
                    help="torch.backends.cudnn.benchmark: 0 (default, as scripts leave it), 1, or a list (0,1)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads (default: all cores)")
    ap.add_argument("--out", help="also write the JSON result to this file")
    a = ap.parse_args()
    if not a.bench:
        ap.error("nothing to do: pass --bench")
    if a.best:
        if a.modes:
            ap.error("--best is one mode (compile with channels_last_3d and fused AdamW); leave out --modes")
        a.channels_last, a.compile = True, True
    if a.modes and any(m not in ("eager", "compile") for m in a.modes.split(",")):
        ap.error("--modes takes eager and/or compile, comma-separated, not %r" % a.modes)
    if a.dtypes and any(d not in AMP_DTYPES for d in a.dtypes.split(",")):
        ap.error("--dtypes takes fp32, bf16 and/or fp16, comma-separated, not %r" % a.dtypes)
    if any(t not in ("0", "1") for t in a.tf32.split(",")):
        ap.error("--tf32 takes 0, 1 or a comma-separated list of them, not %r" % a.tf32)
    if any(t not in ("0", "1") for t in a.cudnn_benchmark.split(",")):
        ap.error("--cudnn-benchmark takes 0, 1 or a comma-separated list of them, not %r" % a.cudnn_benchmark)
    bench(a)

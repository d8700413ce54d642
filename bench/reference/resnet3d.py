"""MONAI's 3-D ResNet as the reference for voxscale's resnet3d family (and MONAI's DenseNet for the densenet family,
the other head family: build_model picks by model.family), and its PyTorch baseline.

The model is monai.networks.nets.ResNet built from a voxscale config (model.depth, spatial_dims, conv1_t_size,
conv1_t_stride, no_max_pool, shortcut_type, widen_factor, bias_downsample, num_classes, in_channels): the same
network, parameter names and buffers as src/families/build_resnet3d.c. Our convolution weights are [out][kd][kh][kw][in]
(NDHWC's filter layout); PyTorch's are [out][in][kd][kh][kw] (2-D: [out][in][kh][kw]).

The losses are PyTorch's: CrossEntropyLoss(weight), BCEWithLogitsLoss(pos_weight), MSELoss, and the Cox partial
likelihood with Breslow ties written here (mean over events).

Use as a library (build_model, load_probe, run_probe_steps) or as a benchmark of one training step:
  python bench/reference/resnet3d.py --config configs/resnet3d-18-cls.json --bench [--batch-size 2] [--steps 10]
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

LAYERS = {10: ("basic", [1, 1, 1, 1]), 18: ("basic", [2, 2, 2, 2]), 34: ("basic", [3, 4, 6, 3]),
          50: ("bottleneck", [3, 4, 6, 3]), 101: ("bottleneck", [3, 4, 23, 3])}


DENSE_BLOCKS = {121: (6, 12, 24, 16), 169: (6, 12, 32, 32), 201: (6, 12, 48, 32)}


def build_model(cfg):
    """monai.networks.nets.ResNet (or, for model.family densenet, monai.networks.nets.DenseNet with model.block_config
    or DenseNet121/169/201's) for a voxscale config's model section."""
    from monai.networks.nets import DenseNet, ResNet
    m = cfg["model"]
    if m["family"] == "densenet":
        blocks = tuple(int(b) for b in m.get("block_config") or DENSE_BLOCKS[m["depth"]])
        return DenseNet(spatial_dims=m["spatial_dims"], in_channels=m["in_channels"], out_channels=m["num_classes"],
                        init_features=m["init_features"], growth_rate=m["growth_rate"], block_config=blocks,
                        bn_size=m["bn_size"], dropout_prob=m.get("dropout_prob", 0.0))
    block, layers = LAYERS[m["depth"]]
    return ResNet(block=block, layers=layers, block_inplanes=[64, 128, 256, 512], spatial_dims=m["spatial_dims"],
                  n_input_channels=m["in_channels"], conv1_t_size=m["conv1_t_size"],
                  conv1_t_stride=m["conv1_t_stride"], no_max_pool=bool(m["no_max_pool"]),
                  shortcut_type=m["shortcut_type"], widen_factor=m["widen_factor"], num_classes=m["num_classes"],
                  bias_downsample=bool(m["bias_downsample"]))


def set_batchnorm(model, cfg):
    for mod in model.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.momentum = cfg["model"]["bn_momentum"]
            mod.eps = cfg["model"]["bn_eps"]


def to_torch_weight(ours, shape, two_d):
    """Our [out][kd][kh][kw][in] (or a plain vector / matrix) as PyTorch holds it."""
    t = torch.from_numpy(np.array(ours, dtype=np.float32).reshape(shape))
    if len(shape) == 5:
        t = t.permute(0, 4, 1, 2, 3)
        if two_d:
            t = t[:, :, 0]
    return t.contiguous()


def from_torch_weight(t, ndim):
    """PyTorch's layout back to ours (flattened)."""
    t = t.detach()
    if ndim == 5:
        if t.dim() == 4:
            t = t.unsqueeze(2)
        t = t.permute(0, 2, 3, 4, 1)
    return t.contiguous().numpy().reshape(-1)


def load_probe(prefix):
    meta = json.load(open(prefix + ".json"))
    data = np.fromfile(prefix + ".bin", dtype=np.float32)
    return meta, data


def load_params(model, meta, values, two_d):
    state = model.state_dict()
    for p in meta["params"]:
        n = int(np.prod(p["shape"]))
        ours = values[p["offset"]:p["offset"] + n]
        t = to_torch_weight(ours, p["shape"], two_d)
        assert p["name"] in state, "no %s in MONAI's state_dict" % p["name"]
        assert tuple(state[p["name"]].shape) == tuple(t.shape), (p["name"], state[p["name"]].shape, t.shape)
        state[p["name"]] = t
    model.load_state_dict(state)


def cox_loss(risk, time, event):
    """Breslow: -sum_{events} (r_i - log sum_{t_j >= t_i} exp r_j) / #events; 0 without an event."""
    risk = risk.reshape(-1)
    at_risk = (time.reshape(1, -1) >= time.reshape(-1, 1)).to(risk.dtype)  # [i][j]: j in i's risk set
    log_den = torch.logsumexp(risk.reshape(1, -1) + torch.log(at_risk), dim=1)
    ev = event.reshape(-1)
    n_ev = ev.sum()
    if n_ev.item() == 0:
        return risk.sum() * 0
    return -((risk - log_den) * ev).sum() / n_ev


def task_loss(cfg, out, targets):
    h = cfg["model"]
    task = h["task"]
    if task == "classification":
        w = torch.tensor(h["class_weights"], dtype=out.dtype) if h["class_weights"] else None
        return F.cross_entropy(out, targets.reshape(-1).long(), weight=w)
    if task == "multilabel":
        pw = torch.tensor(h["pos_weight"], dtype=out.dtype) if h["pos_weight"] else None
        return F.binary_cross_entropy_with_logits(out, targets, pos_weight=pw)
    if task == "regression":
        return F.mse_loss(out, targets)
    return cox_loss(out, targets[:, 0], targets[:, 1])


class ReplayedReLU:
    """Makes every nn.ReLU of a model apply masks given in call order (a probe's: voxscale's y > 0 decisions) instead
    of its own, counting where its own input would have decided otherwise (flips). A ReLU's input within rounding of
    zero can fall on either side in two implementations; replaying one side's decisions takes that chance out of a
    comparison of everything else, and the count says how many there were (a wrong layer would flip many)."""

    def __init__(self, model):
        self.model, self.masks, self.sizes, self.flips, self.values = model, [], None, 0, 0
        for mod in model.modules():
            if isinstance(mod, torch.nn.ReLU):
                mod.forward = self.forward

    def call_sizes(self, x):
        """Each ReLU call's output size in call order, from a forward of x that moves no running statistic."""
        self.sizes, saved = [], [(b, b.clone()) for b in self.model.buffers()]
        with torch.no_grad():
            self.model(x)
        for b, v in saved:
            b.copy_(v)
        sizes, self.sizes = self.sizes, None
        return sizes

    def load(self, flat, sizes):
        self.masks = []
        at = 0
        for n in sizes:
            self.masks.append(torch.from_numpy(flat[at:at + n].copy()))
            at += n
        assert at == flat.size, "the probe's ReLU masks do not add up to the model's ReLU outputs"

    def forward(self, x):
        if not self.masks:
            if self.sizes is not None:
                self.sizes.append(x.numel())
            return torch.relu(x)
        m = self.masks.pop(0)
        nd = x.dim()
        # ours are NDHWC (2-D: N 1 H W C); PyTorch's NC(D)HW
        m = m.reshape((x.shape[0], *x.shape[2:], x.shape[1])).permute(0, nd - 1, *range(1, nd - 1)).to(x.dtype)
        self.flips += int(((x > 0).to(x.dtype) != m).sum())
        self.values += m.numel()
        return x * m


def run_probe_steps(prefix, dtype=torch.float32, replay_relu=False):
    """Replays a resnet3d probe in MONAI, in float32 or (dtype float64) in double precision, the exact answer float32
    results are measured against; replay_relu: with voxscale's ReLU decisions (ReplayedReLU). Returns (meta, data,
    results) with each step's outputs and loss, the last step's gradients (ours' layout, packed), the buffers after
    the steps, the evaluation outputs and, replaying, the ReLU values whose own decision differed (flips)."""
    meta, data = load_probe(prefix)
    cfg = meta["config"]
    torch.manual_seed(0)
    model = build_model(cfg)
    set_batchnorm(model, cfg)
    two_d = cfg["model"]["spatial_dims"] == 2
    load_params(model, meta, data[meta["param_values"]:], two_d)
    model = model.to(dtype)
    replay = ReplayedReLU(model) if replay_relu else None
    shape = meta["input_shape"]
    n, k, L = shape[0], meta["outputs_per_sample"], meta["labels_per_sample"]
    count = int(np.prod(shape))
    res = {"outputs": [], "loss": []}
    model.train()
    for st in meta["steps"]:
        x = torch.from_numpy(data[st["input"]:st["input"] + count].reshape(shape)).permute(0, 4, 1, 2, 3).to(dtype)
        if two_d:
            x = x[:, :, 0]
        y = torch.from_numpy(data[st["targets"]:st["targets"] + n * L].reshape(n, L).copy()).to(dtype)
        model.zero_grad(set_to_none=True)
        if replay:
            c = st["relu_masks_count"]
            replay.load(data[st["relu_masks"]:st["relu_masks"] + c], replay.call_sizes(x.contiguous()))
        out = model(x.contiguous())
        loss = task_loss(cfg, out, y)
        loss.backward()
        res["outputs"].append(out.detach().double().numpy().reshape(-1))
        res["loss"].append(float(loss))
        if replay:
            res["flips"], res["relu_values"] = replay.flips, replay.values
    named = dict(model.named_parameters())
    grads = np.zeros(meta["param_count"], dtype=np.float64)
    for p in meta["params"]:
        g = named[p["name"]].grad
        grads[p["offset"]:p["offset"] + int(np.prod(p["shape"]))] = from_torch_weight(g.double(), len(p["shape"]))
    res["grads"] = grads
    state = model.state_dict()
    res["buffers"] = {b["name"]: state[b["name"]].double().numpy().reshape(-1) for b in meta["buffers"]}
    if replay:
        replay.masks = []  # evaluation: its own ReLUs (no probe masks for it)
    model.eval()
    st = meta["steps"][0]
    x = torch.from_numpy(data[st["input"]:st["input"] + count].reshape(shape)).permute(0, 4, 1, 2, 3).to(dtype)
    if two_d:
        x = x[:, :, 0]
    with torch.no_grad():
        res["eval_outputs"] = model(x.contiguous()).double().numpy().reshape(-1)
    return meta, data, res


def bench(cfg, batch, iters, warmup, threads, device="cpu", tf32=1, amp="off", best=False):
    """Times MONAI's training step (forward, loss, backward, global-norm clip, AdamW) on random volumes: the baseline
    bench step puts voxscale's beside (bench/side_by_side.sh), the same fields as ae3d.py's bench. best: what a
    PyTorch 2.x user would pick for speed: channels_last_3d (3-D) model and input, the model under torch.compile,
    AdamW fused."""
    if best and not hasattr(torch, "compile"):
        raise SystemExit("resnet3d.py: --best needs PyTorch 2.x (torch.compile); this is %s" % torch.__version__)
    torch.set_num_threads(threads)
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cudnn.allow_tf32 = bool(tf32)
    model = build_model(cfg).to(dev)
    set_batchnorm(model, cfg)
    model.train()
    m = cfg["model"]
    d, h, w = m["input_size"]
    shape = (batch, m["in_channels"], d, h, w) if m["spatial_dims"] == 3 else (batch, m["in_channels"], h, w)
    x = torch.rand(*shape, device=dev)
    if best:
        fmt = torch.channels_last_3d if m["spatial_dims"] == 3 else torch.channels_last
        model, x = model.to(memory_format=fmt), x.to(memory_format=fmt)
    L = 1 if m["task"] == "classification" else 2 if m["task"] == "survival" else m["num_classes"]
    if m["task"] == "classification":
        y = torch.randint(0, m["num_classes"], (batch, 1)).float()
    elif m["task"] == "survival":
        y = torch.stack([torch.rand(batch), (torch.rand(batch) > 0.3).float()], 1)
    else:
        y = torch.rand(batch, L).round()
    y = y.to(dev)
    t = cfg["train"]
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["adam_eps"],
                            weight_decay=t["weight_decay"], **({"fused": True} if best else {}))
    params = list(model.parameters())
    if best:
        model = torch.compile(model)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    t_start = time.perf_counter()
    t_warm = 0.0
    for i in range(iters + warmup):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        # bf16 autocast as a MONAI script runs mixed precision (float32 weights, the loss in float32)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp == "bf16"):
            out = model(x)
        loss = task_loss(cfg, out.float(), y)
        loss.backward()
        if t["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, t["grad_clip"])
        opt.step()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
        elif i == warmup - 1:
            t_warm = time.perf_counter() - t_start
    med = float(np.median(times))
    import monai
    return {"framework": "monai %s / pytorch %s" % (monai.__version__, torch.__version__),
            "mode": "best (channels_last_3d, torch.compile, fused AdamW)" if best else "eager", "warmup_s": t_warm,
            "model": "monai.networks.nets.%s" % ("DenseNet" if m.get("family") == "densenet" else "ResNet"),
            "depth": m["depth"], "task": m["task"], "batch": batch,
            "threads": threads, "device": str(dev), "precision": "bf16 autocast" if amp == "bf16" else "fp32",
            "torch": torch.__version__, "step_ms_median": 1e3 * med,
            "step_ms_min": 1e3 * float(np.min(times)), "samples_per_s": batch / med, "iters": iters,
            "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=0)
    ap.add_argument("--iters", "--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--tf32", type=int, default=1)
    ap.add_argument("--amp", default="off", choices=["off", "bf16"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--best", action="store_true", help="PyTorch 2.x's fastest: channels_last_3d, torch.compile, "
                    "fused AdamW")
    ap.add_argument("--out", "--json", dest="out", default="")
    a = ap.parse_args()
    cfg = resolve(json.load(open(a.config)))
    batch = a.batch_size or cfg["train"]["batch_size"] or 2
    r = bench(cfg, batch, a.iters, a.warmup, a.threads, a.device, a.tf32, a.amp, a.best)
    print(json.dumps(r))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(r, f, indent=1)


# voxscale's defaults of the keys this script reads (src/core/config.c's schema table), for configs that leave them out
DEFAULTS = {"model": {"family": "resnet3d", "growth_rate": 32, "init_features": 64, "bn_size": 4,
                      "in_channels": 1, "depth": 18, "spatial_dims": 3, "conv1_t_size": 7, "conv1_t_stride": 1,
                      "no_max_pool": 0, "shortcut_type": "B", "widen_factor": 1.0, "bias_downsample": 1,
                      "bn_momentum": 0.1, "bn_eps": 1e-5, "task": "classification", "num_classes": 2,
                      "class_weights": [], "pos_weight": [], "input_size": [32, 32, 32]},
            "train": {"batch_size": 2, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "adam_eps": 1e-8,
                      "weight_decay": 0.01, "grad_clip": 1.0}}


def resolve(raw):
    cfg = json.loads(json.dumps(DEFAULTS))
    for sec in ("model", "train"):
        cfg[sec].update(raw.get(sec, {}))
    return cfg


if __name__ == "__main__":
    main()

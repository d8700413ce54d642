"""test_weights.py (issue 28): trained weights in and out of voxscale, against MONAI and PyTorch themselves.
- `voxscale export` loads into monai.networks.nets.ResNet with load_state_dict(strict=True) (safetensors' own reader),
  and MONAI's evaluation forward on volumes gives the probabilities `voxscale predict` writes for them;
- MONAI's weights (random, with non-trivial BatchNorm statistics), saved as a MedicalNet checkpoint and converted by
  bench/reference/convert_pth.py, initialise a run (--init-from) whose checkpoint exports back to exactly MONAI's
  tensors, and whose predictions are MONAI's logits; another num_classes gets a new head only when allowed;
- train.freeze leaves the first layers exactly as loaded, train.backbone_lr_mult scales the backbone's first AdamW
  step (|step| = lr at t = 1) and leaves the head's; a fine-tune from an export continues the loss curve."""
import csv
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, metrics, run

sys.path.insert(0, os.path.join(ROOT, "bench", "reference"))
pytestmark = pytest.mark.skipif(importlib.util.find_spec("monai") is None or
                                importlib.util.find_spec("safetensors") is None,
                                reason="MONAI and safetensors come with ci/deps.sh's .venv")
TINY = "configs/test/resnet-tiny.json"
CPU = ["--device", "cpu", "--set", "output.tensorboard=0"]


def volumes(folder, n, shape=(16, 16, 16), seed=0):
    """n NIfTI volumes of shape (x, y, z) with an oblique-free affine; a CSV listing them; their arrays."""
    import nibabel as nib
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    arrays = []
    for i in range(n):
        a = (rng.normal(size=shape) + np.linspace(-1, 1, shape[0])[:, None, None] * (i % 3)).astype(np.float32)
        aff = np.diag([0.8, 0.9, 1.2, 1.0])
        aff[:3, 3] = [10, -20, 30]
        img = nib.Nifti1Image(a, aff)
        img.header.set_qform(aff, 1)
        img.header.set_sform(aff, 2)
        nib.save(img, os.path.join(folder, "v%d.nii.gz" % i))
        arrays.append(a)
    with open(os.path.join(folder, "list.csv"), "w") as f:
        f.write("path\n" + "".join("v%d.nii.gz\n" % i for i in range(n)))
    return os.path.join(folder, "list.csv"), arrays


def as_batch(arrays):
    """nibabel's [x][y][z] arrays as PyTorch's [N][1][D][H][W] (our D, H, W are NIfTI's z, y, x)"""
    return torch.from_numpy(np.stack([a.transpose(2, 1, 0) for a in arrays])[:, None].copy())


def predictions(out):
    with open(os.path.join(out, "predictions.csv")) as f:
        return list(csv.DictReader(f))


def monai_model(config_path, **model):
    import resnet3d
    cfg = json.load(open(os.path.join(ROOT, config_path))) if isinstance(config_path, str) else config_path
    full = {"model": {"depth": 18, "spatial_dims": 3, "in_channels": 1, "conv1_t_size": 7, "conv1_t_stride": 1,
                      "no_max_pool": 0, "shortcut_type": "B", "widen_factor": 1, "num_classes": 2,
                      "bias_downsample": 1, "bn_momentum": 0.1, "bn_eps": 1e-5}}
    full["model"].update(cfg["model"])
    full["model"].update(model)
    m = resnet3d.build_model(full)
    resnet3d.set_batchnorm(m, full)
    return m


def test_export_loads_into_monai_strictly_and_predict_agrees(tmp_path):
    from safetensors.torch import load_file
    out = tmp_path / "run"
    run("train", "--config", TINY, "--out", out, "--steps", 6, *CPU)
    st = tmp_path / "w.safetensors"
    p = run("export", "--ckpt", out / "checkpoints" / "step_6.ckpt", "--out", st)
    assert "resnet3d, step 6" in p.stdout
    cfg = json.load(open(out / "config.json"))
    model = monai_model(cfg)
    sd = load_file(str(st))
    assert set(sd) == set(model.state_dict()), "export's keys are MONAI's state_dict's"
    assert all(sd[k].dtype == v.dtype for k, v in model.state_dict().items())
    assert model.load_state_dict(sd, strict=True) is not None
    assert int(sd["bn1.num_batches_tracked"]) == 6
    data, arrays = volumes(str(tmp_path / "vols"), 5)
    pred = tmp_path / "pred"
    run("predict", "--ckpt", out / "checkpoints" / "step_6.ckpt", "--data", data, "--out", pred,
        "--set", "data.normalize=none", "--device", "cpu")
    model.eval()
    with torch.no_grad():
        probs = torch.softmax(model(as_batch(arrays)), dim=1).numpy()
    rows = predictions(pred)
    ours = np.array([[float(r["prob_%d" % c]) for c in range(3)] for r in rows])
    assert [os.path.basename(r["path"]) for r in rows] == ["v%d.nii.gz" % i for i in range(5)]
    err = np.abs(ours - probs).max()
    print("max |p_voxscale - p_monai| = %.3g" % err)
    assert err < 2e-5, err
    assert [int(r["class"]) for r in rows] == list(probs.argmax(1))


def medicalnet_checkpoint(model, path):
    """MONAI's weights as a MedicalNet .pth holds them: {"state_dict": {"module.<key>": ...}} plus a segmentation
    head MONAI has no counterpart of"""
    sd = {"module." + k: v for k, v in model.state_dict().items()}
    sd["module.conv_seg.0.weight"] = torch.zeros(4, 64, 1, 1, 1)
    torch.save({"state_dict": sd, "epoch": 7}, path)


def test_monai_weights_init_from_same_weights_and_logits(tmp_path):
    from safetensors.torch import load_file
    torch.manual_seed(3)
    model = monai_model(TINY, widen_factor=0.125, depth=10, num_classes=3)
    with torch.no_grad():  # running statistics that matter in evaluation
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm3d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    pth, st = tmp_path / "medicalnet.pth", tmp_path / "medicalnet.safetensors"
    medicalnet_checkpoint(model, pth)
    conv = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "reference", "convert_pth.py"), str(pth), str(st),
                           "--source", "medicalnet"], capture_output=True, text=True, check=True)
    assert "1 dropped: module.conv_seg.0.weight" in conv.stdout
    # a step at lr 0 with BatchNorm's momentum 0 changes nothing: its checkpoint is the initialisation
    out = tmp_path / "run"
    p = run("train", "--config", TINY, "--out", out, "--steps", 1, "--init-from", st, "--set", "train.lr=0",
            "--set", "train.min_lr=0", "--set", "model.bn_momentum=0", *CPU)
    assert "65 of the model's 65 parameters and buffers loaded" in p.stdout
    back = tmp_path / "back.safetensors"
    run("export", "--ckpt", out / "checkpoints" / "step_1.ckpt", "--out", back)
    got, want = load_file(str(back)), model.state_dict()
    for k, v in want.items():
        if not k.endswith("num_batches_tracked"):
            assert torch.equal(got[k], v), k
    data, arrays = volumes(str(tmp_path / "vols"), 4, seed=5)
    pred = tmp_path / "pred"
    run("predict", "--ckpt", out / "checkpoints" / "step_1.ckpt", "--data", data, "--out", pred,
        "--set", "data.normalize=none", "--device", "cpu", "--batch-size", 3)
    model.eval()
    with torch.no_grad():
        probs = torch.softmax(model(as_batch(arrays)), dim=1).numpy()
    ours = np.array([[float(r["prob_%d" % c]) for c in range(3)] for r in predictions(pred)])
    assert np.abs(ours - probs).max() < 2e-5, np.abs(ours - probs).max()
    # predict straight from the converted file, with the config it lacks
    pred2 = tmp_path / "pred2"
    run("predict", "--weights", st, "--config", TINY, "--data", data, "--out", pred2, "--set", "data.normalize=none",
        "--device", "cpu", "--batch-size", 3)
    assert predictions(pred2) == predictions(pred)


def test_new_head_only_when_allowed(tmp_path):
    from safetensors.torch import load_file, save_file
    torch.manual_seed(4)
    model = monai_model(TINY, widen_factor=0.125, depth=10, num_classes=3)
    st = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(st))
    out = tmp_path / "run"
    p = run("train", "--config", TINY, "--out", out, "--steps", 1, "--init-from", st, "--set", "model.num_classes=5",
            *CPU, check=False)
    assert p.returncode == 2 and not out.exists()
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and str(st) in err[0] and '"fc.weight"' in err[0] and "[3, 64]" in err[0], p.stderr
    p = run("train", "--config", TINY, "--out", out, "--steps", 1, "--init-from", st, "--set", "model.num_classes=5",
            "--init-allow", "fc.*", "--set", "train.lr=0", "--set", "train.min_lr=0", "--set", "model.bn_momentum=0",
            *CPU)
    assert "2 of another shape or dtype in the file, initialised fresh" in p.stdout
    back = tmp_path / "back.safetensors"
    run("export", "--ckpt", out / "checkpoints" / "step_1.ckpt", "--out", back)
    got = load_file(str(back))
    assert got["fc.weight"].shape == (5, 64)
    for k, v in model.state_dict().items():
        if not k.startswith("fc.") and not k.endswith("num_batches_tracked"):
            assert torch.equal(got[k], v), k
    # weights of another family: one line naming the file and a key, exit 2, nothing written
    ae = tmp_path / "ae"
    run("train", "--config", "configs/test/tiny.json", "--out", ae, "--steps", 2, *CPU)
    run("export", "--ckpt", ae / "checkpoints" / "step_2.ckpt", "--out", tmp_path / "ae.safetensors")
    p = run("train", "--config", TINY, "--out", tmp_path / "x", "--init-from", tmp_path / "ae.safetensors", *CPU,
            check=False)
    assert p.returncode == 2 and not (tmp_path / "x").exists()
    last = p.stderr.strip().splitlines()
    assert len(last) == 1 and "ae.safetensors" in last[0] and "encoder.conv_in.weight" in last[0] and \
        "another family" in last[0], p.stderr


def test_freeze_and_backbone_lr(tmp_path):
    from safetensors.torch import load_file, save_file
    torch.manual_seed(5)
    model = monai_model(TINY, widen_factor=0.125, depth=10, num_classes=3)
    st = tmp_path / "w.safetensors"
    init = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(init, str(st))
    lr = 1e-3
    out = tmp_path / "run"
    p = run("train", "--config", TINY, "--out", out, "--steps", 1, "--init-from", st, "--set", "train.lr=%g" % lr,
            "--set", "train.warmup_steps=0", "--set", "train.weight_decay=0", "--set", "train.grad_clip=0",
            "--set", "train.freeze=conv1,bn1,layer1", "--set", "train.backbone_lr_mult=0.1", *CPU)
    assert "freeze: 9 of 41 parameter tensors not trained" in p.stdout
    assert "x 0.1 (train.backbone_lr_mult)" in p.stdout
    run("export", "--ckpt", out / "checkpoints" / "step_1.ckpt", "--out", tmp_path / "b.safetensors")
    got = load_file(str(tmp_path / "b.safetensors"))
    params = dict(model.named_parameters())
    frozen = [k for k in params if k.split(".")[0] in ("conv1", "bn1", "layer1")]
    assert len(frozen) == 9
    for k in frozen:
        assert torch.equal(got[k], init[k]), k
    # AdamW's first step is lr x g / (|g| + eps): every element with a gradient moves by its lr (those without one,
    # a 3^3 kernel's taps over layer4's padding at 1^3, stay)
    steps = {k: (got[k] - init[k]).abs() for k in params if k not in frozen}
    head = torch.cat([steps["fc.weight"].flatten(), steps["fc.bias"].flatten()])
    backbone = torch.cat([v.flatten() for k, v in steps.items() if not k.startswith("fc.")])
    backbone = backbone[backbone > 0]
    assert abs(float(head.median()) - lr) < 1e-3 * lr, float(head.median())
    assert abs(float(backbone.median()) - 0.1 * lr) < 1e-3 * lr, float(backbone.median())
    # a freeze that is not the first layers, or a prefix naming nothing, is refused before anything is written
    for bad, said in (("layer2", "is frozen but conv1.weight"), ("layer9", "the start of no parameter")):
        p = run("train", "--config", TINY, "--out", tmp_path / "x", "--steps", 1, "--set", "train.freeze=" + bad, *CPU,
                check=False)
        assert p.returncode == 2 and said in p.stderr and not (tmp_path / "x").exists(), p.stderr


def test_fine_tune_from_export_continues_the_loss_curve(tmp_path):
    """ae3d: 30 steps, export, then a fresh run from the export: its first loss is near where the first run ended,
    far below where it began (a fresh initialisation starts over)"""
    first = tmp_path / "a"
    run("train", "--config", "configs/test/tiny.json", "--out", first, "--steps", 30, "--set", "train.log_every=1",
        *CPU)
    run("export", "--ckpt", first / "checkpoints" / "step_30.ckpt", "--out", tmp_path / "a.safetensors")
    second = tmp_path / "b"
    run("train", "--config", "configs/test/tiny.json", "--out", second, "--steps", 5, "--set", "train.log_every=1",
        "--init-from", tmp_path / "a.safetensors", *CPU)
    a = [m["loss"] for m in metrics(first) if "loss" in m]
    b = [m["loss"] for m in metrics(second) if "loss" in m]
    end = float(np.mean(a[-5:]))
    print("first run: %.4f -> %.4f; fine-tune from its export starts at %.4f" % (a[0], end, b[0]))
    assert abs(b[0] - end) < 0.25 * end, (a, b)
    assert b[0] < a[0] - 0.75 * (a[0] - end), (a, b)


# ---- densenet (issue 39): MONAI's DenseNet121 in and out, and torchvision's names through convert_pth.py ---------

DENSE = ["--config", TINY, "--set", "model.family=densenet", "--set", "model.depth=121", "--set",
         "model.spatial_dims=2", "--set", "model.input_size=[1, 64, 64]", "--set", "model.growth_rate=4", "--set",
         "model.init_features=8", "--set", "model.bn_size=2", "--set", "model.task=multilabel", "--set",
         "model.num_classes=3"]


def dense_monai(in_channels=1):
    import resnet3d
    cfg = {"model": {"family": "densenet", "depth": 121, "spatial_dims": 2, "in_channels": in_channels,
                     "num_classes": 3, "growth_rate": 4, "init_features": 8, "bn_size": 2, "bn_momentum": 0.1,
                     "bn_eps": 1e-5}}
    m = resnet3d.build_model(cfg)
    resnet3d.set_batchnorm(m, cfg)
    return m


def films(folder, n, seed=0):
    """n 8-bit grey PNG films of 64 x 64 (the input: read as stored, no resize) and a CSV; their arrays."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    arrays = []
    for i in range(n):
        a = rng.integers(0, 256, (64, 64)).astype(np.uint8)
        Image.fromarray(a).save(os.path.join(folder, "f%d.png" % i))
        arrays.append(a.astype(np.float32))
    with open(os.path.join(folder, "list.csv"), "w") as f:
        f.write("path\n" + "".join("f%d.png\n" % i for i in range(n)))
    return os.path.join(folder, "list.csv"), torch.from_numpy(np.stack(arrays)[:, None].copy())


def test_densenet_export_loads_into_monai_strictly_and_predict_agrees(tmp_path):
    pytest.importorskip("PIL")
    from safetensors.torch import load_file
    out = tmp_path / "run"
    run("train", *DENSE, "--out", out, "--steps", 4, *CPU)
    st = tmp_path / "w.safetensors"
    p = run("export", "--ckpt", out / "checkpoints" / "step_4.ckpt", "--out", st)
    assert "densenet, step 4" in p.stdout, p.stdout
    model, sd = dense_monai(), load_file(str(st))
    assert set(sd) == set(model.state_dict()), "export's keys are MONAI's state_dict's"
    model.load_state_dict(sd, strict=True)
    data, batch = films(str(tmp_path / "films"), 5)
    pred = tmp_path / "pred"
    run("predict", "--ckpt", out / "checkpoints" / "step_4.ckpt", "--data", data, "--out", pred,
        "--set", "data.normalize=none", "--device", "cpu")
    model.eval()
    with torch.no_grad():
        probs = torch.sigmoid(model(batch)).numpy()
    ours = np.array([[float(r["prob_%d" % c]) for c in range(3)] for r in predictions(pred)])
    assert np.abs(ours - probs).max() < 2e-5, np.abs(ours - probs).max()


def test_torchvision_densenet_names_init_from_to_monais_tensors(tmp_path):
    """A torchvision-named DenseNet121 checkpoint (CheXNet's layout: "module.densenet121." before every key, the old
    "norm.1" names, classifier as a Sequential's "classifier.0") converts to MONAI's names, initialises a run that
    exports back to exactly those tensors, and predicts MONAI's probabilities."""
    pytest.importorskip("PIL")
    from safetensors.torch import load_file
    import re
    torch.manual_seed(7)
    model = dense_monai(in_channels=3)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    tv = {}
    for k, v in model.state_dict().items():  # MONAI's names written as torchvision's old checkpoints hold them
        k = re.sub(r"\.layers\.(norm|conv)([12])\.", r".\1.\2.", k)
        k = k.replace("class_layers.out.", "classifier.0.")
        tv["module.densenet121." + k] = v
    pth, st = tmp_path / "chexnet.pth", tmp_path / "chexnet.safetensors"
    torch.save({"state_dict": tv, "epoch": 3}, pth)
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "reference", "convert_pth.py"), str(pth), str(st),
                    "--source", "torchvision-densenet"], check=True, capture_output=True, text=True)
    assert set(load_file(str(st))) == set(model.state_dict())
    out = tmp_path / "run"
    run("train", *DENSE, "--set", "model.in_channels=3", "--out", out, "--steps", 1, "--init-from", st,
        "--set", "train.lr=0", "--set", "train.min_lr=0", "--set", "model.bn_momentum=0", *CPU)
    back = tmp_path / "back.safetensors"
    run("export", "--ckpt", out / "checkpoints" / "step_1.ckpt", "--out", back)
    got = load_file(str(back))
    for k, v in model.state_dict().items():
        if not k.endswith("num_batches_tracked"):
            assert torch.equal(got[k], v), k
    data, batch = films(str(tmp_path / "films"), 3, seed=2)
    pred = tmp_path / "pred"
    run("predict", "--ckpt", out / "checkpoints" / "step_1.ckpt", "--data", data, "--out", pred,
        "--set", "data.normalize=none", "--device", "cpu")
    model.eval()
    with torch.no_grad():  # a grey film read for 3 channels is repeated over them
        probs = torch.sigmoid(model(batch.repeat(1, 3, 1, 1))).numpy()
    ours = np.array([[float(r["prob_%d" % c]) for c in range(3)] for r in predictions(pred)])
    assert np.abs(ours - probs).max() < 2e-5, np.abs(ours - probs).max()

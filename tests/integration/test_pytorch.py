"""The whole model against the same model in PyTorch (bench/reference/ae3d.py), in float64, on one fixed batch:
`voxscale probe` writes the input, the noise, the parameters, the output, the losses and the gradients; PyTorch
recomputes all of them from the same input, noise and parameters."""
import os
import sys

import pytest

from conftest import ROOT, run

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(ROOT, "bench", "reference"))
import ae3d  # noqa: E402


def rel(a, b):
    return float((a - b).norm() / (b.norm() + 1e-30))


@pytest.mark.parametrize("config,extra", [
    ("configs/test/probe.json", []),                                  # MSE, 3 levels, 6/12 channels, 2 input channels
    ("configs/test/tiny.json", []),                                   # L1, 2 levels
    ("configs/test/probe.json", ["--set", "model.res_blocks=2", "--set", "model.loss=\"l1\"",
                                 "--batch-size", "3"]),               # identity shortcuts, odd batch
    ("configs/test/probe.json", ["--set", "train.fuse=0"]),           # GroupNorm and SiLU as two ops
])
def test_loss_output_and_gradients_match_pytorch(tmp_path, config, extra):
    prefix = str(tmp_path / "probe")
    run("probe", "--config", config, "--out", prefix, *extra)
    meta, model, x, eps, recon_c, grads_c = ae3d.load_probe(prefix)
    total, rec, kl, recon = ae3d.step_loss(model, x, eps)
    total.backward()
    assert abs(meta["losses"]["recon"] - rec.item()) <= 1e-5 * abs(rec.item())
    assert abs(meta["losses"]["kl"] - kl.item()) <= 1e-5 * abs(kl.item()) + 1e-9
    assert abs(meta["losses"]["total"] - total.item()) <= 1e-5 * abs(total.item())
    assert rel(recon_c, recon.detach()) <= 1e-5
    named = dict(model.named_parameters())
    assert set(named) == set(grads_c)
    for name, p in named.items():
        assert p.grad is not None, name
        err = rel(grads_c[name], p.grad)
        assert err <= 1e-4, "%s: gradient relative error %.3g" % (name, err)


def test_probe_detects_a_wrong_gradient(tmp_path):
    """The comparison above can fail: a perturbed C gradient is caught."""
    prefix = str(tmp_path / "probe")
    run("probe", "--config", "configs/test/tiny.json", "--out", prefix)
    meta, model, x, eps, recon_c, grads_c = ae3d.load_probe(prefix)
    total, _, _, _ = ae3d.step_loss(model, x, eps)
    total.backward()
    name = "decoder.conv_out.weight"
    grads_c[name] = grads_c[name].clone()
    grads_c[name].view(-1)[0] += 0.01 * grads_c[name].norm()
    assert rel(grads_c[name], dict(model.named_parameters())[name].grad) > 1e-3

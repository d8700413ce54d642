"""The CPU DRR op (kernels/drr) against PyTorch in float64: build/tests/test_drr --dump writes each case's volume,
image, upstream gradient and the op's dx; here the same volume goes through drr.h's formula in torch -- the line
integral spacing * sum(mu_scale * x) along h (view 0) or w (view 1), F.interpolate(mode="bilinear",
align_corners=False) to [img][img], 1 - exp(-L) -- and autograd gives dx for the same dimg. Cases: the AP view
upsampled, the lateral view downsampled, a cube at its own size."""
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT, TESTS

BIN = os.path.join(TESTS, "test_drr")


def load(d, case, what):
    return torch.from_numpy(np.fromfile(os.path.join(d, "%s.%s.f32" % (case, what)), dtype=np.float32).astype(np.float64))


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    if not os.access(BIN, os.X_OK):
        pytest.fail("%s is missing: run `make build/tests/test_drr` (make test builds it)" % BIN)
    d = str(tmp_path_factory.mktemp("drr"))
    subprocess.run([BIN, "--dump", d], check=True, timeout=60)
    return d


@pytest.mark.parametrize("case", ["ap_up", "lateral_down", "cube"])
def test_drr_matches_torch_float64(dumped, case):
    with open(os.path.join(dumped, case + ".shape")) as f:
        fields = f.read().split()
    n, d, h, w, view, img = map(int, fields[:6])
    mu_scale, spacing = map(float, fields[6:])
    x = load(dumped, case, "x").reshape(n, d, h, w).requires_grad_()
    line = spacing * (mu_scale * x).sum(dim=2 if view == 0 else 3)  # [n][d][w] or [n][d][h]
    resampled = F.interpolate(line[:, None], size=(img, img), mode="bilinear", align_corners=False)[:, 0]
    drr = 1 - torch.exp(-resampled)
    dimg = load(dumped, case, "dimg").reshape(n, img, img)
    (dx,) = torch.autograd.grad(drr, (x,), grad_outputs=dimg)
    got = {"img": load(dumped, case, "img").reshape(n, img, img), "dx": load(dumped, case, "dx").reshape(n, d, h, w)}
    for name, want in (("img", drr.detach()), ("dx", dx)):
        err = (got[name] - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
        assert err < 1e-5, "%s %s: max error %.3g of the largest value" % (case, name, err)
    assert drr.min().item() > 0 and drr.max().item() < 1  # attenuation only: a fraction of the beam absorbed

"""The CPU attention op (kernels/attention) against PyTorch in float64, attention written out (Debian's torch 1.13
has no fused SDPA): build/tests/test_attention --dump writes each case's inputs and the op's outputs; here the same
inputs go through softmax(scale q k^T) v per head in float64 and autograd gives dq, dk, dv for the same dout.
Cases: self-attention read from packed QKV rows, cross-attention with more keys than a tile, peaked scores."""
import os
import subprocess

import numpy as np
import pytest
import torch

from conftest import ROOT, TESTS

BIN = os.path.join(TESTS, "test_attention")


def load(d, case, what):
    return np.fromfile(os.path.join(d, "%s.%s.f32" % (case, what)), dtype=np.float32).astype(np.float64)


def heads(x, batch, tokens, ld, h, d):
    """[batch][tokens][ld] rows -> [batch][heads][tokens][d] (head h's columns h*d .. h*d+d)"""
    x = torch.from_numpy(x).reshape(batch, tokens, ld)[:, :, : h * d].reshape(batch, tokens, h, d)
    return x.permute(0, 2, 1, 3).contiguous()


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    if not os.access(BIN, os.X_OK):
        pytest.fail("%s is missing: run `make build/tests/test_attention` (make test builds it)" % BIN)
    d = str(tmp_path_factory.mktemp("attention"))
    subprocess.run([BIN, "--dump", d], check=True, timeout=120)
    return d


@pytest.mark.parametrize("case", ["self_packed", "cross", "peaked"])
def test_attention_matches_torch_float64(dumped, case):
    with open(os.path.join(dumped, case + ".shape")) as f:
        b, h, tq, tk, d, ld_q, ld_k, ld_v, ld_o, scale = f.read().split()
    b, h, tq, tk, d, ld_q, ld_k, ld_v, ld_o = map(int, (b, h, tq, tk, d, ld_q, ld_k, ld_v, ld_o))
    scale = float(scale)
    q = heads(load(dumped, case, "q"), b, tq, ld_q, h, d).requires_grad_()
    k = heads(load(dumped, case, "k"), b, tk, ld_k, h, d).requires_grad_()
    v = heads(load(dumped, case, "v"), b, tk, ld_v, h, d).requires_grad_()
    dout = heads(load(dumped, case, "dout"), b, tq, ld_o, h, d)
    s = scale * q @ k.transpose(-1, -2)
    o = torch.softmax(s, dim=-1) @ v
    lse = torch.logsumexp(s, dim=-1)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), grad_outputs=dout)
    got = {
        "o": heads(load(dumped, case, "o"), b, tq, ld_o, h, d),
        "lse": torch.from_numpy(load(dumped, case, "lse")).reshape(b, h, tq),
        "dq": heads(load(dumped, case, "dq"), b, tq, ld_q, h, d),
        "dk": heads(load(dumped, case, "dk"), b, tk, ld_k, h, d),
        "dv": heads(load(dumped, case, "dv"), b, tk, ld_v, h, d),
    }
    want = {"o": o, "lse": lse, "dq": dq, "dk": dk, "dv": dv}
    for name, w in want.items():
        w = w.detach()
        err = (got[name] - w).abs().max().item() / max(w.abs().max().item(), 1e-30)
        assert err < 2e-5, "%s %s: max error %.3g of the largest value" % (case, name, err)

"""The GPU attention (kernels/attention: cuDNN's fused attention, or the own kernel) against PyTorch in float64 and
against each other, in bf16 and fp16: build/tests/test_attention --dump DIR cuda DTYPE runs test_attention_torch.py's
three cases (packed QKV rows, cross-attention with 300 keys, peaked scores) on the CUDA backend with the inputs
rounded to the storage type, under VX_ATTN_CUDA=cudnn (cuDNN must run every case: a shape it cannot run is exit 2)
and VX_ATTN_CUDA=own. Each is held to op_check.c's bound for the storage type against float64 (bf16 1.6e-2, fp16
2e-3 of the largest value), and the two paths to twice that against each other. The cuDNN run's VX_ATTN_LOG must
show cuDNN chosen and agreeing with the own kernel at its first call. Skips without a GPU (fails under
VX_REQUIRE_GPU=1); ci/gpu.sh runs it in its ops step."""
import os
import subprocess

import numpy as np
import pytest
import torch

from conftest import ROOT, TESTS
from test_attention_torch import heads, load

# ci/gpu.sh runs the carried unit tests from VX_TESTS (the GPU machine has no build/ of its own)
BIN = os.path.join(TESTS, "test_attention")
BOUND = {"bf16": 1.6e-2, "f16": 2e-3}
CASES = ["self_packed", "cross", "peaked"]
_runs = {}


def dumped(tmp_path_factory, dtype, mode):
    key = (dtype, mode)
    if key not in _runs:
        if not os.access(BIN, os.X_OK):
            pytest.fail("%s is missing: run `make build/tests/test_attention`" % BIN)
        d = str(tmp_path_factory.mktemp("attention_%s_%s" % (dtype, mode)))
        env = dict(os.environ, VX_ATTN_CUDA=mode, VX_ATTN_LOG="1")
        r = subprocess.run([BIN, "--dump", d, "cuda", dtype], env=env, capture_output=True, text=True, timeout=300)
        _runs[key] = (d, r)
    d, r = _runs[key]
    if r.returncode == 77:
        if os.environ.get("VX_REQUIRE_GPU", "0") not in ("", "0"):
            pytest.fail("no CUDA device, and VX_REQUIRE_GPU=1 turns the skip into a failure: " + r.stdout.strip())
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, "test_attention --dump %s cuda %s (VX_ATTN_CUDA=%s) exited %d: %s" % (
        d, dtype, mode, r.returncode, (r.stdout + r.stderr)[-2000:])
    return d, r.stderr


def outputs(d, case):
    with open(os.path.join(d, case + ".shape")) as f:
        b, h, tq, tk, dd, ld_q, ld_k, ld_v, ld_o, scale = f.read().split()
    b, h, tq, tk, dd, ld_q, ld_k, ld_v, ld_o = map(int, (b, h, tq, tk, dd, ld_q, ld_k, ld_v, ld_o))
    t = lambda what, tokens, ld: heads(load(d, case, what), b, tokens, ld, h, dd)  # noqa: E731
    ins = {"q": t("q", tq, ld_q), "k": t("k", tk, ld_k), "v": t("v", tk, ld_v), "dout": t("dout", tq, ld_o)}
    outs = {"o": t("o", tq, ld_o), "lse": torch.from_numpy(load(d, case, "lse")).reshape(b, h, tq),
            "dq": t("dq", tq, ld_q), "dk": t("dk", tk, ld_k), "dv": t("dv", tk, ld_v)}
    return ins, outs, float(scale)


def rel_err(got, want):
    return (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)


@pytest.mark.parametrize("mode", ["cudnn", "own"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("case", CASES)
def test_cuda_attention_matches_torch_float64(tmp_path_factory, dtype, mode, case):
    d, _ = dumped(tmp_path_factory, dtype, mode)
    ins, got, scale = outputs(d, case)
    q, k, v = (ins[x].clone().requires_grad_() for x in "qkv")  # the rounded values the op read
    s = scale * q @ k.transpose(-1, -2)
    o = torch.softmax(s, dim=-1) @ v
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), grad_outputs=ins["dout"])
    want = {"o": o, "lse": torch.logsumexp(s, dim=-1), "dq": dq, "dk": dk, "dv": dv}
    for name, w in want.items():
        err = rel_err(got[name], w.detach())
        assert err < BOUND[dtype], "%s %s %s %s: max error %.3g of the largest value (bound %.3g)" % (
            mode, dtype, case, name, err, BOUND[dtype])


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_cudnn_path_ran_and_agrees_with_own(tmp_path_factory, dtype):
    d_c, log = dumped(tmp_path_factory, dtype, "cudnn")
    d_o, _ = dumped(tmp_path_factory, dtype, "own")
    for direction in ("forward", "backward"):
        assert sum("%s: cuDNN fused attention, engine" % direction in l for l in log.splitlines()) == len(CASES), log
        assert sum("%s: cuDNN agrees with the own kernel" % direction in l for l in log.splitlines()) == len(CASES), log
    assert "runs the own kernel" not in log and "own kernel:" not in log, log
    for case in CASES:
        _, a, _ = outputs(d_c, case)
        _, b, _ = outputs(d_o, case)
        for name in a:
            err = rel_err(a[name], b[name])
            assert err < 2 * BOUND[dtype], "%s %s %s: cuDNN and own differ by %.3g of the largest value" % (
                dtype, case, name, err)

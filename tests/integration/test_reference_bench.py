"""bench/reference/ae3d.py as a benchmark: the PyTorch baseline ci/gpu.sh times beside voxscale on a GPU (bf16
autocast, channels_last_3d, fused AdamW, eager and torch.compile). No GPU here, so the same code runs on the CPU on
the tiny config, eager, in fp32 and bf16 autocast with channels_last_3d, and every JSON line it prints must carry
the fields the GPU step's table (ci/gpu/amp_table.py) reads and those that say what was run. A few seconds."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")
SCRIPT = os.path.join(ROOT, "bench", "reference", "ae3d.py")
sys.path.insert(0, os.path.join(ROOT, "ci", "gpu"))
import amp_table  # noqa: E402

# what every run's line carries besides what amp_table reads: how it was run (layout, optimizer, scaler, threads)
FIELDS = set(amp_table.PT_FIELDS) | {"framework", "config", "device", "input_size", "tf32", "layout_checked",
                                      "fused_adamw", "grad_scaler", "step_ms_min", "warmup_s",
                                      "peak_memory_steady_mib", "memory_at_start_mib", "cudnn_benchmark", "threads"}


def reference(*args, timeout=120):
    return subprocess.run([sys.executable, SCRIPT, "--config", "configs/test/tiny.json", "--bench", "--device", "cpu",
                           "--threads", "1", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_eager_fp32_and_bf16_channels_last(tmp_path):
    out = tmp_path / "runs.json"
    p = reference("--modes", "eager", "--dtypes", "fp32,bf16", "--channels-last", "--iters", "2", "--warmup", "1",
                  "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = json_lines(p.stdout)
    assert [(r["mode"], r["dtype"]) for r in lines] == [("eager", "fp32"), ("eager", "bf16")]
    for r in lines:
        missing = sorted(FIELDS - set(r))
        assert not missing, "%s run lacks %s" % (r["dtype"], missing)
        assert r["batch"] == 2 and r["input_size"] == [8, 8, 8] and r["iters"] == 2 and r["warmup"] == 1
        # channels_last_3d asked for and checked on the input and every 5-D parameter
        assert r["channels_last"] == 1 and r["layout_checked"] == 1
        assert r["fused_adamw"] == 0 and r["grad_scaler"] == 0  # fused AdamW is for CUDA; no scaler for bf16
        assert 0 < r["step_ms_min"] <= r["step_ms_median"]
        assert r["samples_per_s"] == pytest.approx(r["batch"] / (r["step_ms_median"] * 1e-3), rel=1e-9)
        assert r["peak_memory_mib"] is None  # CUDA's allocator statistics only; the GPU step requires them
        assert r["threads"] == 1
    # --out holds the same runs
    assert json.load(open(out))["runs"] == lines


def test_contiguous_layout_and_single_run():
    """Without --channels-last the lines say so; one run prints one line (and --out would hold it alone)."""
    p = reference("--dtype", "bf16", "--iters", "1", "--warmup", "0")
    assert p.returncode == 0, p.stdout + p.stderr
    (r,) = json_lines(p.stdout)
    assert (r["mode"], r["dtype"], r["channels_last"], r["layout_checked"]) == ("eager", "bf16", 0, 1)


def test_fp16_uses_a_grad_scaler_or_is_refused():
    """fp16 runs with a GradScaler where this PyTorch autocasts to fp16 on the CPU, and is refused, not timed as
    fp32 in disguise, where it does not (Debian's 1.13)."""
    p = reference("--dtype", "fp16", "--iters", "1", "--warmup", "1")
    if p.returncode == 0:
        (r,) = json_lines(p.stdout)
        assert r["dtype"] == "fp16" and r["grad_scaler"] == 1
    else:
        assert p.returncode == 1 and "does not run convolutions in fp16" in p.stderr, p.stderr
        assert json_lines(p.stdout) == []


def test_a_bad_dtype_list_is_refused():
    p = reference("--dtypes", "bf16,int8")
    assert p.returncode == 2 and "--dtypes takes fp32, bf16 and/or fp16" in p.stderr.splitlines()[-1], p.stderr

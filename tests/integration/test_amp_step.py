"""ci/gpu/steps.sh's amp-64 step without a GPU: the real step function, with a stand-in for voxscale's
`bench step --amp bf16 [--compile]` (the C side of issue 12 is written elsewhere; the stand-in writes a result
shaped like bench.c's, tiny config, batch 2) and PyTorch on the CPU (a wrapper turns ae3d.py's `--device cuda` into
`--device cpu` on configs/test/tiny.json). Checks the wiring the dry run cannot: both voxscale runs are asked for,
PyTorch gets voxscale's batch, bf16, channels_last_3d and the step's modes, the table is written and its line is the
step's figure, and a voxscale that cannot run --compile fails the step."""
import json
import os
import stat
import subprocess
import sys
import time

import pytest

from conftest import ROOT

pytest.importorskip("torch")

FAKE_VOXSCALE = r'''#!%(python)s
"""stand-in for `voxscale bench step`: records its arguments, writes a bf16 result for the tiny config"""
import json, os, sys
args = sys.argv[1:]
open(os.environ["FAKE_LOG"], "a").write(" ".join(args) + "\n")
if "--compile" in args and os.environ.get("FAKE_NO_COMPILE"):
    print("voxscale: unknown option '--compile'", file=sys.stderr)
    sys.exit(2)
opt = lambda k: args[args.index(k) + 1]
step = 4.0 if "--compile" in args else 5.0
r = {"benchmark": "step", "config": os.path.basename(opt("--config"))[:-5], "device": "fake-gpu", "backend": "cuda",
     "device_detail": "a stand-in", "tf32": 1, "commit": "0000000", "batch": 2, "input_size": [8, 8, 8],
     "warmup": int(opt("--warmup")), "iters": int(opt("--iters")), "step_ms_median": step,
     "samples_per_s": 2 / (step * 1e-3), "conv_gflops": 1.0, "ceiling_gflops": 2.0, "peak_memory_mib": 12.5,
     "precision": opt("--amp"), "compile": int("--compile" in args), "forward_ms": 1.0, "backward_ms": 2.5,
     "optimizer_ms": 0.2, "conv_ms": 3.0, "own_kernels_ms": 0.6}
d = os.path.join(opt("--results"), "fake-gpu")
os.makedirs(d, exist_ok=True)
json.dump(r, open(os.path.join(d, "step_%%s.json" %% r["config"]), "w"))
print("written: %%s/step_%%s.{json,md}" %% (d, r["config"]))
'''

CPU_PYTHON = r'''#!%(python)s
"""the machine's python for the step: ae3d.py on the CPU and the tiny config instead of CUDA and the GPU configs"""
import os, sys
args = sys.argv[1:]
if args and args[0].endswith("ae3d.py"):
    open(os.environ["FAKE_LOG"], "a").write("pytorch " + " ".join(args[1:]) + "\n")
    args = [{"cuda": "cpu"}.get(a, a) for a in args]
    args[args.index("--config") + 1] = "configs/test/tiny.json"
    args += ["--threads", "1"]
os.execv(sys.executable, [sys.executable] + args)
'''


def script(path, text):
    path.write_text(text % {"python": sys.executable})
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def run_step(tmp_path, quick, **env):
    step_dir, figure, log = tmp_path / "step", tmp_path / "figure", tmp_path / "calls.log"
    step_dir.mkdir()
    e = dict(os.environ, VX_BIN=script(tmp_path / "voxscale", FAKE_VOXSCALE),
             VX_PYTHON=script(tmp_path / "python", CPU_PYTHON), VX_STEP_DIR=str(step_dir), VX_STEP_FIGURE=str(figure),
             VX_STEP_DEADLINE=str(int(time.time()) + 60), VX_QUICK=str(int(quick)), VX_ORIG_LD_SET="0",
             FAKE_LOG=str(log), **env)
    p = subprocess.run(["bash", "-c", ". ci/gpu/steps.sh && step_amp_64"], cwd=ROOT, env=e, capture_output=True,
                       text=True, timeout=120)
    return p, figure.read_text().strip(), log.read_text().splitlines(), step_dir


def test_quick_amp_step_wires_voxscale_pytorch_and_the_table(tmp_path):
    p, figure, calls, step_dir = run_step(tmp_path, quick=True)
    assert p.returncode == 0, p.stdout + p.stderr
    vx = [c for c in calls if c.startswith("bench step")]
    assert len(vx) == 2 and "--amp bf16 --compile" in vx[0] and "--compile" not in vx[1] and "--amp bf16" in vx[1]
    assert all("--config configs/ae3d-64.json --device cuda" in c and "--iters 5 --warmup 2" in c for c in vx)
    (pt,) = [c for c in calls if c.startswith("pytorch")]
    for want in ("--device cuda", "--batch-size 2", "--modes eager", "--dtypes bf16", "--channels-last",
                 "--cudnn-benchmark 0,1"):
        assert want in pt, pt
    lines = [json.loads(l) for l in open(step_dir / "pytorch_amp_ae3d-64.jsonl")]
    assert [(r["mode"], r["dtype"], r["channels_last"], r["batch"], r["cudnn_benchmark"]) for r in lines] == [
        ("eager", "bf16", 1, 2, 0), ("eager", "bf16", 1, 2, 1)]  # PyTorch eager at both settings: the faster counts
    assert figure.startswith("ae3d-64 bf16 batch 2: voxscale --compile 4.00 ms, 500.0 samples/s = "), figure
    assert "compile not run (PyTorch compile not asked for in this run)" in figure
    md = (step_dir / "amp_ae3d-64.md").read_text()
    assert "| step (median) | 4.00 ms (of 5) | 5.00 ms (of 5) |" in md
    assert "channels_last_3d on, AdamW, not fused" in md  # what the CPU ran, as its line says
    assert json.load(open(step_dir / "amp_ae3d-64.json"))["problems"] == []


def test_a_voxscale_without_compile_fails_the_step(tmp_path):
    p, figure, calls, step_dir = run_step(tmp_path, quick=True, FAKE_NO_COMPILE="1")
    assert p.returncode == 1
    assert "voxscale bf16 compile: voxscale: unknown option '--compile'" in figure
    assert "no voxscale --compile result" in figure
    assert any(c.startswith("pytorch") for c in calls)  # PyTorch still ran: its figures are kept in the logs

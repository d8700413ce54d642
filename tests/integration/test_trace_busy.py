"""test_trace_busy.py: bench/trace_busy.py, the GPU-busy measure of ci/gpu.sh's profile step and test_cuda.py's trace
test, on a real profiled CPU run (whose trace has no device records) and on that trace with device records added
where a GPU trace has them: the step attribution, the interval union and the bounds must be right before a GPU
run relies on them."""
import copy
import gzip
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, metrics, run

sys.path.insert(0, os.path.join(ROOT, "bench"))
import trace_busy  # noqa: E402

SCRIPT = os.path.join(ROOT, "bench", "trace_busy.py")


def test_union_of_overlapping_intervals():
    assert trace_busy.union_us([]) == 0
    assert trace_busy.union_us([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20
    assert trace_busy.union_us([(3, 4), (0, 1)]) == 2


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("busy") / "run"
    run("train", "--config", "configs/test/tiny.json", "--steps", "4", "--out", out, "--device", "cpu",
        "--set", "train.log_every=1", "--set", "train.val_every=0", "--set", "output.tensorboard=0", "--profile", "2:3")
    return out


def test_cpu_trace_has_steps_and_no_device_time(profiled):
    trace, steps = trace_busy.load(str(profiled))
    rows = trace_busy.busy_per_step(trace, steps)
    assert [r["step"] for r in rows] == [2, 3]
    for r in rows:
        assert r["busy_ms"] == 0 and r["kernels"] == 0 and r["step_ms"] > 0
    # the bound is a real check: a trace without device time fails --min, and the script says which step
    p = subprocess.run([sys.executable, SCRIPT, str(profiled), "--min", "0.5"], capture_output=True, text=True)
    assert p.returncode == 1 and "2 of 2 steps outside" in p.stdout, p.stdout + p.stderr


def test_device_records_are_attributed_to_their_step(profiled, tmp_path):
    trace, steps = trace_busy.load(str(profiled))
    ranges = {int(e["name"].split("#")[1]): e for e in trace["traceEvents"]
              if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")}
    r2, r3 = ranges[2], ranges[3]
    window2 = steps[2]["step_ms"] - steps[2]["data_wait_ms"]
    # step 2: two overlapping kernels and a copy beside them covering 40% of its window; step 3: nothing
    t0, span = r2["ts"] + 1, 0.4 * window2 * 1e3
    extra = [
        {"ph": "X", "cat": "kernel", "name": "void gn_stats_kernel<4>()", "ts": t0, "dur": span / 2, "args": {}},
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_fprop", "ts": t0 + span / 4, "dur": span * 3 / 4, "args": {}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": t0 + span / 2, "dur": span / 4, "args": {}},
        # a kernel that starts after step 3's range belongs to no profiled step
        {"ph": "X", "cat": "kernel", "name": "late", "ts": r3["ts"] + r3["dur"] + 5, "dur": 1e6, "args": {}},
    ]
    t = copy.deepcopy(trace)
    t["traceEvents"] += extra
    rows = {r["step"]: r for r in trace_busy.busy_per_step(t, steps)}
    assert rows[2]["kernels"] == 2 and rows[3]["kernels"] == 0 and rows[3]["busy_ms"] == 0
    assert rows[2]["busy_ms"] == pytest.approx(span / 1e3)                  # the union, not the 1.5x sum
    assert rows[2]["kernel_ms"] == pytest.approx(1.25 * span / 1e3)
    assert rows[2]["fraction"] == pytest.approx(0.4)
    # and through the command line, from a run directory holding the edited trace
    d = tmp_path / "edited"
    (d / "traces").mkdir(parents=True)
    with gzip.open(d / "traces" / "x.pt.trace.json.gz", "wt") as f:
        json.dump(t, f)
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics(profiled)))
    p = subprocess.run([sys.executable, SCRIPT, str(d), "--min", "0.3", "--max", "0.5", "--json", str(d / "b.json")],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "1 of 2 steps outside" in p.stdout, p.stdout  # step 3 has no device time
    assert json.loads((d / "b.json").read_text())[0]["step"] == 2

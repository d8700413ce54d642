"""ci/gpu/amp_table.py, the table and verdicts of ci/gpu.sh's amp-64/amp-128 steps (issue 12's goals), fed with
results shaped as a GPU run writes them: voxscale `bench step --amp bf16 [--compile]` JSON (bench.c's fields plus
precision, compile and the per-step breakdown) and bench/reference/ae3d.py's JSON lines. No GPU runs here, so the
figures are made up; what is checked is that goals met read PASS, goals missed read by how much, a missing or
incomparable result is exit 1, and a goal missed is not."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "ci", "gpu", "amp_table.py")


def voxscale(compile_, step_ms, peak, **extra):
    """A bench step result for ae3d-64 at batch 4 on an H100 (bench.c's JSON writer's fields)."""
    r = {"benchmark": "step", "config": "ae3d-64", "device": "nvidia-h100-80gb-hbm3", "backend": "cuda",
         "device_detail": "NVIDIA H100 80GB HBM3, 79 GiB, compute capability 9.0, TF32 on, deterministic off",
         "cpu": "AMD EPYC 9354", "cores": 16, "threads": 16, "blas": "OpenBLAS 0.3.21", "compiler": "gcc 12.2.0",
         "tf32": 1, "deterministic": 0, "commit": "abc1234", "batch": 4, "input_size": [64, 64, 64],
         "params": 1341031, "warmup": 3, "iters": 10, "step_ms_median": step_ms, "step_ms_min": step_ms * 0.98,
         "step_ms_max": step_ms * 1.05, "samples_per_s": 4 / (step_ms * 1e-3), "conv_gflop_per_step": 2057.1,
         "conv_gflops": 2057.1 / step_ms * 1e3, "peak_memory_mib": peak, "ceiling": "cuBLAS SGEMM 8192^3",
         "ceiling_gflops": 51000.0, "ceiling_sgemm_conv_shape_gflops": 0, "fraction_of_ceiling": 0.5,
         "precision": "bf16", "compile": int(compile_)}
    r.update(extra)
    return {k: v for k, v in r.items() if v is not None}


def pytorch(mode, step_ms, peak, **extra):
    """One JSON line of ae3d.py --bench --device cuda --dtypes bf16 --channels-last."""
    r = {"framework": "pytorch 2.11.0+cu130", "cudnn": 91300, "cudnn_benchmark": 0, "config": "configs/ae3d-64.json",
         "device": "cuda", "batch": 4, "input_size": [64, 64, 64], "iters": 10, "warmup": 3,
         "gpu": "NVIDIA H100 80GB HBM3", "mode": mode, "dtype": "bf16", "tf32": 1, "channels_last": 1,
         "layout_checked": 1, "fused_adamw": 1, "grad_scaler": 0, "step_ms_median": step_ms,
         "step_ms_min": step_ms * 0.97, "samples_per_s": 4 / (step_ms * 1e-3),
         "warmup_s": 31.0 if mode == "compile" else 1.2, "peak_memory_mib": peak,
         "peak_memory_steady_mib": None if peak is None else peak * 0.95, "memory_at_start_mib": 0.0, "threads": 16}
    r.update(extra)
    return {k: v for k, v in r.items() if v is not None}


BREAKDOWN = {"forward_ms": 3.0, "backward_ms": 6.0, "optimizer_ms": 0.5, "conv_ms": 8.0, "own_kernels_ms": 1.5}


def table(tmp_path, vx, pt_lines, *args):
    """Runs amp_table.py on these results; returns (exit code, key figure line, Markdown, verdicts JSON or None)."""
    paths = []
    for i, r in enumerate(vx):
        paths.append(tmp_path / ("vx%d.json" % i))
        paths[-1].write_text(json.dumps(r, indent=2))
    pt = tmp_path / "pytorch.jsonl"
    # as ci/gpu/steps.sh captures it: PyTorch's JSON lines among whatever else the process printed
    pt.write_text("".join("%s\n" % json.dumps(l) if isinstance(l, dict) else l for l in pt_lines))
    out, js = tmp_path / "amp.md", tmp_path / "amp.json"
    p = subprocess.run([sys.executable, SCRIPT, "--out", str(out), "--json", str(js), *args, str(pt), *map(str, paths)],
                       capture_output=True, text=True)
    assert p.stderr == "", p.stderr
    md = out.read_text() if out.exists() else ""
    return p.returncode, p.stdout.strip(), md, json.loads(js.read_text()) if js.exists() else None


def verdicts(md):
    """{goal text: verdict} from the goal table's rows."""
    goal_rows = ("| samples/s vs", "| peak memory vs", "| step time vs")
    rows = [l.split(" | ") for l in md.splitlines() if l.startswith(goal_rows)]
    return {r[0][2:]: r[3].rstrip(" |") for r in rows}


def test_every_goal_met(tmp_path):
    rc, line, md, js = table(tmp_path, [voxscale(1, 8.5, 1400.0, **BREAKDOWN), voxscale(0, 9.6, 1400.0)],
                             [pytorch("eager", 20.0, 1800.0), pytorch("compile", 11.0, 1500.0)])
    assert rc == 0, line
    assert set(verdicts(md).values()) == {"PASS"} and len(verdicts(md)) == 4
    assert js["passed"] == 4 and js["problems"] == []
    assert line == ("ae3d-64 bf16 batch 4: voxscale --compile 8.50 ms, 470.6 samples/s = 2.35x PyTorch eager, "
                    "1.29x PyTorch compile; peak 1400 MiB; goals 4/4 PASS")
    assert "| step (median) | 8.50 ms (of 10) | 9.60 ms (of 10) | 20.00 ms (of 10) | 11.00 ms (of 10) |" in md
    assert "| step / conv_ms | 1.06x | - | - | - |" in md  # the eager result has no breakdown: shown as "-"
    assert "| peak memory | 1400 MiB | 1400 MiB | 1800 MiB (steady 1710) | 1500 MiB (steady 1425) |" in md
    assert "Where voxscale's" not in md  # the breakdown's explanation is for missed goals
    assert "(cuDNN 91300, channels_last_3d on, fused AdamW, bf16 autocast around forward and loss)" in md


def test_missed_goals_say_by_how_much_and_do_not_fail(tmp_path):
    rc, line, md, js = table(tmp_path, [voxscale(1, 10.0, 1600.0, **BREAKDOWN), voxscale(0, 12.0, 1600.0)],
                             [pytorch("eager", 20.0, 1800.0), pytorch("compile", 11.0, 1500.0)])
    assert rc == 0, line
    v = verdicts(md)
    assert v["samples/s vs PyTorch eager"] == "PASS"  # 400 vs 200 samples/s: 2.00x
    # 400 vs 363.6 samples/s: 1.10x of the 1.20x asked, 8.3% short; 9.1% more samples/s would meet it
    assert v["samples/s vs PyTorch torch.compile"] == "MISSED by 8.3%: needs 1.20x, 9.1% more samples/s"
    assert v["peak memory vs PyTorch"] == "MISSED by 100 MiB (6.7% above PyTorch compile)"  # the lower of 1800, 1500
    assert v["step time vs its cuDNN convolutions"] == "MISSED by 0.80 ms (8.7% over the bound)"  # 10 vs 1.15 x 8
    assert ("| step time vs its cuDNN convolutions | <= 9.20 ms (1.15 x conv_ms 8.00) | 10.00 ms = 1.25 x conv_ms |"
            in md)
    assert ("convolutions 8.00 ms (80%), own kernels 1.50 ms (15%), GPU not busy with either (launch gaps, host "
            "waits) 0.50 ms (5%) of the 10.00 ms step") in md
    assert [g["verdict"] == "PASS" for g in js["goals"]] == [True, False, False, False]
    assert js["goals"][1]["ratio"] == pytest.approx(1.1)
    assert line == ("ae3d-64 bf16 batch 4: voxscale --compile 10.00 ms, 400.0 samples/s = 2.00x PyTorch eager, "
                    "1.10x PyTorch compile; peak 1600 MiB; goals 1/4 PASS (vs_compile MISSED (1.10x of 1.20x); "
                    "memory MISSED (+100 MiB); conv_bound MISSED (1.25x))")


def test_a_missing_pytorch_run_fails(tmp_path):
    """torch.compile stopped by the step's time limit: its line never came; the eager figures still show."""
    rc, line, md, js = table(tmp_path, [voxscale(1, 10.0, 1600.0, **BREAKDOWN)],
                             [pytorch("eager", 20.0, 1800.0), "PyTorch stopped after 40 s\n"])
    assert rc == 1
    assert line.endswith("incomplete: no PyTorch bf16 compile result"), line
    v = verdicts(md)
    assert v["samples/s vs PyTorch eager"] == "PASS"
    assert v["samples/s vs PyTorch torch.compile"] == "no result (PyTorch compile did not finish)"
    assert "Incomplete: no PyTorch bf16 compile result." in md
    assert js["problems"] == ["no PyTorch bf16 compile result"]


def test_compile_not_asked_for_is_not_missing(tmp_path):
    """--quick asks PyTorch for eager only: the compile goal reads "not run", and that is not a failure."""
    rc, line, md, _ = table(tmp_path, [voxscale(1, 10.0, 1600.0, **BREAKDOWN)], [pytorch("eager", 20.0, 1800.0)],
                            "--modes", "eager")
    assert rc == 0, line
    assert verdicts(md)["samples/s vs PyTorch torch.compile"] == "not run (PyTorch compile not asked for in this run)"
    assert verdicts(md)["peak memory vs PyTorch"] == "PASS"  # 1600 <= eager's 1800, the only PyTorch figure


def test_a_result_without_breakdown_shows_dashes(tmp_path):
    rc, line, md, _ = table(tmp_path, [voxscale(1, 10.0, 1600.0)],
                            [pytorch("eager", 20.0, 1800.0), pytorch("compile", 15.0, 1700.0)])
    assert rc == 0, line
    assert "| conv per step | - | - | - | - |" in md
    assert verdicts(md)["step time vs its cuDNN convolutions"] == "not measured (no conv_ms in voxscale's result)"


@pytest.mark.parametrize("vx,pt,problem", [
    # a result from before --amp/--compile: precision fp32 and compile 0 by default, so no --compile result at all
    ([voxscale(1, 10.0, 1600.0, precision=None, compile=None)], None, "no voxscale --compile result"),
    ([voxscale(1, 10.0, 1600.0, precision="fp32")], None, "voxscale compile ran in fp32, not bf16"),
    ([voxscale(1, 10.0, 1600.0)], [pytorch("eager", 20.0, 1800.0, batch=8), pytorch("compile", 11.0, 1500.0)],
     "PyTorch eager ran batch 8, voxscale 4"),
    # a GPU run must have its peak memory: null (what ae3d.py writes on a CPU) is not enough, nor no field
    ([voxscale(1, 10.0, 1600.0)], [dict(pytorch("eager", 20.0, 1800.0), peak_memory_mib=None),
                                   pytorch("compile", 11.0, 1500.0)], "PyTorch eager has no peak memory"),
    ([voxscale(1, 10.0, 1600.0)], [pytorch("eager", 20.0, 1800.0), pytorch("compile", 11.0, None)],
     "a PyTorch line lacks peak_memory_mib"),
    ([voxscale(1, 10.0, None)], None, "lacks peak_memory_mib"),
    # fp32 lines are another table's (bench-64's); the bf16 ones are what counts
    ([voxscale(1, 10.0, 1600.0)], [pytorch("eager", 20.0, 1800.0, dtype="fp32"), pytorch("compile", 11.0, 1500.0)],
     "no PyTorch bf16 eager result"),
])
def test_incomparable_or_missing_results_fail(tmp_path, vx, pt, problem):
    pt = pt or [pytorch("eager", 20.0, 1800.0), pytorch("compile", 11.0, 1500.0)]
    rc, line, _, _ = table(tmp_path, vx, pt)
    assert rc == 1 and problem in line, line


def test_another_batch_is_not_compared(tmp_path):
    rc, line, md, _ = table(tmp_path, [voxscale(1, 10.0, 1600.0)],
                            [pytorch("eager", 20.0, 1800.0), pytorch("compile", 5.0, 900.0, batch=2)])
    assert rc == 1 and "PyTorch compile ran batch 2, voxscale 4" in line, line
    assert verdicts(md)["samples/s vs PyTorch torch.compile"] == "no result (PyTorch compile ran another batch)"
    assert verdicts(md)["peak memory vs PyTorch"] == "PASS"  # against eager's 1800 MiB alone, not compile's 900


def test_no_pytorch_output_at_all_fails(tmp_path):
    rc, line, _, _ = table(tmp_path, [voxscale(1, 10.0, 1600.0)], [])
    assert rc == 1 and "no PyTorch bf16 eager result; no PyTorch bf16 compile result" in line, line


def test_pytorch_at_its_faster_cudnn_benchmark_setting_is_the_baseline(tmp_path):
    """ae3d.py --cudnn-benchmark 0,1 prints a line per setting: the faster one per mode is the column and the goal's
    baseline (whichever setting it is), the other is listed under the table."""
    rc, line, md, js = table(tmp_path, [voxscale(1, 8.5, 1400.0, **BREAKDOWN)],
                             [pytorch("eager", 20.0, 1800.0), pytorch("eager", 16.0, 1850.0, cudnn_benchmark=1),
                              pytorch("compile", 10.0, 1500.0), pytorch("compile", 11.0, 1500.0, cudnn_benchmark=1)])
    assert rc == 0, line
    # 470.6 samples/s vs eager's faster 250 (benchmark on) and compile's faster 400 (benchmark off)
    assert "= 1.88x PyTorch eager, 1.18x PyTorch compile" in line, line
    assert verdicts(md)["samples/s vs PyTorch torch.compile"].startswith("MISSED")
    assert "| cudnn.benchmark |  | - | on | off |" in md, md  # no voxscale eager result here: "-"
    assert ("the others: eager cudnn.benchmark off: 20.00 ms, 200.0 samples/s; compile cudnn.benchmark on: "
            "11.00 ms, 363.6 samples/s.") in md, md
    assert js["pytorch"]["eager"]["cudnn_benchmark"] == 1 and js["pytorch"]["compile"]["cudnn_benchmark"] == 0

"""bench/alternate.py, the same-run comparison of two builds and the PyTorch reference, on the tiny config: one
round of one step each, with Debian's torch (.venv) as the reference. It must time all three, write the Markdown and
JSON the report pages and the README's figures are copied from, and with --amp bf16 run both sides in bf16 and write
those files under bf16/ beside the float32 ones (not over them). Seconds."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, VOXSCALE, cpu_levels

pytest.importorskip("torch")
SCRIPT = os.path.join(ROOT, "bench", "alternate.py")


def alternate(results, *extra):
    env = dict(os.environ, ITERS="1", WARMUP="0")
    return subprocess.run([sys.executable, SCRIPT, "configs/test/tiny.json", "--base", VOXSCALE, "--bin", VOXSCALE,
                           "--rounds", "1", "--label", "the same binary", "--python", sys.executable,
                           "--results", str(results), *extra], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=300)


def written(results, sub, name):
    [dev] = os.listdir(results)
    folder = os.path.join(results, dev, *sub)
    return json.load(open(os.path.join(folder, name + ".json"))), open(os.path.join(folder, name + ".md")).read()


def test_one_round_times_both_builds_and_the_reference(tmp_path):
    p = alternate(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    j, md = written(tmp_path, [], "alternate_tiny")
    assert j["amp"] == "off" and j["rounds"] == 1 and j["iters"] == 1
    for who in ("new", "base", "ref"):
        assert len(j["step_ms"][who]) == 1 and j["step_ms"][who][0] > 0
    assert j["ratio_reference_over_new"] == pytest.approx(j["median_ms"]["ref"] / j["median_ms"]["new"])
    assert "the same binary" in md and ", fp32, " in md


def test_bf16_runs_both_sides_in_bf16_beside_the_float32_files(tmp_path):
    if not (cpu_levels()["bf16"] or cpu_levels()["amx"]):
        pytest.skip("voxscale refuses --amp bf16 on the cpu without AVX512-BF16 or AMX-BF16")
    p = alternate(tmp_path, "--amp", "bf16")
    assert p.returncode == 0, p.stdout + p.stderr
    j, md = written(tmp_path, ["bf16"], "alternate_tiny_bf16")
    assert j["amp"] == "bf16"
    assert "voxscale --amp bf16 against the reference's bf16 autocast" in md
    # the float32 name is not used by a bf16 run
    [dev] = os.listdir(tmp_path)
    assert not os.path.exists(os.path.join(tmp_path, dev, "alternate_tiny.json"))

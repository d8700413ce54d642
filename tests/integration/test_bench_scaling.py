"""`voxscale bench allreduce` (nccl-tests' table, on MPI CPU ranks) and `voxscale bench scaling` (weak and strong
scaling of the trainer: 1, 2, 4 CPU ranks measured under mpirun, 8 projected, the model's error beside each
measured count, every row projected with each interconnect preset; JSON, Markdown, TensorBoard scalars and the chart
image; the chart and the device's page drawn by bench/report/report.py). About 1.5 minutes on 2 cores."""
import json
import os
import shutil
import struct
import subprocess
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, os.environ.get("BUILD", "build"), "voxscale")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
needs_mpi = pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun (ci/deps.sh installs openmpi-bin)")


def run(args, timeout=400):
    return subprocess.run(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


def table_rows(out):
    """The nccl-tests rows: [size, count, type, redop, root, t, algbw, busbw, wrong, t, algbw, busbw, wrong]."""
    return [l.split() for l in out.splitlines() if l.strip() and not l.startswith("#") and l.split()[0].isdigit()]


@needs_mpi
def test_allreduce_on_two_mpi_ranks(tmp_path):
    p = run(MPIRUN + ["-np", "2", BIN, "bench", "allreduce", "-b", "8", "-e", "4M", "-f", "4", "--device", "cpu",
                      "--results", str(tmp_path)])
    assert p.returncode == 0, p.stdout[-3000:]
    assert "# bench allreduce: 2 ranks, mpi communicator, host buffers" in p.stdout
    rows = table_rows(p.stdout)
    assert [int(r[0]) for r in rows] == [8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288, 2097152]
    for r in rows:
        assert r[2:5] == ["float", "sum", "-1"] and int(r[1]) * 4 == int(r[0])
        assert r[8] == "0" and r[12] == "0", r  # #wrong, out-of-place and in-place
        assert float(r[5]) > 0 and float(r[9]) > 0
        assert abs(float(r[11]) - float(r[10])) < 0.02  # busbw = algbw x 2(n-1)/n = algbw on 2 ranks
    assert "# Out of bounds values : 0 OK" in p.stdout and "# Avg bus bandwidth    : " in p.stdout
    [j] = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f == "allreduce_2ranks.json"]
    r = json.load(open(j))
    assert r["ranks"] == 2 and r["communicator"] == "mpi" and r["wrong"] == 0 and len(r["rows"]) == 10
    assert r["fit"]["bus_gbps"] > 0 and r["fit"]["alpha_us"] >= 0


def test_allreduce_in_one_process_says_so(tmp_path):
    p = run([BIN, "bench", "allreduce", "-e", "64K", "--device", "cpu", "--results", str(tmp_path)])
    assert p.returncode == 0, p.stdout[-2000:]
    assert "one process: the single communicator does nothing" in p.stdout
    assert all(r[8] == "0" and r[12] == "0" for r in table_rows(p.stdout))


@pytest.mark.parametrize("args,words", [
    (["allreduce", "-b", "0"], "-b 0: expected a size in bytes"),
    (["allreduce", "-b", "1M", "-e", "1K"], "is above -e"),
    (["allreduce", "--device", "tpu"], "choose auto, cpu or cuda"),
    (["scaling", "--gpus", "2,4"], "the list must start with 1"),
    (["scaling", "--mode", "sideways"], "choose weak, strong or both"),
    (["scaling", "--interconnect", "carrier-pigeon"], "choose measured, h100-nvlink, pcie4 or ib400"),
])
def test_bad_flags_are_one_line_and_exit_2(args, words):
    p = run([BIN, "bench"] + args)
    assert p.returncode == 2, p.stdout
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], p.stdout


def png_size(path):
    """(width, height) of a PNG whose every chunk's CRC holds and whose image data inflates to h filtered rows."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR"
    w, h, depth, colour = struct.unpack(">IIBB", data[16:26])
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + body)
        idat += body if kind == b"IDAT" else b""
        pos += 12 + n
    assert depth == 8 and len(zlib.decompress(idat)) == h * (1 + channels * w)
    return w, h


def scaling_within_bounds(r):
    """What in a bench scaling report moves with the machine's load, outside this test's bounds: a measured row's
    model error of a factor of three or more, a rank count without its measured link (its fit)."""
    bad = ["%s %d ranks: model error %s" % (x["mode"], x["ranks"], x.get("model_error")) for x in r["rows"]
           if x["kind"] == "measured" and not abs(x.get("model_error", 0.0)) < 2.0]
    return bad + ([] if [f["ranks"] for f in r["fits"]] == [2, 4] else ["fits at %s" % [f["ranks"] for f in r["fits"]]])


@needs_mpi
def test_scaling_measured_projected_and_reported(tmp_path):
    # Once more where the figures that move with the load fall outside the bounds, as ci/regress retries: 1 and 2
    # ranks on 2 cores that another test shares (CI's xdist workers) read a one-rank model error of 2.8 once under a
    # busy loop, and a 2-rank all-reduce with no fit once in CI. Everything is checked on the run that is kept.
    for attempt in (1, 2):
        out = tmp_path / ("run%d" % attempt)
        p = run([BIN, "bench", "scaling", "--gpus", "1,2,4,8", "--steps", "5", "--device", "cpu",
                 "--set", "model.input_size=[16,16,16]", "--results", str(out)])
        assert p.returncode == 0, p.stdout[-4000:]
        [dev] = [e for e in os.listdir(out) if os.path.isdir(os.path.join(out, e))]  # and index.html
        d = os.path.join(out, dev)
        r = json.load(open(os.path.join(d, "scaling_default.json")))
        bad = scaling_within_bounds(r)
        if not bad:
            break
        print("bench scaling, attempt %d: %s; load average before and after %s\n%s" % (
            attempt, "; ".join(bad), r["load_average_before_after"], p.stdout[-3000:]))
    assert r["launcher"] == "mpirun -np N"
    assert r["interconnect_beyond"].startswith("measured: bench allreduce on 4 CPU ranks over MPI")
    for mode in ("weak", "strong"):
        rows = {x["ranks"]: x for x in r["rows"] if x["mode"] == mode}
        assert sorted(rows) == [1, 2, 4, 8]
        assert [rows[n]["kind"] for n in (1, 2, 4, 8)] == ["measured"] * 3 + ["projected"]
        # within a factor of three, not of two: 2 and 4 ranks on 2 shared cores move with the VM's load, and the
        # model's error has measured +74% to +116% under load (docs/benchmarks-and-reports.md) and 109% in a CI run
        # (2026-11-29); the bound catches a model off by a factor of three or more (units, a term counted twice)
        for n in (1, 2, 4):
            assert "model_error" in rows[n] and abs(rows[n]["model_error"]) < 2.0, rows[n]
        assert "model_error" not in rows[8]
        assert rows[1]["speedup"] == pytest.approx(1.0)
        for x in rows.values():
            assert x["samples_per_s"] > 0 and x["efficiency"] == pytest.approx(x["speedup"] / x["ranks"])
            assert x["global_batch"] == x["batch_per_rank"] * x["ranks"]
        if mode == "strong":
            assert len({x["global_batch"] for x in rows.values()}) == 1
        else:
            assert len({x["batch_per_rank"] for x in rows.values()}) == 1
    # every row projected with each preset: the same compute, another link, so a faster link is never slower
    names = [ic["name"] for ic in r["interconnects"]]
    assert names == ["h100-nvlink", "pcie4", "ib400"] and all(ic["bus_gbps"] > 0 for ic in r["interconnects"])
    assert [f["ranks"] for f in r["fits"]] == [2, 4], p.stdout[-3000:]
    assert len(r["load_average_before_after"]) == 2 and min(r["load_average_before_after"]) >= 0
    for x in r["rows"]:
        assert set(x["interconnects"]) == set(names)
        nv, pcie = x["interconnects"]["h100-nvlink"], x["interconnects"]["pcie4"]
        assert nv["samples_per_s"] >= pcie["samples_per_s"] > 0 and 0 <= nv["exposed_comm_ms"] <= pcie["exposed_comm_ms"]
        if x["ranks"] == 1:
            assert nv["exposed_comm_ms"] == 0 and nv["samples_per_s"] == pytest.approx(x["model_samples_per_s"])
        if x["kind"] == "measured":  # the trainer's own waits, from its metrics.jsonl
            assert x["comm_wait_ms"] >= 0 and x["data_wait_ms"] >= 0 and x["comm_wait_ms"] < x["step_ms"]
        else:
            assert "comm_wait_ms" not in x
    md = open(os.path.join(d, "scaling_default.md")).read()
    assert "| weak | 8 | 2 | 16 | projected |" in md and "Model error" in md
    assert "| weak | 2 | 2 | 4 | measured |" in p.stdout
    # the chart and the page come from the report script (matplotlib), not from a rasteriser of ours
    assert not os.path.exists(os.path.join(d, "scaling_default.png"))
    w, h = png_size(os.path.join(d, "charts", "scaling_default.png"))
    assert w > 1000 and h > 600
    svg = open(os.path.join(d, "charts", "scaling_default.svg")).read()
    assert "bench scaling: speedup and efficiency: default on %s" % dev in svg and "seeds' claims" in svg
    assert 'id="chart-scaling_default"' in open(os.path.join(d, "index.html")).read()
    assert 'href="%s/index.html"' % dev in open(os.path.join(out, "index.html")).read()
    assert "charts/ and index.html (bench/report/report.py)" in p.stdout
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(os.path.join(d, "scaling_default_tb"))
    acc.Reload()
    [img] = acc.Images("scaling/chart")  # the same PNG, decoded and written as a TensorBoard image
    assert (img.width, img.height) == (w, h)
    tags = acc.Tags()["scalars"]
    assert "scaling/weak/measured/speedup" in tags and "scaling/strong/projected/samples_per_s" in tags
    assert [e.step for e in acc.Scalars("scaling/weak/measured/efficiency")] == [1, 2, 4]
    assert [e.step for e in acc.Scalars("scaling/weak/projected/speedup")] == [8]
    weak8 = [x for x in r["rows"] if x["mode"] == "weak" and x["ranks"] == 8][0]
    assert acc.Scalars("scaling/weak/projected/speedup")[0].value == pytest.approx(weak8["speedup"], rel=1e-6)


def test_scaling_without_the_report_script_still_reports(tmp_path):
    """Where the report script cannot be found (an installed binary) bench scaling says so and writes the rest."""
    env = dict(os.environ, VX_REPORT_SCRIPT=str(tmp_path / "no-such-report.py"))
    p = subprocess.run([BIN, "bench", "scaling", "--gpus", "1,2", "--mode", "weak", "--measure-max", "1", "--steps", "4",
                        "--device", "cpu", "--set", "model.input_size=[16,16,16]", "--results", str(tmp_path / "r")],
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:]
    assert "bench scaling: chart not drawn: no bench/report/report.py beside this binary" in p.stdout
    [dev] = os.listdir(tmp_path / "r")
    d = tmp_path / "r" / dev
    assert (d / "scaling_default.json").exists() and (d / "scaling_default.md").exists()
    assert not (d / "charts").exists() and not (d / "index.html").exists()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(d / "scaling_default_tb"))
    acc.Reload()
    assert acc.Tags()["images"] == [] and "scaling/weak/projected/speedup" in acc.Tags()["scalars"]

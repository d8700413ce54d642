"""test_train_tensorboard.py: what `voxscale train` logs, read back by TensorBoard's own loader and server, and
the profiler trace of a training run.

One tiny training run (20 steps, every step printed) is shared by the checks: the scalars TensorBoard reads must
be exactly the values the trainer printed to metrics.jsonl (as the float32 TensorBoard stores), at the same steps;
images decode to the tiled mid-slice size; histogram counts add up to each layer group's parameter count; the
text and hparams carry the resolved config. A SIGKILLed run leaves an event file that reads to its last whole
record without a CRC error.
"""

import gzip
import json
import re
import signal
import subprocess
import time
import urllib.parse

import numpy as np
import pytest

pytest.importorskip("tensorboard")

from conftest import ROOT, VOXSCALE, metrics, run  # noqa: E402
from tensorboard.plugins.hparams import plugin_data_pb2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402
from test_tensorboard import (accumulator, decode_png, http_json, poll_series, strict_records,  # noqa: E402
                              tensorboard_server)

TINY = "configs/test/tiny.json"
STEPS, IMAGE_EVERY, HIST_EVERY, VAL_EVERY = 20, 5, 10, 10
PROFILE = (3, 4)
TILE_GAP, ERROR_GAIN = 2, 4.0  # src/volume_tiles.h


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("tb") / "run"
    p = run("train", "--config", TINY, "--out", out, "--steps", STEPS, "--set", "train.log_every=1",
            "--set", f"train.val_every={VAL_EVERY}", "--set", f"output.image_every={IMAGE_EVERY}",
            "--set", "output.image_samples=2", "--set", f"output.hist_every={HIST_EVERY}",
            "--profile", "%d:%d" % PROFILE)
    (event_file,) = out.glob("events.out.tfevents.*")
    return {"dir": out, "stdout": p.stdout, "event_file": event_file, "metrics": metrics(out),
            "config": json.loads((out / "config.json").read_text())}


def f32(x):
    return float(np.float32(x))


def test_event_file_name_and_crc(trained):
    name = trained["event_file"].name
    assert re.fullmatch(r"events\.out\.tfevents\.\d{10}\.[^.]+\.\d+\.\d+", name), name
    records, _, error = strict_records(trained["event_file"])
    assert error is None and len(records) > 50


SCALARS = {"train/loss": "loss", "train/recon": "recon", "train/kl": "kl", "train/lr": "lr",
           "train/grad_norm": "grad_norm",
           "perf/samples_per_s": "samples_per_s", "perf/step_ms": "step_ms", "perf/data_wait_ms": "data_wait_ms",
           "val/l1": "val_l1", "val/psnr": "val_psnr"}


def test_scalars_are_the_printed_values(trained):
    acc = accumulator(trained["dir"])
    tags = set(acc.Tags()["tensors"])
    assert set(SCALARS) | {"memory/peak_mib"} <= tags
    # every scalar in a group (TensorBoard's sections are the tags' first parts): none loose above train/
    scalars = set(acc.PluginTagToContent("scalars"))
    assert {t.split("/")[0] for t in scalars} == {"train", "val", "perf", "memory"}, scalars
    for tag, key in SCALARS.items():
        expected = [(m["step"], f32(m[key])) for m in trained["metrics"] if key in m]
        got = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto).item())) for e in acc.Tensors(tag)]
        assert got == expected, tag
    train_steps = [m["step"] for m in trained["metrics"] if "loss" in m]
    assert train_steps == list(range(1, STEPS + 1))
    assert [m["step"] for m in trained["metrics"] if "val_l1" in m] == [0, 10, 20]
    # The printed progress lines show the same losses (to their 6 decimals).
    printed = {int(s): float(v) for s, v in re.findall(r"step\s+(\d+)/\d+ \| loss ([0-9.]+)", trained["stdout"])}
    for m in trained["metrics"]:
        if "loss" in m:
            assert printed[m["step"]] == pytest.approx(m["loss"], abs=1e-6)
    peak = [float(tensor_util.make_ndarray(e.tensor_proto).item()) for e in acc.Tensors("memory/peak_mib")]
    assert len(peak) == STEPS and all(v > 0 for v in peak)


def test_images_are_tiled_mid_slices(trained):
    acc = accumulator(trained["dir"])
    d, h, w = trained["config"]["model"]["input_size"]
    width, height = w + w + h + 2 * TILE_GAP, 3 * max(h, d) + 2 * TILE_GAP
    steps = list(range(0, STEPS + 1, IMAGE_EVERY))
    first_rows = {}
    for i in range(2):
        events = acc.Tensors(f"images/sample_{i}")
        assert [e.step for e in events] == steps
        for e in events:
            blobs = tensor_util.make_ndarray(e.tensor_proto)  # [width, height, png...] as bytes
            assert int(blobs[0]) == width and int(blobs[1]) == height
            pw, ph, ch, pixels = decode_png(blobs[2])
            assert (pw, ph, ch) == (width, height, 1)
            img = np.frombuffer(pixels, np.uint8).reshape(height, width).astype(int)
            row = max(h, d) + TILE_GAP
            inp, rec, err = img[:h, :w], img[row:row + h, :w], img[2 * row:2 * row + h, :w]
            # The error row is |input - reconstruction| x gain, up to the rounding of the two 8-bit pictures.
            unclamped = (inp > 0) & (inp < 255) & (rec > 0) & (rec < 255) & (err < 255)
            assert unclamped.sum() >= 5  # tiny phantoms have a black background, which clamps at 0
            assert np.abs(err - np.abs(inp - rec) * ERROR_GAIN)[unclamped].max() <= 2 * ERROR_GAIN + 1
            assert (img[h:row, :] == 64).all() or h < max(h, d)  # the gap between rows
            first_rows.setdefault(i, []).append((inp.copy(), rec.copy()))
        # The picture's rows and columns are named in the tag's description, which TensorBoard shows with it
        description = acc.SummaryMetadata(f"images/sample_{i}").summary_description
        for words in (f"Held-out volume {i}", "input, reconstruction, |input - reconstruction| x 4", "axial",
                      "coronal", "sagittal"):
            assert words in description, description
        # The same held-out volume at every step; its reconstruction changes as the model trains.
        inputs = [a for a, _ in first_rows[i]]
        assert all((a == inputs[0]).all() for a in inputs)
        assert not (first_rows[i][0][1] == first_rows[i][-1][1]).all()


def param_groups(probe_json):
    """Layer group -> parameter count, by the rule in src/train_log.c."""
    groups = {}
    for p in probe_json["params"]:
        parts = p["name"].split(".")
        keep = 3 if p["name"].startswith(("encoder.down.", "decoder.up.")) else 2
        group = ".".join(parts[:keep])
        groups[group] = groups.get(group, 0) + int(np.prod(p["shape"]))
    return groups


def test_histograms_count_every_parameter(trained, tmp_path):
    run("probe", "--config", TINY, "--out", tmp_path / "probe")
    groups = param_groups(json.loads((tmp_path / "probe.json").read_text()))
    assert "encoder.down.0" in groups and "decoder.conv_out" in groups
    acc = accumulator(trained["dir"])
    tags = set(acc.PluginTagToContent("histograms"))
    assert tags == {f"{kind}/{g}" for kind in ("weights", "grads") for g in groups}
    for kind in ("weights", "grads"):
        for group, count in groups.items():
            events = acc.Tensors(f"{kind}/{group}")
            assert [e.step for e in events] == list(range(HIST_EVERY, STEPS + 1, HIST_EVERY))
            for e in events:
                buckets = tensor_util.make_ndarray(e.tensor_proto)
                assert buckets[:, 2].sum() == count, (kind, group)


def test_config_text_and_hparams(trained):
    acc = accumulator(trained["dir"])
    (text_event,) = acc.Tensors("config")
    text = tensor_util.make_ndarray(text_event.tensor_proto).item().decode()
    flat = {f"{s}.{k}": v for s, sec in trained["config"].items() for k, v in sec.items()}
    for key, value in flat.items():
        assert f"| {key} | `{json.dumps(value, separators=(',', ':'))}` |" in text, key
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    got = {}
    for name, v in start.hparams.items():
        got[name] = v.number_value if v.WhichOneof("kind") == "number_value" else v.string_value
    expected = {k: (v if isinstance(v, (int, float)) else v if isinstance(v, str)
                    else json.dumps(v, separators=(",", ":"))) for k, v in flat.items()}
    assert got == expected
    exp = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert [m.name.tag for m in exp.metric_infos] == ["train/loss", "val/l1", "val/psnr"]
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"]).session_end_info
    assert end.status == 1  # STATUS_SUCCESS


def test_tensorboard_server_serves_the_run(trained):
    with tensorboard_server(trained["dir"].parent) as (proc, base):
        expected = [[m["step"], f32(m["val_l1"])] for m in trained["metrics"] if "val_l1" in m]
        url = f"{base}/data/plugin/scalars/scalars?run={trained['dir'].name}&tag={urllib.parse.quote('val/l1')}"
        got = poll_series(proc, url, len(expected))
        assert [[step, value] for _, step, value in got] == expected
        # the images plugin serves each picture's description: its rows and columns
        tags = http_json(f"{base}/data/plugin/images/tags")[trained["dir"].name]
        assert "reconstruction" in tags["images/sample_0"]["description"], tags


def test_resnet3d_hparams_list_every_validation_metric_and_scalars_are_grouped(tmp_path):
    """issue 35: a resnet3d run's HParams listed train/loss alone, so runs could not be compared there; lr and
    grad_norm sat outside any group, above train/"""
    out = tmp_path / "runs" / "cls"
    run("train", "--config", "configs/test/resnet-tiny.json", "--out", out, "--threads", 1)
    last = [m for m in metrics(out) if "val_auroc" in m][-1]
    want = {"train/loss", "val/loss", "val/accuracy", "val/auroc", "val/auroc_class_0", "val/auroc_class_1",
            "val/auroc_class_2"}
    with tensorboard_server(out.parent) as (proc, base):
        url = f"{base}/data/plugin/scalars/scalars?run=cls&tag={urllib.parse.quote('val/auroc')}"
        poll_series(proc, url, len([m for m in metrics(out) if "val_auroc" in m]))
        experiment = http_json(f"{base}/data/plugin/hparams/experiment", {"experimentName": ""})
        assert {m["name"]["tag"] for m in experiment["metricInfos"]} == want, experiment["metricInfos"]
        groups = http_json(f"{base}/data/plugin/hparams/session_groups",
                           {"experimentName": "", "startIndex": 0, "sliceSize": 10,
                            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                                "STATUS_RUNNING"]})
        (group,) = groups["sessionGroups"]
        values = {v["name"]["tag"]: v["value"] for v in group["metricValues"]}
        assert set(values) == want  # each with the run's last value: what the dashboard's table compares
        for tag in ("val/loss", "val/accuracy", "val/auroc", "val/auroc_class_1"):
            assert values[tag] == pytest.approx(last[tag.replace("/", "_")], abs=1e-6), tag
        tags = http_json(f"{base}/data/plugin/scalars/tags")["cls"]
        assert {"train/lr", "train/grad_norm", "perf/step_ms", "val/loss"} <= set(tags), sorted(tags)
        assert {t.split("/")[0] for t in tags} == {"train", "val", "perf", "memory"}, sorted(tags)


def test_killed_run_reads_to_last_whole_record(tmp_path):
    out = tmp_path / "killed"
    proc = subprocess.Popen([VOXSCALE, "train", "--config", TINY, "--out", str(out), "--steps", "100000",
                             "--set", "train.log_every=1", "--set", "output.flush_secs=0.1",
                             "--set", "train.val_every=0"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("step") and int(line.split()[1].split("/")[0]) >= 200:
                break
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (event_file,) = out.glob("events.out.tfevents.*")
    records, _, error = strict_records(event_file)
    assert error is None, "the killed run's file has a torn or corrupt record"
    steps = [e.step for e in accumulator(out).Tensors("train/loss")]
    assert len(steps) >= 100 and steps == list(range(1, len(steps) + 1))


def nests(events):
    """True when the X events of one track form a proper nesting (each pair disjoint or one inside the other)."""
    stack = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
            stack.pop()
        if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 1e-3:
            return False
        stack.append(e)
    return True


def test_profile_trace_of_training(trained):
    assert "profile: trace written to" in trained["stdout"]
    (path,) = (trained["dir"] / "traces").glob("*.pt.trace.json.gz")
    assert re.fullmatch(r"[^/]+_\d+\.\d+\.pt\.trace\.json\.gz", path.name)
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    assert trace["schemaVersion"] == 1 and trace["distributedInfo"]["rank"] == 0
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for e in xs:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid"} <= set(e)
    steps = [e for e in xs if e["name"].startswith("ProfilerStep#")]
    assert sorted(e["name"] for e in steps) == ["ProfilerStep#%d" % s for s in range(PROFILE[0], PROFILE[1] + 1)]
    for tid in {e["tid"] for e in xs}:
        assert nests([e for e in xs if e["tid"] == tid]), f"ranges of thread {tid} overlap without nesting"
    main_tid = steps[0]["tid"]
    for step in steps:
        inside = [e for e in xs if e["tid"] == main_tid and e["ts"] >= step["ts"] - 1e-3
                  and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-3]
        names = {e["name"] for e in inside}
        assert {"data wait", "forward", "loss", "backward", "optimizer", "encoder.conv_in", "latent",
                "decoder.conv_out"} <= names
        # every layer appears once in forward and once in backward
        assert sum(e["name"] == "encoder.conv_in" for e in inside) == 2
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "train" in threads

"""test_tensorboard.py: the event files and traces voxscale writes, read back by TensorBoard itself.

tests/tools/tb_sample (built by `make test`) writes a run with known scalars, images, histograms, text and
hparams plus a profiler trace, and prints what it wrote as JSON. These tests load that run with TensorBoard's
own loaders and its HTTP server and compare. TensorBoard's event loader (EventFileLoader) swallows
DataLossError, CRC failures included, and simply stops reading, so a wrong CRC would look like a short file;
every file is therefore also read with the record reader that loader uses (tensorflow_stub's PyRecordReader_New,
which checks both CRCs and raises), which must reach the end of the file without an error.
"""

import contextlib
import gzip
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing import event_file_loader  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_accumulator as pea  # noqa: E402
from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.compat.tensorflow_stub import errors as tf_errors  # noqa: E402
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as tf_stub  # noqa: E402
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("BUILD", "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
TOOL = BUILD / "tests" / "tools" / "tb_sample"


# ---- helpers -------------------------------------------------------------------------------------------------


def run_tool(*args):
    out = subprocess.run([str(TOOL), *map(str, args)], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


def strict_records(path):
    """Reads every record with the CRC-checking reader TensorBoard's loader uses when TensorFlow is absent.
    Returns (records, start offsets of each record plus the end offset, the DataLossError that stopped it or
    None at a clean end)."""
    reader = tf_stub.PyRecordReader_New(str(path))
    records, offsets = [], [0]
    while True:
        try:
            reader.GetNext()
        except tf_errors.OutOfRangeError:
            return records, offsets, None
        except tf_errors.DataLossError as e:
            return records, offsets, e
        rec = reader.record()
        records.append(rec)
        offsets.append(offsets[-1] + len(rec) + 16)


def decode_png(data):
    """A small PNG decoder (8-bit gray or RGB, not interlaced), so the check needs nothing beyond zlib."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, ctype = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(ctype + body) == crc, f"bad CRC in PNG chunk {ctype}"
        if ctype == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif ctype == b"IDAT":
            idat += body
        elif ctype == b"IEND":
            break
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and interlace == 0 and color in (0, 2)
    ch = 1 if color == 0 else 3
    raw, stride = zlib.decompress(idat), width * ch
    out, prev = bytearray(), bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0
            b = prev[i]
            c = prev[i - ch] if i >= ch else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return width, height, ch, bytes(out)


def expected_pixels(width, height, channels, step):
    return bytes(
        (5 * x + 11 * y + 60 * c + 3 * step) & 255 for y in range(height) for x in range(width) for c in range(channels)
    )


def accumulator(run_dir):
    acc = pea.EventAccumulator(str(run_dir), size_guidance={pea.TENSORS: 0})
    acc.Reload()
    return acc


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- fixtures ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    if not TOOL.exists():  # `make test` builds it; a bare pytest run builds it here
        subprocess.run(["make", "-s", "-C", str(ROOT), f"BUILD={BUILD}", str(TOOL)], check=True, timeout=600)
    logdir = tmp_path_factory.mktemp("logdir")
    info = run_tool("write", logdir)
    info["logdir"] = logdir
    return info


# ---- the event file as a whole -------------------------------------------------------------------------------


def test_event_file_is_whole_and_crc_clean(sample):
    path = Path(sample["event_file"])
    assert re.fullmatch(r"events\.out\.tfevents\.\d{10}\.[^/]+\.\d+\.\d+", path.name)
    assert [p.name for p in Path(sample["run_dir"]).glob("*tfevents*")] == [path.name]
    records, offsets, error = strict_records(path)
    assert error is None, f"TensorBoard's record reader failed: {error}"
    assert offsets[-1] == path.stat().st_size
    first = event_pb2.Event.FromString(records[0])
    assert first.file_version == "brain.Event:2"
    for rec in records[1:]:
        assert event_pb2.Event.FromString(rec).HasField("summary")
    # Our own strict reader agrees record for record.
    ours = run_tool("read", path)
    assert ours == {"records": len(records), "good_bytes": offsets[-1], "file_bytes": offsets[-1], "stop": "end"}


def test_scalars_exact(sample):
    acc = accumulator(sample["run_dir"])
    scalar_tags = set(acc.PluginTagToContent("scalars"))
    assert scalar_tags == set(sample["scalars"])
    for tag, expected in sample["scalars"].items():
        got = [[e.step, tensor_util.make_ndarray(e.tensor_proto).item()] for e in acc.Tensors(tag)]
        assert got == expected, tag
        assert acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"


def test_images_decode(sample):
    acc = accumulator(sample["run_dir"])
    assert set(acc.PluginTagToContent("images")) == {i["tag"] for i in sample["images"]}
    for img in sample["images"]:
        (event,) = [e for e in acc.Tensors(img["tag"]) if e.step == img["step"]]
        width, height, png = tensor_util.make_ndarray(event.tensor_proto)
        assert (int(width), int(height)) == (img["width"], img["height"])
        w, h, ch, pixels = decode_png(png)
        assert (w, h, ch) == (img["width"], img["height"], img["channels"])
        assert pixels == expected_pixels(w, h, ch, img["step"])


def test_histograms_add_up(sample):
    acc = accumulator(sample["run_dir"])
    assert set(acc.PluginTagToContent("histograms")) == {h["tag"] for h in sample["histograms"]}
    for h in sample["histograms"]:
        (event,) = [e for e in acc.Tensors(h["tag"]) if e.step == h["step"]]
        buckets = tensor_util.make_ndarray(event.tensor_proto)  # rows of [left edge, right edge, count]
        assert buckets.shape[1] == 3
        assert buckets[:, 2].sum() == h["count"] - h["nonfinite"]
        assert (buckets[:, 0] <= buckets[:, 1]).all()
        assert (buckets[1:, 0] == buckets[:-1, 1]).all()
        assert buckets[0, 0] == pytest.approx(h["min"], rel=1e-6)
        assert buckets[-1, 1] == pytest.approx(h["max"], rel=1e-6)


def test_text(sample):
    acc = accumulator(sample["run_dir"])
    assert set(acc.PluginTagToContent("text")) == {t["tag"] for t in sample["texts"]}
    for t in sample["texts"]:
        (event,) = [e for e in acc.Tensors(t["tag"]) if e.step == t["step"]]
        assert tensor_util.make_ndarray(event.tensor_proto).item().decode("utf-8") == t["text"]


def test_hparams(sample):
    acc = accumulator(sample["run_dir"])
    content = acc.PluginTagToContent("hparams")
    assert set(content) == {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"}
    data = {tag: plugin_data_pb2.HParamsPluginData.FromString(c) for tag, c in content.items()}
    assert all(d.version == 0 for d in data.values())

    start = data["_hparams_/session_start_info"].session_start_info
    got = {}
    for name, value in start.hparams.items():
        kind = value.WhichOneof("kind")
        got[name] = {"number_value": value.number_value, "string_value": value.string_value,
                     "bool_value": value.bool_value}[kind]
        assert kind == {bool: "bool_value", str: "string_value"}.get(type(sample["hparams"][name]), "number_value")
    assert got == sample["hparams"]

    exp = data["_hparams_/experiment"].experiment
    types = {i.name: i.type for i in exp.hparam_infos}
    assert types == {
        name: api_pb2.DATA_TYPE_BOOL if isinstance(v, bool) else api_pb2.DATA_TYPE_STRING if isinstance(v, str)
        else api_pb2.DATA_TYPE_FLOAT64
        for name, v in sample["hparams"].items()
    }
    assert [m.name.tag for m in exp.metric_infos] == sample["metrics"]
    assert data["_hparams_/session_end_info"].session_end_info.status == api_pb2.STATUS_SUCCESS


# ---- our .proto files against TensorBoard's ------------------------------------------------------------------

UPSTREAM = {
    "Event": "tensorboard.Event",
    "Summary": "tensorboard.Summary",
    "Summary.Value": "tensorboard.Summary.Value",
    "Summary.Image": "tensorboard.Summary.Image",
    "SummaryMetadata": "tensorboard.SummaryMetadata",
    "SummaryMetadata.PluginData": "tensorboard.SummaryMetadata.PluginData",
    "HistogramProto": "tensorboard.HistogramProto",
    "TensorProto": "tensorboard.TensorProto",
    "TensorShapeProto": "tensorboard.TensorShapeProto",
    "TensorShapeProto.Dim": "tensorboard.TensorShapeProto.Dim",
    "DataType": "tensorboard.DataType",
    "DataClass": "tensorboard.DataClass",
    "HParamsPluginData": "tensorboard.hparams.HParamsPluginData",
    "SessionStartInfo": "tensorboard.hparams.SessionStartInfo",
    "SessionStartInfo.HparamsEntry": "tensorboard.hparams.SessionStartInfo.HparamsEntry",
    "SessionEndInfo": "tensorboard.hparams.SessionEndInfo",
    "Experiment": "tensorboard.hparams.Experiment",
    "HParamInfo": "tensorboard.hparams.HParamInfo",
    "MetricInfo": "tensorboard.hparams.MetricInfo",
    "MetricName": "tensorboard.hparams.MetricName",
    "Interval": "tensorboard.hparams.Interval",
    "HParamDataType": "tensorboard.hparams.DataType",
    "Status": "tensorboard.hparams.Status",
    "Value": "google.protobuf.Value",
    "ListValue": "google.protobuf.ListValue",
}

SCALAR_TYPES = {"double": 1, "float": 2, "int64": 3, "int32": 5, "bool": 8, "string": 9, "bytes": 12}


def parse_protos(directory):
    """A minimal .proto reader for our own files: messages (nested), oneofs, enums, fields."""
    messages, enums = {}, {}
    for path in sorted(Path(directory).glob("*.proto")):
        text = re.sub(r"//[^\n]*", "", path.read_text())
        stack = []  # (kind, name)
        for tok in re.finditer(r"(message|enum|oneof)\s+(\w+)\s*\{|\}|([^;{}]+);", text):
            if tok.group(1):
                kind, name = tok.group(1), tok.group(2)
                if kind != "oneof":
                    full = ".".join([n for k, n in stack if k != "oneof"] + [name])
                    (messages if kind == "message" else enums)[full] = {}
                stack.append((kind, name))
            elif tok.group(0) == "}":
                stack.pop()
            elif stack:
                stmt = " ".join(tok.group(3).split())
                owner = ".".join(n for k, n in stack if k != "oneof")
                if owner in enums:
                    name, num = re.fullmatch(r"(\w+) = (\d+)", stmt).groups()
                    enums[owner][name] = int(num)
                    continue
                m = re.fullmatch(r"(repeated )?([\w.]+) (\w+) = (\d+)( \[packed = true\])?", stmt)
                assert m, f"{path.name}: cannot parse {stmt!r}"
                messages[owner][m.group(3)] = {
                    "repeated": bool(m.group(1)), "type": m.group(2), "number": int(m.group(4)),
                    "packed": bool(m.group(5)), "oneof": stack[-1][0] == "oneof",
                    "scope": owner,
                }
    return messages, enums


def test_proto_numbers_match_tensorboard():
    from google.protobuf import descriptor_pool, struct_pb2  # noqa: F401  (registers the types)
    from tensorboard.compat.proto import summary_pb2, types_pb2  # noqa: F401

    pool = descriptor_pool.Default()
    messages, enums = parse_protos(ROOT / "src" / "tb" / "proto")
    assert set(messages) | set(enums) == set(UPSTREAM)
    for name, values in enums.items():
        upstream = pool.FindEnumTypeByName(UPSTREAM[name])
        for value, number in values.items():
            assert upstream.values_by_name[value].number == number, f"{name}.{value}"
    for name, fields in messages.items():
        upstream = pool.FindMessageTypeByName(UPSTREAM[name])
        for field, ours in fields.items():
            theirs = upstream.fields_by_name.get(field)
            assert theirs is not None, f"{name}.{field} is not in {UPSTREAM[name]}"
            where = f"{name}.{field}"
            assert theirs.number == ours["number"], where
            repeated = theirs.is_repeated if hasattr(theirs, "is_repeated") else theirs.label == 3
            assert repeated == ours["repeated"], where
            if ours["packed"]:
                assert theirs.is_packed, where
            assert (theirs.containing_oneof is not None) == ours["oneof"], where
            if ours["type"] in SCALAR_TYPES:
                assert theirs.type == SCALAR_TYPES[ours["type"]], where
            else:
                # Resolve the type name as protoc does: innermost enclosing scope first.
                scope = ours["scope"].split(".")
                candidates = [".".join(scope[:i] + [ours["type"]]) for i in range(len(scope), -1, -1)]
                resolved = next(c for c in candidates if c in UPSTREAM)
                target = theirs.message_type or theirs.enum_type
                assert target.full_name == UPSTREAM[resolved], where


# ---- damaged files: TensorBoard and our reader stop at the same record ---------------------------------------


def damage(data, offsets, how):
    """Returns (damaged bytes, number of whole good records before the damage)."""
    k = len(offsets) // 2  # a record in the middle
    if how == "truncate_header":
        return data[: offsets[k] + 5], k
    if how == "truncate_footer":
        return data[: offsets[k + 1] - 2], k
    if how == "zero_fill":
        return data[: offsets[k]] + bytes(len(data) - offsets[k]), k
    if how == "bit_flip_data":
        pos = offsets[k] + 12 + 3
    else:  # bit_flip_length
        pos = offsets[k] + 1
    flipped = bytearray(data)
    flipped[pos] ^= 0x08
    return bytes(flipped), k


@pytest.mark.parametrize("how", ["truncate_header", "truncate_footer", "zero_fill", "bit_flip_data",
                                 "bit_flip_length"])
def test_damaged_file_reads_to_last_good_record(sample, tmp_path, how):
    src = Path(sample["event_file"])
    data = src.read_bytes()
    records, offsets, error = strict_records(src)
    assert error is None
    bad, k = damage(data, offsets[:-1], how)
    run = tmp_path / "run"
    run.mkdir()
    path = run / src.name
    path.write_bytes(bad)

    # The strict reader gets exactly the k whole records, then reports the damage.
    got, _, error = strict_records(path)
    assert got == records[:k]
    assert isinstance(error, tf_errors.DataLossError)
    if how.startswith("bit_flip") or how == "zero_fill":
        assert "crc32" in str(error)

    # TensorBoard's loader (used by EventAccumulator and the server) yields the same k events and stops there.
    loaded = list(event_file_loader.RawEventFileLoader(str(path)).Load())
    assert loaded == records[:k]
    acc = accumulator(run)
    kept = [event_pb2.Event.FromString(r) for r in records[:k]]
    want = {}
    for ev in kept:
        for v in ev.summary.value:
            if v.HasField("simple_value"):
                want.setdefault(v.tag, []).append([ev.step, v.simple_value])
    for tag, series in want.items():
        assert [[e.step, tensor_util.make_ndarray(e.tensor_proto).item()] for e in acc.Tensors(tag)] == series

    # Our C reader agrees on the count and on where the good part ends.
    ours = run_tool("read", path)
    assert ours["records"] == k
    assert ours["good_bytes"] == offsets[k]
    assert ours["stop"] == {"truncate_header": "truncated", "truncate_footer": "truncated",
                            "zero_fill": "bad_length_crc", "bit_flip_data": "bad_data_crc",
                            "bit_flip_length": "bad_length_crc"}[how]


# ---- the TensorBoard server ----------------------------------------------------------------------------------


def http_json(url, body=None, timeout=5):
    headers = {"X-XSRF-Protected": "1"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@contextlib.contextmanager
def tensorboard_server(logdir):
    """`tensorboard --logdir logdir` on a free loopback port; yields (process, base URL) and stops it after."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
                             "--port", str(port), "--reload_interval", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def poll_series(proc, url, length, timeout=60):
    """GETs a scalar series from the tensorboard server `proc` until it has `length` points (the server loads runs
    in the background); fails if the server exits or the series never arrives."""
    deadline, got, last_error = time.monotonic() + timeout, None, None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tensorboard exited early:\n{proc.stdout.read().decode(errors='replace')}")
        try:
            got = http_json(url)
            if len(got) == length:
                break
        except Exception as e:  # not up yet, or the run not loaded yet
            last_error = e
        time.sleep(0.5)
    assert got is not None, f"tensorboard did not serve {url} within {timeout} s: {last_error}"
    return got


def test_tensorboard_server_serves_scalars_and_hparams(sample):
    with tensorboard_server(sample["logdir"]) as (proc, base):
        run, tag = sample["run"], "loss/train"
        expected = sample["scalars"][tag]
        url = f"{base}/data/plugin/scalars/scalars?run={run}&tag={urllib.parse.quote(tag)}"
        got = poll_series(proc, url, len(expected))
        assert [[step, value] for _, step, value in got] == expected

        # The HParams dashboard sees the experiment and this run as a session with its values.
        experiment = http_json(f"{base}/data/plugin/hparams/experiment", {"experimentName": ""})
        names = {h["name"] for h in experiment["hparamInfos"]}
        assert names == set(sample["hparams"])
        groups = http_json(f"{base}/data/plugin/hparams/session_groups",
                           {"experimentName": "", "startIndex": 0, "sliceSize": 10,
                            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                                "STATUS_RUNNING"]})
        (group,) = groups["sessionGroups"]
        assert group["hparams"] == sample["hparams"]
        assert group["sessions"][0]["status"] == "STATUS_SUCCESS"


# ---- the profiler trace --------------------------------------------------------------------------------------


def test_trace_file(sample):
    path = Path(sample["trace_file"])
    assert path.parent == Path(sample["run_dir"]) / "traces"
    assert re.fullmatch(r"[^/]+_\d+\.\d+\.pt\.trace\.json\.gz", path.name)
    assert not list(path.parent.glob("*.tmp"))
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    assert trace["schemaVersion"] == 1
    assert trace["deviceProperties"] == []
    assert trace["distributedInfo"] == {"backend": "", "rank": 0, "world_size": 1}
    events = trace["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert xs
    for e in xs:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert isinstance(e["ts"], float) and e["dur"] >= 0
    names = [e["name"] for e in xs]
    for name in ("train_step", "forward", "conv3d", "backward", "conv3d_fwd_kernel"):
        assert names.count(name) == 3
    kernels = [e for e in xs if e["cat"] == "kernel"]
    assert sorted(e["args"]["correlation"] for e in kernels) == [100, 101, 102]
    # Each forward lies inside a train_step on the same thread, and conv3d inside forward.
    by_name = lambda n: [e for e in xs if e["name"] == n]  # noqa: E731
    for inner, outer in (("forward", "train_step"), ("conv3d", "forward"), ("backward", "train_step")):
        for e in by_name(inner):
            assert any(o["tid"] == e["tid"] and o["ts"] <= e["ts"] + 1e-3
                       and e["ts"] + e["dur"] <= o["ts"] + o["dur"] + 1e-3 for o in by_name(outer))
    meta = {(e["name"], e["args"]["name"]) for e in events if e["ph"] == "M"}
    assert ("process_name", "voxscale rank 0") in meta
    assert ("thread_name", "main") in meta

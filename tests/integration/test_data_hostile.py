"""The data surfaces under hostile input (issue 24), each case a reproduction that once went wrong: FIFOs, NaN and
Inf voxels, NIfTI vox_offset, mixed PNG bit depths, CSV manifests as spreadsheets write them, damage found late,
multi-member gzip, libpng's own lines and NIfTI's messages. Every refusal is exit 2 and one line naming the file
(and its manifest row), and a rerun with the same --out after the input is fixed succeeds without removing
anything by hand."""
import gzip
import json
import os
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

from conftest import ROOT, VOXSCALE, metrics, run
from test_data import data_config, nib, write_dataset, write_png


def assert_bad(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_exp_and_silu_take_nan_without_undefined_behaviour(tmp_path):
    """kernels/common/exp_cpu.h converted NaN to int and shifted the negative result (UBSan's report)."""
    exe = tmp_path / "exp_nan"
    subprocess.run(["cc", "-std=c11", "-O1", "-fsanitize=undefined,float-cast-overflow", "-fno-sanitize-recover=all",
                    "-I" + os.path.join(ROOT, "kernels"), os.path.join(ROOT, "tests", "tools", "exp_nan.c"), "-o",
                    str(exe)], check=True)
    p = subprocess.run([str(exe), "nan", "-nan", "inf", "-inf", "1e30", "-1e30", "0.5"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and "runtime error" not in p.stderr, p.stderr
    rows = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines()}
    assert all(v.endswith("nan") for v in rows["nan"][:2]), rows  # NaN in, NaN out: divergence still shows
    assert float(rows["0.5"][1]) == pytest.approx(0.5 / (1 + np.exp(-0.5)), rel=1e-6)


# ---- the readers, one volume at a time (data_probe volume: {"error": why} and exit 2, nothing on stderr) -------

def probe_volume(path, channels=1):
    from test_data import PROBE
    p = subprocess.run([PROBE, "volume", str(path), str(channels), os.devnull], capture_output=True, text=True,
                       timeout=60)
    info = json.loads(p.stdout.splitlines()[-1]) if p.stdout.strip() else {}
    return p, info


def assert_refused(path, *needles, channels=1):
    p, info = probe_volume(path, channels)
    assert p.returncode == 2 and "error" in info, (p.returncode, p.stdout, p.stderr)
    assert p.stderr == "", "the reader's library printed lines of its own: %r" % p.stderr
    for n in needles:
        assert n in info["error"], (n, info["error"])
    return info["error"]


def nifti_bytes(data=None, **header):
    """A NIfTI-1 image (int16 4x3x5 by default) as bytes, with header fields set through nibabel."""
    data = np.arange(60, dtype=np.int16).reshape(4, 3, 5) if data is None else data
    img = nib.Nifti1Image(data, np.eye(4))
    for k, v in header.items():
        img.header[k] = v
    return bytearray(img.to_bytes())


VOX_OFFSET = 108  # NIfTI-1: float32 vox_offset


@pytest.mark.parametrize("offset", [0.0, 10.0, 348.0, 352.5])
def test_vox_offset_inside_the_header_or_fractional_is_refused_alike_in_nii_and_nii_gz(tmp_path, offset):
    raw = nifti_bytes()
    struct.pack_into("<f", raw, VOX_OFFSET, offset)
    (tmp_path / "v.nii").write_bytes(bytes(raw))
    (tmp_path / "v.nii.gz").write_bytes(gzip.compress(bytes(raw)))
    a = assert_refused(tmp_path / "v.nii", "vox_offset = %g" % offset)
    b = assert_refused(tmp_path / "v.nii.gz", "vox_offset = %g" % offset)
    assert a == b  # .nii and .nii.gz: the same header, the same reason (was: accepted, and "cut short")


def test_a_png_stack_of_mixed_bit_depths_is_refused(tmp_path):
    stack = tmp_path / "stack"
    stack.mkdir()
    write_png(stack / "s1.png", np.full((4, 5), 200, np.uint8))
    write_png(stack / "s2.png", np.full((4, 5), 60000, np.uint16))
    write_png(stack / "s3.png", np.full((4, 5), 100, np.uint8))
    assert_refused(stack, "slice s2.png", "16-bit, the first slice 8-bit")


def test_multi_member_gzip_reads_and_gzip_named_wrong_is_named(tmp_path):
    data = np.arange(7 * 5 * 6, dtype=np.int16).reshape(7, 5, 6)
    raw = bytes(nifti_bytes(data))
    (tmp_path / "multi.nii.gz").write_bytes(gzip.compress(raw[:500]) + gzip.compress(raw[500:]))  # as bgzip does
    (tmp_path / "ref.nii").write_bytes(raw)
    p, info = probe_volume(tmp_path / "multi.nii.gz")
    assert p.returncode == 0 and info["dims"] == [6, 5, 7, 1], (p.stdout, p.stderr)
    (tmp_path / "zipped.nii").write_bytes(gzip.compress(raw))
    assert_refused(tmp_path / "zipped.nii", "gzip-compressed but its name does not end in .gz")
    (tmp_path / "plain.nii.gz").write_bytes(raw)
    assert_refused(tmp_path / "plain.nii.gz", "not gzip-compressed but its name ends in .gz")
    # a stream cut short: named so, not "cannot be read"
    (tmp_path / "short.nii.gz").write_bytes(gzip.compress(raw)[:-30])
    assert_refused(tmp_path / "short.nii.gz", "cut short")


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def test_libpng_reasons_come_inside_our_one_line(tmp_path):
    stack = tmp_path / "crc"
    stack.mkdir()
    write_png(stack / "s1.png", np.full((4, 5), 7, np.uint8))
    good = (stack / "s1.png").read_bytes()
    bad = bytearray(good)
    at = good.index(b"IDAT")
    length = struct.unpack(">I", good[at - 4:at])[0]
    bad[at + 4 + length] ^= 0xFF  # the chunk's CRC: the pixels decode, the check after them fails
    (stack / "s2.png").write_bytes(bytes(bad))
    # the header reads (a probe passes); the damage shows when the pixels are decoded
    assert_refused(stack, "slice s2.png", "libpng: IDAT: CRC error")
    huge = tmp_path / "huge"
    huge.mkdir()
    ihdr = struct.pack(">IIBBBBB", 2 ** 31 - 1, 3, 8, 0, 0, 0, 0)  # libpng printed three lines of its own for it
    (huge / "s1.png").write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IEND", b""))
    assert_refused(huge, "slice s1.png", "not a readable PNG (libpng: ")


def set_dims(raw, dims):
    struct.pack_into("<8h", raw, 40, *dims)


def test_nifti_messages_name_the_right_thing(tmp_path):
    raw = nifti_bytes()
    set_dims(raw, [3, 30000, 3, 5, 1, 1, 1, 1])
    (tmp_path / "d1.nii").write_bytes(bytes(raw))
    assert_refused(tmp_path / "d1.nii", "dim[1] = 30000")  # was "dim[0] = 3"
    raw = nifti_bytes()
    set_dims(raw, [4, 4, 3, 5, -2, 1, 1, 1])
    (tmp_path / "d4.nii").write_bytes(bytes(raw))
    assert_refused(tmp_path / "d4.nii", "dim[4] = -2")
    for code, name in ((32, "complex64"), (1536, "float128"), (1792, "complex128")):
        raw = nifti_bytes()
        struct.pack_into("<h", raw, 70, code)
        (tmp_path / ("t%d.nii" % code)).write_bytes(bytes(raw))
        assert_refused(tmp_path / ("t%d.nii" % code), "datatype %d" % code, "not supported")  # was "cut short"
    pair = nib.Nifti1Pair(np.arange(60, dtype=np.int16).reshape(4, 3, 5), np.eye(4))
    nib.save(pair, str(tmp_path / "pair.img"))
    os.unlink(tmp_path / "pair.img")
    assert_refused(tmp_path / "pair.hdr", "pair.img is missing")  # was "gzip without a trailer"
    gz = bytearray(gzip.compress(bytes(nifti_bytes())))
    gz[-8] ^= 0x01  # the CRC-32 of the trailer
    (tmp_path / "crc.nii.gz").write_bytes(bytes(gz))
    assert_refused(tmp_path / "crc.nii.gz", "gzip stream is damaged", "incorrect data check")  # was "no valid header"


def test_a_pair_read_by_its_img_and_listed_once_under_a_star_glob(tmp_path):
    vols = tmp_path / "vols"
    vols.mkdir()
    data = np.arange(12 * 10 * 14, dtype=np.int16).reshape(14, 10, 12)
    for i in range(3):
        nib.save(nib.Nifti1Pair(data + i, np.eye(4)), str(vols / ("p%d.img" % i)))
    p, info = probe_volume(vols / "p1.img")  # a manifest row may name the .img: the .hdr beside it is read
    assert p.returncode == 0 and info["dims"] == [12, 10, 14, 1], (p.stdout, p.stderr)
    cfg = data_config(tmp_path, "unused.csv")
    spec = json.loads(cfg.read_text())
    spec["data"] = {"source": "dir", "dir": str(vols), "glob": "*", "val_fraction": 0.34}
    cfg.write_text(json.dumps(spec))
    p = run("train", "--config", cfg, "--steps", "1", "--out", tmp_path / "run")
    assert "2 training and 1 validation volumes" in p.stdout, p.stdout  # was 4 and 2: each .img a volume of its own


def train_fixed_after(tmp_path, cfg, out, fix, *needles, steps=2):
    """A refused run (exit 2, one line with needles), then the input fixed by fix(), then the same --out trains."""
    p = run("train", "--config", cfg, "--steps", steps, "--out", out, check=False, timeout=60)
    assert_bad(p, *needles)
    fix()
    run("train", "--config", cfg, "--steps", steps, "--out", out, timeout=120)
    assert os.path.exists(os.path.join(out, "checkpoints", "step_%d.ckpt" % steps))


def test_a_fifo_among_the_inputs_is_refused_not_waited_on(tmp_path):
    """gzopen() on a FIFO waited for a writer forever, with no word."""
    csv = write_dataset(tmp_path, n=6)
    good = (tmp_path / "vols" / "case0.nii.gz").read_bytes()
    fifo = tmp_path / "vols" / "pipe.nii.gz"
    os.mkfifo(fifo)

    def fix():
        os.unlink(fifo)
        fifo.write_bytes(good)
    rows = csv.read_text().splitlines() + ["vols/pipe.nii.gz,train,0"]
    (tmp_path / "fifo.csv").write_text("\n".join(rows) + "\n")
    train_fixed_after(tmp_path, data_config(tmp_path, tmp_path / "fifo.csv"), tmp_path / "csv_run", fix,
                      "pipe.nii.gz", "row 8", "FIFO")
    os.unlink(fifo)
    os.mkfifo(fifo)  # the same in a folder source
    cfg = data_config(tmp_path, "unused.csv")
    spec = json.loads(cfg.read_text())
    spec["data"] = {"source": "dir", "dir": str(tmp_path / "vols"), "glob": "*.nii.gz"}
    cfg.write_text(json.dumps(spec))
    train_fixed_after(tmp_path, cfg, tmp_path / "dir_run", fix, "pipe.nii.gz", "FIFO")
    stack = tmp_path / "stack"  # and a slice of a PNG stack
    stack.mkdir()
    write_png(stack / "s1.png", np.full((4, 5), 9, np.uint8))
    os.mkfifo(stack / "s2.png")
    assert_refused(stack, "slice s2.png", "FIFO")


# ---- CSV manifests as spreadsheets write them ----------------------------------------------------------------

def manifest(tmp_path, name, text, **data):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return data_config(tmp_path, path, **data)


def warnings(p):
    return [line for line in p.stderr.splitlines() if "warning:" in line]


def test_csv_with_a_bom_long_rows_and_quotes_trains(tmp_path):
    csv = write_dataset(tmp_path, n=6)
    rows = csv.read_text().splitlines()
    note = "x" * 20000  # a row longer than the old 16383-byte buffer, before the path column
    text = "\ufeffnotes,path,split\n" + "".join('"%s",%s\n' % (note, r.rsplit(",", 1)[0]) for r in rows[1:])
    p = run("train", "--config", manifest(tmp_path, "bom.csv", text), "--steps", "1", "--out", tmp_path / "r")
    assert "4 training and 2 validation volumes" in p.stdout and warnings(p) == [], p.stderr


def test_csv_over_wide_rows_and_nul_bytes_are_refused_by_row(tmp_path):
    csv = write_dataset(tmp_path, n=6)
    rows = csv.read_text().splitlines()
    wide = rows + ["vols/case0.nii.gz,train," + ",".join(["0"] * 300)]
    p = run("train", "--config", manifest(tmp_path, "wide.csv", "\n".join(wide) + "\n"), "--steps", "1", "--out",
            tmp_path / "w", check=False)
    assert_bad(p, "wide.csv:8:", "more than 256 columns")
    nul = "\n".join(rows[:3]) + "\nvols/case3.nii.gz\0junk,train,0\n"
    p = run("train", "--config", manifest(tmp_path, "nul.csv", nul), "--steps", "1", "--out", tmp_path / "n",
            check=False)
    assert_bad(p, "nul.csv:4:", "NUL byte")
    utf16 = "\n".join(rows).encode("utf-16")  # a spreadsheet's "Unicode text"
    p = run("train", "--config", manifest(tmp_path, "u16.csv", utf16), "--steps", "1", "--out", tmp_path / "u",
            check=False)
    assert_bad(p, "u16.csv:1:", "NUL byte", "UTF-16")
    twice = ["path,split,path"] + [r + ",x" for r in rows[1:]]
    p = run("train", "--config", manifest(tmp_path, "twice.csv", "\n".join(twice)), "--steps", "1", "--out",
            tmp_path / "t", check=False)
    assert_bad(p, "twice.csv:1:", "column \"path\"", "twice")
    assert not any((tmp_path / d).exists() for d in "wnut")


def test_csv_duplicates_leakage_and_an_empty_validation_set_are_warned_once_with_counts(tmp_path):
    csv = write_dataset(tmp_path, n=6)
    rows = csv.read_text().splitlines()  # header, 4 train rows (2..5), 2 val rows (6, 7)
    text = "\n".join(["path,split,label,label"] + [r + ",1" for r in rows[1:]] +
                      ["vols/case0.nii.gz,train,0,1", "./vols//case0.nii.gz,train,0,1",  # rows 8, 9 repeat row 2
                       "vols/case1.nii.gz,val,1,1", "vols/case4.nii.gz,train,0,1"])  # 1 in val, 4 in train
    p = run("train", "--config", manifest(tmp_path, "dup.csv", text), "--steps", "2", "--out", tmp_path / "d")
    w = warnings(p)
    assert len(w) == 3, p.stderr
    assert any("2 row(s) list a volume listed before" in x and "row 8 repeats row 2" in x for x in w), w
    assert any("2 volume(s) are in both the training and the validation split" in x for x in w), w
    assert any("column name(s) of the header given twice" in x and '"label"' in x for x in w), w
    trainonly = "\n".join([rows[0]] + [r.replace(",val,", ",train,") for r in rows[1:]])
    p = run("train", "--config", manifest(tmp_path, "noval.csv", trainonly), "--steps", "2", "--out", tmp_path / "e")
    assert len(warnings(p)) == 1 and "no volume is held out for validation" in p.stderr, p.stderr


# ---- stages --------------------------------------------------------------------------------------------------

def test_stage_steps_are_summed_in_64_bits_and_bounded_and_steps_beside_stages_is_refused(tmp_path):
    """Three stages of 1e9 steps were '-1294967296 steps', 'done: 0 steps', exit 0, and a config.json the reader
    refuses; --steps beside train.stages was silently ignored."""
    spec = json.loads(open(os.path.join(ROOT, "configs", "test", "stages.json")).read())
    spec["train"]["stages"] = [{"input_size": [8, 8, 8], "steps": 10 ** 9}] * 3
    cfg = tmp_path / "long.json"
    cfg.write_text(json.dumps(spec))
    p = run("train", "--config", cfg, "--out", tmp_path / "long", check=False, timeout=60)
    assert_bad(p, "long.json", "train.stages[0..1] sum to 2000000000 steps")
    assert not (tmp_path / "long").exists()
    for flag in (["--steps", "5"], ["--set", "train.steps=5"]):
        p = run("train", "--config", "configs/test/stages.json", *flag, "--out", tmp_path / "s", check=False)
        assert_bad(p, "train.steps = 5", "train.stages set the run's length")
    assert not (tmp_path / "s").exists()
    # the resolved config of a staged run is itself a config the reader takes, --steps and all left alone
    run("train", "--config", "configs/test/stages.json", "--out", tmp_path / "ok")
    again = run("train", "--config", tmp_path / "ok" / "config.json", "--out", tmp_path / "again")
    assert "done: 12 steps" in again.stdout


# ---- NaN and Inf voxels (data.nonfinite) ---------------------------------------------------------------------

def nifti_file(path, data, slope=None):
    img = nib.Nifti1Image(data, np.eye(4))
    if slope is not None:
        img.header.set_slope_inter(slope, 0)
    nib.save(img, str(path))


def with_extra_rows(tmp_path, name, extra, **data):
    csv = write_dataset(tmp_path, n=6)
    rows = csv.read_text().splitlines() + extra
    (tmp_path / name).write_text("\n".join(rows) + "\n")
    return data_config(tmp_path, tmp_path / name, **data)


@pytest.mark.parametrize("case", ["all_nan", "one_nan", "float64_1e300", "int16_slope_1e38"])
def test_non_finite_voxels_are_refused_with_the_file_and_count(tmp_path, case):
    """An all-NaN volume trained like an all-zero one; a float64 1e300 became Inf and ended the run with exit 4
    'training diverged ... lower train.lr' after writing its directory."""
    shape = (12, 10, 14)
    if case == "all_nan":
        data, slope, count = np.full(shape, np.nan, np.float32), None, 12 * 10 * 14
    elif case == "one_nan":
        data, slope, count = np.ones(shape, np.float32), None, 1
        data[3, 4, 5] = np.nan
    elif case == "float64_1e300":
        data, slope, count = np.ones(shape, np.float64), None, 2
        data[0, 0, 0] = 1e300
        data[1, 0, 0] = -1e300
    else:
        data, slope, count = np.full(shape, 100, np.int16), 1e38, 12 * 10 * 14  # 1e40: beyond float32
    (tmp_path / "vols").mkdir()
    path = tmp_path / "vols" / "bad.nii.gz"
    nifti_file(path, data, slope)
    cfg = with_extra_rows(tmp_path, "nf.csv", ["vols/bad.nii.gz,train,0"])
    out = tmp_path / "run"
    train_fixed_after(tmp_path, cfg, out, lambda: nifti_file(path, np.ones(shape, np.int16)),
                      "bad.nii.gz", "row 8", "%d of its %d voxels are not finite" % (count, 12 * 10 * 14),
                      "data.nonfinite")


def test_data_nonfinite_zero_and_skip_warn_once_per_file(tmp_path):
    (tmp_path / "vols").mkdir()
    data = np.ones((12, 10, 14), np.float32)
    data[2, 2, 2] = np.inf
    nifti_file(tmp_path / "vols" / "inf.nii.gz", data)
    for policy, needle in (("zero", "set to 0 (data.nonfinite=zero)"), ("skip", "skipped (data.nonfinite=skip)")):
        cfg = with_extra_rows(tmp_path, policy + ".csv", ["vols/inf.nii.gz,train,0"], nonfinite=policy,
                              cache_rate=0.0)  # every sample decodes its volume: many decodes of the file
        p = run("train", "--config", cfg, "--steps", "12", "--out", tmp_path / policy)
        lines = [l for l in p.stderr.splitlines() if "inf.nii.gz" in l]
        assert len(lines) == 1 and needle in lines[0] and "1 of its 1680 voxels" in lines[0], p.stderr
    assert "5 training" in p.stdout or "bad volumes 1" in p.stdout, p.stdout


# ---- damage found late, and the run directory --------------------------------------------------------------

def damaged_gz(path):
    """A .nii.gz (48^3 int16, larger than zlib's buffers, so reading the header does not reach the damage) whose
    header and trailer are intact but whose stream is damaged 3/4 of the way in: stored blocks, so no decode
    error, only the CRC check at the end fails."""
    data = np.random.default_rng(0).integers(0, 3000, size=(48, 48, 48)).astype(np.int16)
    raw = bytearray(gzip.compress(nib.Nifti1Image(data, np.eye(4)).to_bytes(), compresslevel=0))
    raw[len(raw) * 3 // 4] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("kind", ["png_crc", "gz_body", "val_gz_body"])
def test_damage_found_late_leaves_no_run_directory_and_the_rerun_succeeds(tmp_path, kind):
    csv = write_dataset(tmp_path, n=6)
    rows = csv.read_text().splitlines()
    vols = tmp_path / "vols"
    if kind == "png_crc":
        stack = vols / "stack"
        stack.mkdir()
        for z in range(14):
            write_png(stack / ("s%d.png" % z), np.full((10, 12), 20 * z, np.uint8))
        good = (stack / "s7.png").read_bytes()
        bad = bytearray(good)
        at = good.index(b"IDAT")
        bad[at + 4 + struct.unpack(">I", good[at - 4:at])[0]] ^= 0xFF
        (stack / "s7.png").write_bytes(bytes(bad))
        rows.append("vols/stack,train,0")
        fix = lambda: (stack / "s7.png").write_bytes(good)
        needles = ["stack", "row 8", "libpng: IDAT: CRC error"]
    else:
        target = vols / "case2.nii.gz" if kind == "gz_body" else vols / "case5.nii.gz"  # case5: a val row
        keep = target.read_bytes()
        damaged_gz(target)
        fix = lambda: target.write_bytes(keep)
        needles = [target.name, "row %d" % (4 if kind == "gz_body" else 7), "gzip stream is damaged"]
    (tmp_path / "late.csv").write_text("\n".join(rows) + "\n")
    cfg = data_config(tmp_path, tmp_path / "late.csv", cache_rate=0.0)
    out = tmp_path / "run"
    p = run("train", "--config", cfg, "--steps", "2", "--out", out, check=False, timeout=60)
    assert_bad(p, *needles)
    assert not out.exists(), "a run refused for its data made its directory"
    fix()
    run("train", "--config", cfg, "--steps", "2", "--out", out)


def test_skip_bad_warns_once_per_file_and_counts_the_rest(tmp_path):
    """With data.skip_bad and no cache the same bad volume was warned of on every decode."""
    csv = write_dataset(tmp_path, n=6)
    damaged_gz(tmp_path / "vols" / "broken.nii.gz")
    rows = csv.read_text().splitlines() + ["vols/broken.nii.gz,train,0"]
    (tmp_path / "skip.csv").write_text("\n".join(rows) + "\n")
    cfg = data_config(tmp_path, tmp_path / "skip.csv", cache_rate=0.0, skip_bad=1)
    out = tmp_path / "run"
    p = run("train", "--config", cfg, "--steps", "20", "--out", out, "--set", "train.log_every=5")
    assert p.stderr.count("broken.nii.gz") == 1 and "skipped (data.skip_bad)" in p.stderr, p.stderr
    assert "5 training and 2 validation volumes" in p.stdout, p.stdout  # its header is fine: found when decoded
    assert "bad volumes 1 (" in p.stdout, p.stdout
    rows = [m for m in metrics(out) if "loss" in m]
    assert rows[-1]["bad_volumes"] == 1 and rows[-1]["bad_reads"] >= 1, rows[-1]


def test_a_run_that_ended_before_its_first_checkpoint_is_taken_over(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--config", "configs/test/tiny.json", "--out", out, "--set", "train.ckpt_every=0",
            "--set", "train.val_samples=0", "--set", "train.log_every=1"]
    proc = subprocess.Popen([VOXSCALE,
                             *map(str, args), "--steps", "100000"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = __import__("time").time() + 60
    while __import__("time").time() < deadline and (not (out / "metrics.jsonl").exists() or
                                                     len(metrics(out)) < 2):
        __import__("time").sleep(0.05)
    proc.kill()  # SIGKILL: nothing cleaned up, the lock file left behind
    proc.communicate()
    assert (out / "config.json").exists() and not os.listdir(out / "checkpoints")
    p = run(*args, "--steps", "3")
    assert "ended before its first checkpoint" in p.stdout and "taking it over" in p.stdout, p.stdout
    assert [m["step"] for m in metrics(out) if "loss" in m] == [1, 2, 3]  # only this run's rows
    assert len([f for f in os.listdir(out) if f.startswith("events.out.tfevents.")]) == 1
    p = run(*args, "--steps", "3", check=False)  # now it holds a checkpoint: refused as before
    assert_bad(p, "already holds a run", "--resume")


def test_an_out_holding_another_runs_files_without_config_json_is_refused(tmp_path):
    """A partial copy (checkpoints/ and metrics.jsonl, no config.json) was taken by a fresh run: step_N.ckpt
    overwritten, metrics.jsonl appended to."""
    from test_hardening import snapshot
    first = tmp_path / "first"
    run("train", "--config", "configs/test/tiny.json", "--steps", "2", "--out", first)
    copy = tmp_path / "copy"
    shutil.copytree(first, copy)
    os.unlink(copy / "config.json")
    before = snapshot(copy)
    p = run("train", "--config", "configs/test/tiny.json", "--steps", "2", "--out", copy, check=False)
    # (step_2.ckpt and best.ckpt, which the validation at the end keeps)
    assert_bad(p, str(copy), "without its config.json", "2 checkpoint(s)", "metrics.jsonl", "not of this run")
    assert snapshot(copy) == before
    other = tmp_path / "notes"
    other.mkdir()
    (other / "README.txt").write_text("my notes")
    p = run("train", "--config", "configs/test/tiny.json", "--steps", "2", "--out", other)
    assert "already holds 1 other entry (README.txt first)" in p.stdout, p.stdout
    assert (other / "README.txt").read_text() == "my notes"


# ---- every bad input: one line naming the file and row, exit 2, and the fixed rerun needs no cleanup ---------

def _bad_nifti(tmp_path, name, mutate):
    raw = nifti_bytes(np.arange(14 * 10 * 12, dtype=np.int16).reshape(12, 10, 14))
    mutate(raw)
    (tmp_path / "vols" / name).write_bytes(bytes(raw))


def _case(tmp_path, kind):
    """Writes one bad input into the dataset of tmp_path; returns (the CSV row, needles, a fix)."""
    vols = tmp_path / "vols"
    good = bytes(nifti_bytes(np.arange(14 * 10 * 12, dtype=np.int16).reshape(12, 10, 14)))
    fix_nifti = lambda name: (lambda: (vols / name).write_bytes(good))
    if kind == "vox_offset":
        _bad_nifti(tmp_path, "v.nii", lambda r: struct.pack_into("<f", r, VOX_OFFSET, 10.0))
        return "vols/v.nii", ["v.nii", "vox_offset = 10"], fix_nifti("v.nii")
    if kind == "datatype":
        _bad_nifti(tmp_path, "t.nii", lambda r: struct.pack_into("<h", r, 70, 32))
        return "vols/t.nii", ["t.nii", "datatype 32", "not supported"], fix_nifti("t.nii")
    if kind == "dim":
        _bad_nifti(tmp_path, "d.nii", lambda r: set_dims(r, [3, 14, 10, 9000, 1, 1, 1, 1]))
        return "vols/d.nii", ["d.nii", "dim[3] = 9000"], fix_nifti("d.nii")
    if kind == "gzip_named_nii":
        (vols / "z.nii").write_bytes(gzip.compress(good))
        return "vols/z.nii", ["z.nii", "gzip-compressed but its name"], fix_nifti("z.nii")
    if kind == "pair_without_img":
        nib.save(nib.Nifti1Pair(np.ones((14, 10, 12), np.int16), np.eye(4)), str(vols / "p.img"))
        keep = (vols / "p.img").read_bytes()
        os.unlink(vols / "p.img")
        return "vols/p.hdr", ["p.hdr", "p.img is missing"], lambda: (vols / "p.img").write_bytes(keep)
    if kind == "png_depth":
        stack = vols / "stack"
        stack.mkdir()
        for z in range(12):
            write_png(stack / ("s%d.png" % z), np.full((10, 14), 9, np.uint16 if z == 5 else np.uint8))
        return "vols/stack", ["stack", "slice s5.png", "16-bit"], \
            lambda: write_png(stack / "s5.png", np.full((10, 14), 9, np.uint8))
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["vox_offset", "datatype", "dim", "gzip_named_nii", "pair_without_img",
                                  "png_depth"])
def test_every_bad_volume_is_one_line_and_its_fixed_rerun_needs_no_cleanup(tmp_path, kind):
    csv = write_dataset(tmp_path, n=6)
    row, needles, fix = _case(tmp_path, kind)
    (tmp_path / "bad.csv").write_text("\n".join(csv.read_text().splitlines() + [row + ",train,0"]) + "\n")
    train_fixed_after(tmp_path, data_config(tmp_path, tmp_path / "bad.csv"), tmp_path / "run", fix,
                      *needles, "row 8")


@pytest.mark.parametrize("kind", ["wide", "nul", "unterminated", "no_path", "split"])
def test_every_bad_manifest_row_is_one_line_and_its_fixed_rerun_needs_no_cleanup(tmp_path, kind):
    csv = write_dataset(tmp_path, n=6)
    rows = csv.read_text().splitlines()
    bad = {"wide": "vols/case0.nii.gz,train," + ",".join(["0"] * 300), "nul": "vols/case0.nii.gz\0,train,0",
           "unterminated": '"vols/case0.nii.gz,train,0', "no_path": ",train,0", "split": "vols/case0.nii.gz,test,0"}
    needle = {"wide": "more than 256 columns", "nul": "NUL byte", "unterminated": "unterminated quote",
              "no_path": "has no path", "split": "neither train nor val"}
    path = tmp_path / "m.csv"
    path.write_text("\n".join(rows + [bad[kind]]) + "\n")
    train_fixed_after(tmp_path, data_config(tmp_path, path), tmp_path / "run",
                      lambda: path.write_text("\n".join(rows) + "\n"), "m.csv:8:", needle[kind])

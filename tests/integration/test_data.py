"""Real data: the NIfTI reader against nibabel value for value (its own test files, every datatype, either byte
order, scl_slope/scl_inter, .nii.gz and .hdr/.img pairs, NIfTI-2), PNG slice stacks against the volume the test
wrote, normalisation, cropping and augmentation against numpy, the cache's counters, a CSV dataset of NIfTI files
that trains, exact resume with caching and augmentation, progressive stages, and each bad input's one line."""
import json
import os
import struct
import subprocess
import zlib

import numpy as np
import pytest

from conftest import ROOT, TOOLS, metrics, run

nib = pytest.importorskip("nibabel", reason="python3-nibabel is not installed; ci/deps.sh installs it")
# VX_DATA_PROBE names another build's probe (checking a test against an older build, say)
PROBE = os.environ.get("VX_DATA_PROBE") or os.path.join(TOOLS, "data_probe")
NIB_DATA = os.path.join(os.path.dirname(nib.__file__), "tests", "data")


def probe(*args, check=True):
    p = subprocess.run([PROBE, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError("data_probe %s: %s %s" % (" ".join(map(str, args)), p.stdout, p.stderr))
    return p, (json.loads(p.stdout.splitlines()[-1]) if p.stdout.strip() else {})


def read_volume(tmp_path, path, channels=1):
    out = tmp_path / "vol.raw"
    _, info = probe("volume", path, channels, out)
    d, h, w, c = info["dims"]
    return np.fromfile(out, dtype=np.float32).reshape(d, h, w, c)


def nib_reference(path):
    """nibabel's scaled data in our layout [z][y][x][c], rounded to float32 as ours."""
    data = np.asanyarray(nib.load(str(path)).get_fdata(dtype=np.float64))
    if data.ndim == 3:
        data = data[..., None]
    return data.transpose(2, 1, 0, 3).astype(np.float32)


@pytest.mark.parametrize("name", ["anatomical.nii", "functional.nii", "example4d.nii.gz", "example_nifti2.nii.gz"])
def test_nibabels_own_files_read_value_for_value(tmp_path, name):
    path = os.path.join(NIB_DATA, name)
    ref = nib_reference(path)
    ours = read_volume(tmp_path, path, ref.shape[3])
    assert ours.shape == ref.shape
    assert np.array_equal(ours, ref), np.abs(ours - ref).max()


@pytest.mark.parametrize("dtype", ["u1", "i1", "i2", "u2", "i4", "u4", "i8", "u8", "f4", "f8"])
@pytest.mark.parametrize("order", ["<", ">"])
def test_every_datatype_and_byte_order_with_scaling(tmp_path, dtype, order):
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype) if dtype[0] in "iu" else None
    lo, hi = (max(info.min, -3000), min(info.max, 3000)) if info else (-2.5, 2.5)
    data = rng.uniform(lo, hi, size=(7, 5, 6)).astype(order + dtype)
    img = nib.Nifti1Image(data, np.eye(4), nib.Nifti1Header(endianness=order))
    img.header.set_data_dtype(order + dtype)
    if dtype[0] in "iu":
        img.header.set_slope_inter(0.25, -1.5)  # scl_slope / scl_inter must be applied
    for suffix in (".nii", ".nii.gz"):
        path = tmp_path / ("v_%s_%s%s" % ("be" if order == ">" else "le", dtype, suffix))
        nib.save(img, str(path))
        assert np.array_equal(read_volume(tmp_path, path), nib_reference(path)), (dtype, order, suffix)


def test_hdr_img_pairs_and_extensions_and_nifti2(tmp_path):
    data = np.arange(4 * 3 * 5, dtype=np.int16).reshape(4, 3, 5)
    pair = nib.Nifti1Pair(data, np.eye(4))
    nib.save(pair, str(tmp_path / "pair.img"))
    assert np.array_equal(read_volume(tmp_path, tmp_path / "pair.hdr"), nib_reference(tmp_path / "pair.hdr"))
    img = nib.Nifti1Image(data, np.eye(4))
    img.header.extensions.append(nib.nifti1.Nifti1Extension("comment", b"an extension before the data"))
    nib.save(img, str(tmp_path / "ext.nii"))
    assert np.array_equal(read_volume(tmp_path, tmp_path / "ext.nii"), nib_reference(tmp_path / "ext.nii"))
    two = nib.Nifti2Image(data.astype(np.float32) / 3, np.eye(4))
    nib.save(two, str(tmp_path / "two.nii.gz"))
    assert np.array_equal(read_volume(tmp_path, tmp_path / "two.nii.gz"), nib_reference(tmp_path / "two.nii.gz"))


def write_png(path, img):
    """A grey PNG, 8 or 16 bit by dtype (no filter), written by hand so the test needs no imaging library."""
    depth = 16 if img.dtype == np.uint16 else 8
    h, w = img.shape
    rows = b"".join(b"\0" + img[y].astype(">u2" if depth == 16 else "u1").tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, 0, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_png_stack_is_the_volume_the_test_wrote(tmp_path, dtype):
    rng = np.random.default_rng(3)
    vol = rng.integers(0, np.iinfo(dtype).max, size=(12, 9, 11), dtype=dtype)
    stack = tmp_path / "stack"
    stack.mkdir()
    for z in range(12):  # slice2 before slice10: natural order, not the file system's or strcmp's
        write_png(stack / ("slice%d.png" % (z + 1)), vol[z])
    ours = read_volume(tmp_path, stack)
    assert np.array_equal(ours[..., 0], vol.astype(np.float32))


def write_dataset(tmp_path, n=12, size=(12, 10, 14), split=True, rng_seed=1):
    """n NIfTI volumes (soft blobs on a background, int16 with scaling) and a manifest; returns the CSV's path."""
    rng = np.random.default_rng(rng_seed)
    z, y, x = np.meshgrid(*[np.linspace(-1, 1, s) for s in size], indexing="ij")
    rows = ["path,split,label"]
    (tmp_path / "vols").mkdir(exist_ok=True)
    for i in range(n):
        c = rng.uniform(-0.4, 0.4, 3)
        r = rng.uniform(0.3, 0.6)
        blob = np.exp(-((z - c[0]) ** 2 + (y - c[1]) ** 2 + (x - c[2]) ** 2) / r ** 2)
        data = (200 + 1800 * blob + rng.normal(0, 20, size)).astype(np.int16).transpose(2, 1, 0)
        img = nib.Nifti1Image(data, np.eye(4))
        img.header.set_slope_inter(0.5, 10)
        nib.save(img, str(tmp_path / "vols" / ("case%d.nii.gz" % i)))
        rows.append("vols/case%d.nii.gz,%s,%d" % (i, "val" if split and i >= n - 2 else "train", i % 2))
    (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
    return tmp_path / "list.csv"


def data_config(tmp_path, csv, **data):
    cfg = {"model": {"input_size": [8, 8, 8], "channels": [4, 8], "res_blocks": 1, "norm_groups": 2,
                     "latent_channels": 2},
           "train": {"steps": 20, "batch_size": 2, "lr": 3e-3, "warmup_steps": 2, "seed": 5, "log_every": 5,
                     "val_every": 10, "val_samples": 2, "threads": 1},
           "data": dict({"source": "csv", "csv": str(csv)}, **data),
           "output": {"tensorboard": 0}}
    path = tmp_path / ("cfg%d.json" % len(list(tmp_path.glob("cfg*.json"))))
    path.write_text(json.dumps(cfg))
    return path


def percentile_normalise(v, lo=0.5, hi=99.5):
    a, b = np.percentile(v.astype(np.float64), [lo, hi])
    return ((np.clip(v.astype(np.float64), a, b) - a) / (b - a)).astype(np.float32)


def test_validation_volumes_are_normalised_and_centred(tmp_path):
    csv = write_dataset(tmp_path)
    cfg = data_config(tmp_path, csv)
    out = tmp_path / "val.raw"
    probe("val", cfg, 0, out)
    ours = np.fromfile(out, dtype=np.float32).reshape(8, 8, 8)
    vol = nib_reference(tmp_path / "vols" / "case10.nii.gz")[..., 0]  # the first val row
    ref = percentile_normalise(vol)
    d, h, w = ref.shape
    z0, y0, x0 = (d - 8) // 2, (h - 8) // 2, (w - 8) // 2
    assert np.allclose(ours, ref[z0:z0 + 8, y0:y0 + 8, x0:x0 + 8], atol=2e-6), np.abs(ours - ref[z0:z0+8, y0:y0+8, x0:x0+8]).max()
    # z-score, and padding with the minimum where the input is larger than the volume
    cfg = data_config(tmp_path, csv, normalize="zscore")
    big = json.loads(cfg.read_text())
    big["model"]["input_size"] = [16, 16, 16]
    cfg.write_text(json.dumps(big))
    probe("val", cfg, 0, out)
    ours = np.fromfile(out, dtype=np.float32).reshape(16, 16, 16)
    z = ((vol.astype(np.float64) - vol.mean()) / vol.std()).astype(np.float32)
    pz, py, px = (16 - d) // 2, (16 - h) // 2, (16 - w) // 2
    padded = np.full((16, 16, 16), z.min(), np.float32)
    padded[pz:pz + d, py:py + h, px:px + w] = z
    assert np.allclose(ours, padded, atol=2e-5)


def augment_reference(x, code):
    """kernels/augment/augment.h's mapping: y = flip(rot_k(x)) in the (h, w) plane."""
    k = (code >> 3) & 3
    y = np.rot90(x, k=k, axes=(1, 2)) if k else x  # out[j][i] = in[i][n-1-j] for k = 1: numpy's direction
    for axis, bit in ((0, 1), (1, 2), (2, 4)):
        if code & bit:
            y = np.flip(y, axis=axis)
    return np.ascontiguousarray(y)


def test_augmentation_is_flips_and_rotations_of_the_crop(tmp_path):
    csv = write_dataset(tmp_path)
    cfg = data_config(tmp_path, csv)
    plain, aug = tmp_path / "plain.raw", tmp_path / "aug.raw"
    _, a = probe("train", cfg, 0, 16, 0, plain)
    _, b = probe("train", cfg, 0, 16, 1, aug)
    assert a["codes"] == b["codes"] and len(set(b["codes"])) > 4, b["codes"]
    x = np.fromfile(plain, dtype=np.float32).reshape(16, 8, 8, 8)
    y = np.fromfile(aug, dtype=np.float32).reshape(16, 8, 8, 8)
    for i, code in enumerate(b["codes"]):
        assert np.array_equal(y[i], augment_reference(x[i], code)), (i, code)
    # a box (h != w): half turns only, whose mapping (h-1-j, w-1-i) differs from a cube's
    box = json.loads(cfg.read_text())
    box["model"]["input_size"] = [8, 6, 10]
    cfg_box = tmp_path / "box.json"
    cfg_box.write_text(json.dumps(box))
    _, bx = probe("train", cfg_box, 0, 16, 0, tmp_path / "bx.raw")
    _, by = probe("train", cfg_box, 0, 16, 1, tmp_path / "by.raw")
    assert all((code >> 3) & 1 == 0 for code in by["codes"]) and any((code >> 3) == 2 for code in by["codes"])
    bxv = np.fromfile(tmp_path / "bx.raw", dtype=np.float32).reshape(16, 8, 6, 10)
    byv = np.fromfile(tmp_path / "by.raw", dtype=np.float32).reshape(16, 8, 6, 10)
    for i, code in enumerate(by["codes"]):
        assert np.array_equal(byv[i], augment_reference(bxv[i], code)), (i, code)
    # a sample is a function of its index: the same crop and code read alone
    _, c = probe("train", cfg, 7, 1, 1, tmp_path / "one.raw")
    assert c["codes"] == [b["codes"][7]]
    assert np.array_equal(np.fromfile(tmp_path / "one.raw", dtype=np.float32).reshape(8, 8, 8), y[7])


def test_the_cache_keeps_the_window_and_replaces_part_of_it_each_epoch(tmp_path):
    csv = write_dataset(tmp_path, n=10)  # 8 training volumes
    cfg = data_config(tmp_path, csv, cache_rate=0.5, replace_rate=0.5)  # a window of 4, 2 new each epoch
    _, s = probe("stats", cfg, 4 * 5)  # 5 epochs
    assert s["epoch"] == 4 and s["epochs"] == 5
    # the first window, then 2 newcomers per epoch, each decoded once; entering the last epoch queued the next
    # one's 2 newcomers, which the background thread may have decoded by the time the counters are read
    assert 4 + 2 * 4 <= s["decoded"] <= 4 + 2 * 5, s
    assert s["evicted"] >= 2 * 3, s  # those that left the window
    assert s["hits"] + s["misses"] == 20 and s["hits"] >= 20 - s["decoded"], s
    _, full = probe("stats", data_config(tmp_path, csv, cache_rate=1.0), 8 * 3)
    assert full["decoded"] == 8 and full["hits"] == 16 and full["evicted"] == 0, full
    _, none = probe("stats", data_config(tmp_path, csv, cache_rate=0.0), 8 * 2)
    assert none["hits"] == 0 and none["misses"] == 16, none


def test_a_csv_dataset_of_nifti_files_trains(tmp_path):
    csv = write_dataset(tmp_path, n=12)
    out = tmp_path / "run"
    p = run("train", "--config", data_config(tmp_path, csv), "--steps", "60", "--out", out, "--set",
            "train.val_every=30")
    assert "10 training and 2 validation volumes" in p.stdout
    vals = [m["val_l1"] for m in metrics(out) if "val_l1" in m]
    assert len(vals) == 3 and vals[-1] < 0.7 * vals[0], vals


def test_resume_mid_epoch_with_cache_and_augmentation_is_exact(tmp_path):
    csv = write_dataset(tmp_path, n=10)
    cfg = data_config(tmp_path, csv, cache_rate=0.5, replace_rate=0.5)
    common = ["--config", cfg, "--steps", "14", "--set", "train.log_every=1"]
    run("train", *common, "--out", tmp_path / "full", "--set", "train.ckpt_every=5")  # step 5: mid-epoch (4 per)
    run("train", *common, "--out", tmp_path / "part", "--resume", tmp_path / "full" / "checkpoints" / "step_5.ckpt")
    a = (tmp_path / "full" / "checkpoints" / "step_14.ckpt").read_bytes()
    b = (tmp_path / "part" / "checkpoints" / "step_14.ckpt").read_bytes()
    assert a == b, "the resumed run differs from the uninterrupted one"


def test_three_stages_run_and_carry_the_weights(tmp_path):
    out = tmp_path / "stages"
    p = run("train", "--config", "configs/test/stages.json", "--out", out)
    for k, size in enumerate((8, 16, 8)):
        assert "stage %d/3: input %dx%dx%d" % (k + 1, size, size, size) in p.stdout, p.stdout
    steps = [m["step"] for m in metrics(out) if "loss" in m]
    assert steps == list(range(1, 13)), steps  # one run of 4 + 4 + 4 steps
    names = os.listdir(out / "checkpoints")
    assert {"stage_0_best.ckpt", "stage_1_best.ckpt", "stage_2_best.ckpt", "step_12.ckpt"} <= set(names), names
    resolved = json.loads((out / "config.json").read_text())["train"]
    assert resolved["steps"] == 12 and [s["input_size"][0] for s in resolved["stages"]] == [8, 16, 8]
    # resuming inside the second stage continues as the uninterrupted run
    run("train", "--config", "configs/test/stages.json", "--out", tmp_path / "again", "--set", "train.ckpt_every=6")
    run("train", "--config", "configs/test/stages.json", "--out", tmp_path / "resumed", "--resume",
        tmp_path / "again" / "checkpoints" / "step_6.ckpt")
    assert (tmp_path / "again" / "checkpoints" / "step_12.ckpt").read_bytes() == \
        (tmp_path / "resumed" / "checkpoints" / "step_12.ckpt").read_bytes()


def assert_bad(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_bad_data_is_one_line_and_exit_2_or_skipped(tmp_path):
    csv = write_dataset(tmp_path, n=6)
    rows = csv.read_text().splitlines()

    def with_rows(name, new_rows):
        path = tmp_path / name
        path.write_text("\n".join(new_rows) + "\n")
        return data_config(tmp_path, path)

    vols = tmp_path / "vols"
    (vols / "broken.nii.gz").write_bytes((vols / "case0.nii.gz").read_bytes()[:300])
    (vols / "magic.nii").write_bytes(b"not a nifti file at all" * 40)
    big = bytearray(open(vols / "case1.nii.gz", "rb").read())
    absurd = nib.load(str(vols / "case1.nii.gz"))
    hdr = absurd.header.copy()
    raw = bytearray(hdr.binaryblock)
    struct.pack_into("<h", raw, 42, 30000)  # dim[1]: an absurd x
    (vols / "absurd.nii").write_bytes(bytes(raw) + b"\0" * 4 + bytes(200))
    cases = [
        ("missing", rows + ["vols/nope.nii.gz,train,0"], ["nope.nii.gz", "row 8", "no such file"]),
        ("truncated", rows + ["vols/broken.nii.gz,train,0"], ["broken.nii.gz", "row 8"]),
        ("magic", rows + ["vols/magic.nii,train,0"], ["magic.nii", "not a readable NIfTI"]),
        ("absurd", rows + ["vols/absurd.nii,train,0"], ["absurd.nii", "absurd dimensions"]),
        ("nopath", rows + [",train,0"], ["nopath.csv:8:", "has no path"]),
        ("split", rows + ["vols/case0.nii.gz,test,0"], ["split.csv:8:", "neither train nor val"]),
    ]
    for name, new_rows, needles in cases:
        p = run("train", "--config", with_rows(name + ".csv", new_rows), "--steps", "2", "--out", tmp_path / name,
                check=False)
        assert_bad(p, *needles)
        # found from its header when the dataset opens: nothing written yet; a gzip stream damaged past the header
        # shows only when the volume is decoded, during training
        assert name == "truncated" or not (tmp_path / name).exists()
    small = data_config(tmp_path, csv, pad=0)
    spec = json.loads(small.read_text())
    spec["model"]["input_size"] = [16, 16, 16]
    small.write_text(json.dumps(spec))
    assert_bad(run("train", "--config", small, "--steps", "1", "--out", tmp_path / "s", check=False),
               "smaller than the input", "data.pad")
    # data.skip_bad: warnings, counted, and the run trains on what is left
    cfg = with_rows("skip.csv", rows + ["vols/nope.nii.gz,train,0", "vols/magic.nii,train,0"])
    spec = json.loads(cfg.read_text())
    spec["data"]["skip_bad"] = 1
    cfg.write_text(json.dumps(spec))
    p = run("train", "--config", cfg, "--steps", "3", "--out", tmp_path / "skip")
    assert p.stderr.count("skipped (data.skip_bad)") == 2 and "4 training and 2 validation" in p.stdout


def test_decode_rate_of_nifti_gz(tmp_path):
    """Not a timed assertion: prints the rate (volumes/s) the README quotes."""
    csv = write_dataset(tmp_path, n=12, size=(32, 32, 32))
    _, r = probe("rate", data_config(tmp_path, csv), 3)
    print("\ndecode rate: %.1f volumes/s (32^3 int16 .nii.gz, normalised and cropped, one thread)" % r["volumes_per_s"])
    assert r["volumes_per_s"] > 0

"""2-D images (chest films): JPEG through libjpeg-turbo bit-equal to its reference decoder `djpeg` (grey, colour to
luma, RGB, progressive, restart markers, and at the 1/2, 1/4, 1/8 DCT scales a resizing run asks for), single PNG
images, data.resize's antialiased bilinear against torch.nn.functional.interpolate(antialias=True) in float64, each
bad image's one line (truncated, CMYK, 12-bit, empty, not a JPEG), and a 2-D ResNet that trains on a manifest of
JPEG films resized on load."""
import json
import os
import subprocess

import numpy as np
import pytest

from conftest import TOOLS, metrics, run

PROBE = os.environ.get("VX_DATA_PROBE") or os.path.join(TOOLS, "data_probe")
needs_djpeg = pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v djpeg cjpeg"], capture_output=True).returncode,
                                 reason="djpeg/cjpeg (libjpeg-turbo-progs) are not installed; ci/deps.sh installs them")


def probe(*args):
    p = subprocess.run([PROBE, *map(str, args)], capture_output=True, text=True, timeout=120)
    return p, (json.loads(p.stdout.splitlines()[-1]) if p.stdout.strip() else {})


def film(h, w, seed=0, blob=None):
    """A chest-film-like grey image: two darker lung fields, a brighter heart shadow, noise; blob=(y, x, r) adds a
    bright round finding."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / np.array([h, w])[:, None, None]
    img = 200 - 40 * y
    for cx in (0.3, 0.7):
        img -= 110 * np.exp(-(((x - cx) / 0.15) ** 2 + ((y - 0.5) / 0.3) ** 2))
    img += 60 * np.exp(-(((x - 0.55) / 0.12) ** 2 + ((y - 0.65) / 0.12) ** 2))
    if blob:
        by, bx, r = blob
        img += 80 * (((y - by) ** 2 + (x - bx) ** 2) < r * r)
    return (img + rng.normal(0, 6, (h, w))).clip(0, 255).astype(np.uint8)


def write_pnm(path, img):
    h, w = img.shape[:2]
    magic = b"P5" if img.ndim == 2 else b"P6"
    path.write_bytes(b"%s %d %d 255\n" % (magic, w, h) + img.tobytes())


def cjpeg(tmp_path, img, name, *flags):
    src = tmp_path / (name + (".pgm" if img.ndim == 2 else ".ppm"))
    write_pnm(src, img)
    out = tmp_path / (name + ".jpg")
    with open(out, "wb") as f:
        subprocess.run(["cjpeg", *flags, str(src)], stdout=f, check=True)
    return out


def djpeg(path, *flags):
    """djpeg's decode as uint8 [h][w] or [h][w][3]."""
    b = subprocess.run(["djpeg", "-pnm", *flags, str(path)], capture_output=True, check=True).stdout
    magic, w, h, _, data = b.split(maxsplit=4)
    w, h = int(w), int(h)
    return np.frombuffer(data, np.uint8).reshape((h, w) if magic == b"P5" else (h, w, 3))


def ours(tmp_path, path, channels, *at_least):
    out = tmp_path / "img.raw"
    p, info = probe("volume", path, channels, out, *at_least)
    assert p.returncode == 0, p.stdout
    d, h, w, c = info["dims"]
    assert d == 1
    img = np.fromfile(out, np.float32).reshape(h, w, c)
    return img[..., 0] if c == 1 else img


@needs_djpeg
def test_jpeg_decodes_bit_equal_to_djpeg(tmp_path):
    grey = film(300, 241)
    rgb = np.stack([grey, 255 - grey, grey // 2], -1)
    cases = [(cjpeg(tmp_path, grey, "baseline", "-quality", "90"), 1, ()),
             (cjpeg(tmp_path, grey, "restarts", "-restart", "1", "-optimize"), 1, ()),
             (cjpeg(tmp_path, rgb, "colour"), 1, ("-grayscale",)),  # a colour film read as luma
             (cjpeg(tmp_path, rgb, "colour444", "-sample", "1x1"), 3, ()),
             (cjpeg(tmp_path, rgb, "progressive", "-progressive"), 3, ()),
             (cjpeg(tmp_path, grey, "progressive_grey", "-progressive"), 1, ())]
    for path, channels, flags in cases:
        got, want = ours(tmp_path, path, channels), djpeg(path, *flags)
        assert got.shape == want.shape and np.array_equal(got, want.astype(np.float32)), path.name
        assert got.std() > 3  # not a flat grey: there was an image to decode (the luma of "colour" has std 7)


@needs_djpeg
@pytest.mark.parametrize("at_least, scale", [((150, 121), "1/2"), ((75, 61), "1/4"), ((70, 20), "1/4"),
                                              ((38, 31), "1/8"), ((1, 1), "1/8"), ((151, 100), "1/1")])
def test_jpeg_dct_scaling_is_the_smallest_large_enough_and_equals_djpeg_scale(tmp_path, at_least, scale):
    # 300 x 241 at 1/2 is 150 x 121, at 1/4 75 x 61, at 1/8 38 x 31 (rounded up): the smallest still >= at_least
    grey = film(300, 241, seed=1)
    path = cjpeg(tmp_path, grey, "film")
    got = ours(tmp_path, path, 1, *at_least)
    want = djpeg(path, "-scale", scale)
    assert got.shape == want.shape and np.array_equal(got, want.astype(np.float32)), (got.shape, want.shape)
    assert got.shape[0] >= at_least[0] and got.shape[1] >= at_least[1]


def test_png_images_read_as_stored(tmp_path):
    PIL = pytest.importorskip("PIL.Image", reason="python3-pil is not installed; ci/deps.sh installs it")
    img8 = film(40, 50, seed=2)
    img16 = (img8.astype(np.uint16) * 257 + 3)
    PIL.fromarray(img8).save(tmp_path / "g8.png")
    PIL.fromarray(img16).save(tmp_path / "g16.png")
    assert np.array_equal(ours(tmp_path, tmp_path / "g8.png", 1), img8.astype(np.float32))
    assert np.array_equal(ours(tmp_path, tmp_path / "g16.png", 1), img16.astype(np.float32))
    three = ours(tmp_path, tmp_path / "g8.png", 3)  # a grey image for a 3-channel model: repeated
    assert three.shape == (40, 50, 3) and all(np.array_equal(three[..., c], img8.astype(np.float32)) for c in range(3))


@needs_djpeg
@pytest.mark.parametrize("mode, H, W, size", [("fit", 64, 64, (64, 51)), ("fill", 64, 64, (80, 64)),
                                               ("fit", 512, 400, (498, 400)), ("fill", 37, 90, (112, 90)),
                                               ("none", 64, 64, (300, 241))])
@pytest.mark.parametrize("channels", [1, 3])
def test_resize_matches_torch_antialiased_bilinear(tmp_path, mode, H, W, size, channels):
    torch = pytest.importorskip("torch")
    grey = film(300, 241, seed=3)
    path = cjpeg(tmp_path, np.stack([grey, grey[::-1], 255 - grey], -1), "film", "-quality", "95")
    out = tmp_path / "r.raw"
    p, info = probe("resize", path, channels, mode, H, W, out)
    assert p.returncode == 0, p.stdout
    assert info["dims"] == [1, size[0], size[1], channels]
    got = np.fromfile(out, np.float32).reshape(size[0], size[1], channels)
    src = djpeg(path, *(("-grayscale",) if channels == 1 else ())).astype(np.float64).reshape(300, 241, channels)
    t = torch.from_numpy(src).permute(2, 0, 1)[None]
    ref = torch.nn.functional.interpolate(t, size=size, mode="bilinear", antialias=True, align_corners=False)
    ref = ref[0].permute(1, 2, 0).numpy()
    assert np.abs(got - ref).max() <= 255 * 2 ** -22, np.abs(got - ref).max()  # float32's rounding of 0..255


def test_bad_images_are_refused_by_name(tmp_path):
    PIL = pytest.importorskip("PIL.Image", reason="python3-pil is not installed; ci/deps.sh installs it")
    grey = film(64, 48, seed=4)
    PIL.fromarray(grey).save(tmp_path / "good.jpg", quality=90)
    data = (tmp_path / "good.jpg").read_bytes()
    (tmp_path / "truncated.jpg").write_bytes(data[:len(data) // 2])
    PIL.fromarray(np.stack([grey] * 4, -1), "CMYK").save(tmp_path / "cmyk.jpg")
    sof = data.index(b"\xff\xc0")  # the baseline frame header: length (2 bytes), then the sample precision
    (tmp_path / "twelve.jpg").write_bytes(data[:sof + 4] + bytes([12]) + data[sof + 5:])
    (tmp_path / "empty.jpg").write_bytes(b"")
    (tmp_path / "text.jpg").write_text("a,b\n1,2\n")
    PIL.fromarray(np.stack([grey] * 3, -1)).save(tmp_path / "rgb.png")
    for name, channels, words in [("truncated.jpg", 1, "a damaged or truncated JPEG (libjpeg-turbo: Premature end"),
                                  ("cmyk.jpg", 1, "a CMYK JPEG: store the film as grey or RGB"),
                                  ("twelve.jpg", 1, "a 12-bit JPEG: only 8-bit JPEGs are read"),
                                  ("empty.jpg", 1, "an empty file, not a JPEG"),
                                  ("text.jpg", 1, "not a readable JPEG (libjpeg-turbo:"),
                                  ("good.jpg", 2, "model.in_channels 1 or 3, not 2"),
                                  ("rgb.png", 1, "colour type 2")]:
        p, info = probe("volume", tmp_path / name, channels, tmp_path / "x.raw")
        assert p.returncode == 2 and words in info.get("error", ""), (name, p.stdout)


def write_films(folder, n, h=90, w=72):
    """JPEG films of a finding (a bright blob, label 1) or none (0), and their manifest with a 'finding' column."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["path,split,finding"]
    for i in range(n):
        label = i % 2
        img = film(h, w, seed=10 + i, blob=(0.4, 0.3 + 0.4 * (i % 3 == 0), 0.12) if label else None)
        src = folder / ("f%02d.pgm" % i)
        write_pnm(src, img)
        with open(folder / ("f%02d.jpg" % i), "wb") as f:
            subprocess.run(["cjpeg", "-quality", "92", str(src)], stdout=f, check=True)
        src.unlink()
        lines.append("f%02d.jpg,%s,%d" % (i, "val" if i % 4 >= 2 else "train", label))
    (folder / "films.csv").write_text("\n".join(lines) + "\n")
    return folder / "films.csv"


FILMS_2D = ["--config", "configs/test/resnet-tiny.json", "--set", "model.spatial_dims=2", "--set",
            "model.input_size=[1, 32, 32]", "--set", "model.task=multilabel", "--set", "model.num_classes=1",
            "--set", "data.source=csv", "--set", "data.label_columns=finding", "--set", "data.resize=fit",
            "--set", "data.augment=0", "--set", "output.tensorboard=0", "--set", "train.val_every=6",
            "--steps", "6"]


@needs_djpeg
def test_a_2d_resnet_trains_on_jpeg_films_resized_on_load(tmp_path):
    csv = write_films(tmp_path / "films", 16)
    out = tmp_path / "run"
    p = run("train", *FILMS_2D, "--set", "data.csv=%s" % csv, "--out", out, timeout=300)
    assert "8 training and 8 validation volumes" in p.stdout, p.stdout
    m = metrics(out)
    assert [x for x in m if "val_auroc" in x], m[-3:]
    assert all(np.isfinite(x["loss"]) for x in m if "loss" in x)
    # the same films through the loader, as validation sees them: resized (fit: 90 x 72 -> 32 x 26) and padded
    # centred to 32 x 32 with the image's minimum, normalised to [0, 1]
    cfg = tmp_path / "cfg.json"
    base = json.load(open("configs/test/resnet-tiny.json"))
    base["model"].update({"spatial_dims": 2, "input_size": [1, 32, 32], "task": "multilabel", "num_classes": 1})
    base["data"].update({"source": "csv", "csv": str(csv), "label_columns": "finding", "resize": "fit",
                         "normalize": "none"})
    cfg.write_text(json.dumps(base))
    p2, _ = probe("val", cfg, 0, tmp_path / "v.raw")
    assert p2.returncode == 0, p2.stdout + p2.stderr
    v = np.fromfile(tmp_path / "v.raw", np.float32).reshape(32, 32)
    body = v[:, 3:29]  # 26 columns of image, 3 of padding either side
    assert body.std() > 5 and np.all(v[:, :3] == v.min()) and np.all(v[:, 29:] == v.min())


@needs_djpeg
def test_a_truncated_film_in_the_manifest_is_one_line_and_nothing_is_written(tmp_path):
    csv = write_films(tmp_path / "films", 8)
    bad = tmp_path / "films" / "f05.jpg"
    bad.write_bytes(bad.read_bytes()[:400])
    out = tmp_path / "run"
    p = run("train", *FILMS_2D, "--set", "data.csv=%s" % csv, "--out", out, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "f05.jpg" in lines[0] and "truncated JPEG" in lines[0], p.stderr
    assert not out.exists()


def test_resize_on_a_3d_input_is_one_line(tmp_path):
    p = run("train", "--config", "configs/test/resnet-tiny.json", "--set", "data.resize=fit", "--out",
            tmp_path / "run", check=False)
    assert p.returncode == 2
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "data.resize fit resizes 2-D images: it needs model.input_size [1, H, W]" in lines[0]


@needs_djpeg
def test_bench_data_times_the_loader_over_the_films(tmp_path):
    csv = write_films(tmp_path / "films", 8)
    res = tmp_path / "res"
    p = run("bench", "data", *FILMS_2D[:2], "--set", "model.spatial_dims=2", "--set", "model.input_size=[1, 32, 32]",
            "--set", "data.source=csv", "--set", "data.csv=%s" % csv, "--set", "data.resize=fit",
            "--set", "data.workers=2", "--iters", "1", "--results", res)
    assert "bench data: 4 images (1 x 32 x 32, data.resize fit) x 1 epochs on 2 workers" in p.stdout + p.stderr
    [device] = os.listdir(res)
    j = json.load(open(res / device / "data_resnet-tiny.json"))
    assert j["images"] == 4 and j["workers"] == 2 and j["images_per_s"] > 0 and j["resize"] == "fit"
    again = run("bench", "data", *FILMS_2D[:2], "--set", "data.csv=%s" % csv, "--set", "data.source=csv",
                "--set", "model.spatial_dims=2", "--set", "model.input_size=[1, 32, 32]", "--results", res,
                check=False)
    assert again.returncode == 2 and "--overwrite" in again.stderr  # results are replaced only when asked
    p = run("bench", "data", "--config", "configs/test/cxr-tiny.json", check=False)
    assert p.returncode == 2 and "bench data times reading files: set data.source csv" in p.stderr


@pytest.mark.parametrize("deg, scale, tx, ty", [(0, 1, 0, 0), (10, 1.0, 0, 0), (-7.5, 1.1, 2.5, -1.25),
                                                 (180, 0.9, -3, 4)])
def test_affine_is_grid_sample_with_the_image_minimum_outside(tmp_path, deg, scale, tx, ty):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    h, w, c = 23, 31, 2
    img = rng.normal(size=(h, w, c)).astype(np.float32)
    pad = float(img.min())
    img.tofile(tmp_path / "in.raw")
    p, _ = probe("affine", tmp_path / "in.raw", h, w, c, deg, scale, tx, ty, pad, tmp_path / "out.raw")
    assert p.returncode == 0, p.stdout + p.stderr
    got = np.fromfile(tmp_path / "out.raw", np.float32).reshape(h, w, c)
    a = np.deg2rad(deg)
    cs, sn = np.cos(a) / scale, np.sin(a) / scale
    theta = torch.tensor([[[cs, sn * h / w, -(cs * tx + sn * ty) / (w / 2)],
                           [-sn * w / h, cs, (sn * tx - cs * ty) / (h / 2)]]], dtype=torch.float64)
    grid = torch.nn.functional.affine_grid(theta, (1, c, h, w), align_corners=False)
    x = torch.from_numpy(img.astype(np.float64) - pad).permute(2, 0, 1)[None]
    ref = torch.nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    ref = ref[0].permute(1, 2, 0).numpy() + pad
    assert np.abs(got - ref).max() < 1e-5, np.abs(got - ref).max()
    if deg == 0 and scale == 1 and tx == 0 and ty == 0:
        assert np.array_equal(got, img)  # the identity is exact


@needs_djpeg
def test_affine_in_training_is_per_sample_and_the_same_every_run(tmp_path):
    csv = write_films(tmp_path / "films", 8)
    base = json.load(open("configs/test/resnet-tiny.json"))
    base["model"].update({"spatial_dims": 2, "input_size": [1, 32, 32], "task": "multilabel", "num_classes": 1})
    base["data"].update({"source": "csv", "csv": str(csv), "label_columns": "finding", "resize": "fit",
                         "augment": 0})
    plain, moved = tmp_path / "plain.json", tmp_path / "moved.json"
    plain.write_text(json.dumps(base))
    base["data"]["affine"] = [10, 0.1, 0.05]
    moved.write_text(json.dumps(base))
    outs = []
    for cfg, name in ((plain, "p"), (moved, "m1"), (moved, "m2")):
        p, _ = probe("train", cfg, 0, 4, 0, tmp_path / (name + ".raw"))
        assert p.returncode == 0, p.stdout + p.stderr
        outs.append(np.fromfile(tmp_path / (name + ".raw"), np.float32).reshape(4, 32, 32))
    assert np.array_equal(outs[1], outs[2])  # a pure function of (seed, sample)
    diff = [np.abs(outs[1][k] - outs[0][k]).max() for k in range(4)]
    assert all(d > 0.01 for d in diff), diff  # every sample moved, each its own way
    assert not np.array_equal(outs[1][0] - outs[0][0], outs[1][1] - outs[0][1])
    p = run("train", "--config", "configs/test/resnet-tiny.json", "--set", "data.affine=[10, 0.1, 0.05]", "--out",
            tmp_path / "r", check=False)
    assert p.returncode == 2 and "data.affine is [degrees, scale, shift]" in p.stderr

"""Behaviour unchanged by moving Config into sections (issue 26, part 2), and since: three short CPU runs are rerun with
this build and must give the bytes committed under tests/fixtures/pre-sections/ (its README says how they were
made): every checkpoint, samples.tsv, the resolved config.json, and every logged value that is not a time.
`train --help-config` must print what 2729dcc printed. Keys added to the schema since (ADDED_SINCE, at their
defaults) are the one difference allowed in both. The config files are 2729dcc's (before any layout change); the
checkpoints and losses are 3fb50cc's, made when issue 41 cut the im2col forward's GEMMs per sample (which changes
the bits of a batch's later samples by design) on the CPU type machine.json names.

The runs reach every config section: the phantom run (model, train with accumulation, output), a real-data run
(data: a CSV of NIfTI volumes, crops, padding, percentile clipping, augmentation, a sliding cache; train: two
stages, MSE, unfused ops, activation checkpointing; output.sample_log) and a two-rank tcp run (dist: small gradient
buckets, sqrt lr scaling). Checkpoints hold no time or path (header, parameters, moments, CRC: ckpt/ckpt.h), so
they are compared whole; config.json names the run directory in output.dir, the one value compared after replacing
it by "<out>"."""
import json
import os
import re

import pytest

from conftest import ROOT, metrics, run

FIX = os.path.join(ROOT, "tests", "fixtures", "pre-sections")
REL = "tests/fixtures/pre-sections"  # data.csv in data/input.json is relative to the repository root
# metrics.jsonl fields measured by the clock: everything else must be identical
TIMES = {"samples_per_s", "step_ms", "data_wait_ms", "comm_wait_ms"}

TINY = ["--config", REL + "/tiny/input.json", "--device", "cpu", "--set", "train.steps=4", "--set", "train.threads=1",
        "--set", "train.log_every=1", "--set", "train.val_every=2", "--set", "train.ckpt_every=2",
        "--set", "train.grad_accum=2", "--set", "output.tensorboard=0"]
DATA = ["--config", REL + "/data/input.json"]
DIST = ["--config", REL + "/tiny/input.json", "--device", "cpu", "--gpus", "2", "--set", "train.steps=4",
        "--set", "train.threads=1", "--set", "train.log_every=1", "--set", "train.val_every=2",
        "--set", "dist.bucket_mb=0.01", "--set", "dist.first_bucket_mb=0.004", "--set", "dist.timeout_s=120",
        "--set", "output.tensorboard=0"]


def _cpu_signature():
    """The CPU model, the vector extensions that can change float rounding (vector widths, FMA) and the GEMM kernels
    the dispatch runs (OpenBLAS's own choice, or oneDNN's sgemm where OpenBLAS's kernels are older than the CPU): the
    fixture's bytes hold for the CPU they were made on, with this build's -march=native. The GEMM is part of it
    because one VM model name ("AMD EPYC", the same flags) has come with hosts on which OpenBLAS picked other kernels,
    and then every checkpoint differed."""
    with open("/proc/cpuinfo") as f:
        text = f.read()
    model = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("model name")), "")
    flags = next((l.split(":", 1)[1].split() for l in text.splitlines() if l.startswith("flags")), [])
    p = run("detect", "--config", os.path.join("configs", "test", "tiny.json"), "--device", "cpu")
    gemm = re.search(r"GEMM: ([^;]*)", p.stdout)
    return {"model": model, "isa": sorted(f for f in flags if f in ("avx", "avx2", "fma", "avx512f", "avx512bw",
                                                                     "avx512vl", "avx512_bf16", "avx512_vnni")),
            "gemm": gemm.group(1) if gemm else p.stdout}


@pytest.fixture(autouse=True)
def im2col_convolutions(monkeypatch):
    """The fixtures' bytes are those of the im2col + sgemm convolutions (the only CPU path of 2729dcc): these runs pin
    it, as oneDNN's kernels, chosen per shape by measurement since issue 22, round differently. What these tests hold
    is that moving the config into sections changed nothing; the oneDNN path is checked by the op tests."""
    monkeypatch.setenv("VX_CONV_CPU", "im2col")


@pytest.fixture
def same_cpu_as_the_fixture():
    with open(os.path.join(FIX, "machine.json")) as f:
        made_on = json.load(f)
    here = _cpu_signature()
    if here != {"model": made_on["model"], "isa": made_on["isa"], "gemm": made_on["gemm"]}:
        pytest.skip("the pre-sections fixture was made on %s (%s; GEMM: %s); this CPU is %s (%s; GEMM: %s), whose "
                    "float rounding may differ: remake it as tests/fixtures/pre-sections/README.md says"
                    % (made_on["model"], " ".join(made_on["isa"]), made_on["gemm"], here["model"],
                       " ".join(here["isa"]), here["gemm"]))


def _read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


# Keys added to the schema since 2729dcc, with their defaults: the only differences allowed in config.json and
# --help-config (a run with them at their defaults behaves as before). A new key is one line here.
ADDED_SINCE = {("data", "nonfinite"): "error",  # issue 24
               # issue 27: model families (the resnet3d keys, its head), the best checkpoint's figure, labels
               ("model", "family"): "ae3d", ("model", "depth"): 18, ("model", "spatial_dims"): 3,
               ("model", "conv1_t_size"): 7, ("model", "conv1_t_stride"): 1, ("model", "no_max_pool"): 0,
               ("model", "shortcut_type"): "B", ("model", "widen_factor"): 1, ("model", "bias_downsample"): 1,
               ("model", "bn_momentum"): 0.1, ("model", "bn_eps"): 1e-5, ("model", "sync_bn"): 0,
               ("model", "task"): "classification", ("model", "num_classes"): 2, ("model", "class_weights"): [],
               ("model", "pos_weight"): [], ("model", "dropout"): 0, ("train", "best_metric"): "auto",
               ("data", "label_columns"): "",
               # issue 28: fine-tuning from a safetensors file
               ("train", "init_from"): "", ("train", "init_allow"): "", ("train", "freeze"): "",
               ("train", "backbone_lr_mult"): 1,
               # issue 21: the vit3d family's keys
               ("model", "hidden_size"): 384, ("model", "blocks"): 6, ("model", "heads"): 6,
               ("model", "patch_size"): [8, 8, 8], ("model", "mlp_ratio"): 4, ("model", "ln_eps"): 1e-6,
               # issue 23: sharded data parallelism
               ("dist", "zero"): "0", ("dist", "offload_optimizer"): "none",
               # issue 21: vit3d_diffusion's sections (whole sections: they are dropped when emptied)
               ("diffusion", "timesteps"): 1000, ("diffusion", "schedule"): "cosine", ("diffusion", "prediction"): "v",
               ("diffusion", "sample_steps"): 50, ("xray", "img_size"): 64, ("xray", "patch_size"): 8,
               ("xray", "mu_scale"): 3, ("loss", "physics_weight"): 0.1, ("loss", "min_snr_gamma"): 0,
               ("train", "ema_decay"): 0, ("data", "view_columns"): "",
               # issue 39: 2-D films, CheXpert's labels, DenseNet, seed 002's batch table; issue 40: EMA validation
               ("data", "resize"): "none", ("data", "uncertain"): "error", ("data", "blank"): "error",
               ("data", "phantom"): "ellipsoids", ("data", "affine"): [], ("model", "pos_weight_auto"): 0,
               ("model", "growth_rate"): 32, ("model", "init_features"): 64, ("model", "bn_size"): 4,
               ("model", "block_config"): [], ("model", "dropout_prob"): 0,
               ("train", "batch_preset"): "none", ("train", "ema_eval"): 1,
               # issue 40: the diffusion's data scale, DDIM's timestep spacing, the views' backprojection
               ("diffusion", "data_scale"): 1, ("diffusion", "timestep_spacing"): "trailing",
               ("xray", "backproject"): 0}
# The --help-config header names the sections; issue 21 added three.
HEADER_SINCE = ("Config keys (JSON sections model, train, data, output, dist, diffusion, xray, loss):\n",
                "Config keys (JSON sections model, train, data, output, dist):\n")
# Help texts of old keys reworded since (what the key does is unchanged): (now, then)
REWORDED_SINCE = [("fewer each way), each BatchNorm and the ReLU after it as one op (resnet3d, densenet; the same bits in "
                   "float32, the ReLU's pass each way gone), each dense layer's BatchNorm copying the batch statistics "
                   "of the channels the one before it summed (densenet; the same bits on the CPU), and the decoder's "
                   "nearest x2 upsampling + 3x3x3 "
                   "convolution as one 2x2x2 convolution per output phase at the input's resolution (3.4x fewer FLOPs, no upsampled tensor); 0 = separate "
                   "ops, as PyTorch eager", "fewer each way); 0 = two ops, as PyTorch eager"),
                  ("only each segment's input and recompute its inside in backward (ae3d: ResBlocks, resnet3d: residual "
                   "blocks, densenet: dense layers with their concatenations, vit3d: transformer blocks; less "
                   "activation memory, about one more forward of the segments per step)",
                   "only each ResBlock's input and recompute its inside in backward (less activation memory, about one "
                   "more forward of the blocks per step)"),
                  ("their sum; a stage also takes lr, epochs and (vit3d_diffusion) \"model\": {hidden_size, blocks, "
                   "heads, patch_size, mlp_ratio}, its own network: one that differs from the stage before's is a new "
                   "network of a cascade, conditioned on the earlier one's (frozen) x0 estimate", "their sum")]


def _without_added(config_text):
    """config.json parsed, with the keys added since 2729dcc (at their defaults) taken out, in the written order."""
    cfg = json.loads(config_text)
    for (section, key), default in ADDED_SINCE.items():
        assert cfg[section].pop(key) == default, (section, key)
        if not cfg[section]:
            del cfg[section]
    return json.dumps(cfg)


def _assert_config_json(out, fixture):
    got = _read(out / "config.json", "r").replace(json.dumps(str(out)), '"<out>"')
    want = _read(fixture, "r")
    if not ADDED_SINCE:
        assert got == want, "the resolved config.json differs from the one 2729dcc wrote"
    assert _without_added(got) == json.dumps(json.loads(want)), \
        "the resolved config.json differs from the one 2729dcc wrote (beyond the keys added since)"


def _assert_metrics(out, fixture):
    want = [json.loads(l) for l in _read(fixture, "r").splitlines() if l.strip()]
    got = metrics(out)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMES} for r in rows]
    assert [sorted(r) for r in got] == [sorted(r) for r in want], "metrics.jsonl logs other fields or lines"
    for g, w in zip(strip(got), strip(want)):
        # peak_mib may grow by a few bytes of device-side state: issue 28 added the backbone's OptimState (88 bytes)
        # to the step's StepDev. Anything beyond 1 KiB is a real change of the plan and fails.
        if "peak_mib" in w:
            assert abs(g.pop("peak_mib") - w.pop("peak_mib")) * 2**20 < 1024, "peak memory moved by more than 1 KiB"
        assert g == w, (g, w)


def _assert_same_bytes(a, b, what):
    assert _read(a) == _read(b), "%s differs from the fixture's" % what


def test_phantom_run_gives_the_fixture_checkpoints_and_losses(tmp_path, same_cpu_as_the_fixture):
    out = tmp_path / "tiny"
    run("train", *TINY, "--out", out)
    for name in ("step_2.ckpt", "step_4.ckpt"):
        _assert_same_bytes(out / "checkpoints" / name, os.path.join(FIX, "tiny", name), name)
    _assert_metrics(out, os.path.join(FIX, "tiny", "metrics.jsonl"))
    _assert_config_json(out, os.path.join(FIX, "tiny", "config.json"))


def test_the_fixture_step_2_checkpoint_resumes_to_its_step_4(tmp_path, same_cpu_as_the_fixture):
    """Older checkpoints still load (the model fingerprint hashes the same keys) and continue bit for bit."""
    out = tmp_path / "resumed"
    run("train", *TINY, "--out", out, "--resume", os.path.join(FIX, "tiny", "step_2.ckpt"))
    _assert_same_bytes(out / "checkpoints" / "step_4.ckpt", os.path.join(FIX, "tiny", "step_4.ckpt"),
                       "step_4.ckpt resumed from the fixture's step_2.ckpt")


def test_real_data_run_gives_the_fixture_checkpoint_samples_and_losses(tmp_path, same_cpu_as_the_fixture):
    out = tmp_path / "data"
    run("train", *DATA, "--out", out)
    _assert_same_bytes(out / "checkpoints" / "step_4.ckpt", os.path.join(FIX, "data", "run", "step_4.ckpt"),
                       "step_4.ckpt")
    _assert_same_bytes(out / "samples.tsv", os.path.join(FIX, "data", "run", "samples.tsv"), "samples.tsv")
    _assert_metrics(out, os.path.join(FIX, "data", "run", "metrics.jsonl"))
    _assert_config_json(out, os.path.join(FIX, "data", "run", "config.json"))


def test_two_rank_run_gives_the_fixture_checkpoint_and_losses(tmp_path, same_cpu_as_the_fixture):
    out = tmp_path / "dist"
    run("train", *DIST, "--out", out)
    _assert_same_bytes(out / "checkpoints" / "step_4.ckpt", os.path.join(FIX, "dist", "step_4.ckpt"), "step_4.ckpt")
    _assert_metrics(out, os.path.join(FIX, "dist", "metrics.jsonl"))
    _assert_config_json(out, os.path.join(FIX, "dist", "config.json"))


def test_help_config_is_what_2729dcc_printed():
    p = run("train", "--help-config")
    for now, then in REWORDED_SINCE:
        assert now in p.stdout, "a rewording is no longer printed: %s" % now
        p.stdout = p.stdout.replace(now, then)
    added = tuple("  %s.%s " % k for k in ADDED_SINCE)
    lines = [HEADER_SINCE[1] if l == HEADER_SINCE[0] else l for l in p.stdout.splitlines(True) if not l.startswith(added)]
    assert len(lines) == len(p.stdout.splitlines()) - len(ADDED_SINCE), "an added key is not listed"
    assert "".join(lines) == _read(os.path.join(ROOT, "tests", "fixtures", "help-config.txt"), "r")

"""Bad input is one line on stderr naming what was wrong (and the nearest known flag, command or key), and exit code 2;
--help works everywhere and `voxscale --help` lists every command; --version and env say what this build is; a resumed
run finds its own config.json and refuses a --config that differs from it."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import metrics, run


def bad_config(tmp_path, text):
    p = tmp_path / "bad.json"
    p.write_text(text)
    return str(p)


def assert_usage_error(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.mark.parametrize("text,needles", [
    ('{"train": {"stepz": 3}}', ["bad.json", "train.stepz", "unknown key", "(did you mean train.steps?)"]),
    ('{"trian": {}}', ["bad.json", "unknown section", "trian", "(did you mean train?)"]),
    ('{"model": {"lr": 0.1}}', ["unknown key \"model.lr\"", "(did you mean train.lr?)"]),
    ('{"train": {"steps": "ten"}}', ["bad.json", "train.steps", "integer"]),
    ('{"train": {"steps": 2.5}}', ["train.steps", "integer"]),
    ('{"train": {"lr": -1}}', ["train.lr", "got -1"]),
    ('{"train": {"device": "tpu"}}', ["train.device", "auto|cpu|cuda", "tpu"]),
    ('{"model": {"input_size": [32, 32]}}', ["model.input_size", "3"]),
    ('{"model": {"channels": [16, 30], "norm_groups": 8}}', ["model.norm_groups", "30"]),
    ('{"model": {"input_size": [30, 32, 32], "channels": [8, 16, 16], "norm_groups": 4}}', ["input_size[0]", "divisible by 4"]),
    ('{"train": {"steps": 3,}}', ["bad.json:1", "not valid JSON"]),
    ('[1, 2]', ["JSON object"]),
])
def test_bad_config_is_one_line_and_exit_2(tmp_path, text, needles):
    assert_usage_error(run("train", "--config", bad_config(tmp_path, text), "--out", tmp_path / "r", check=False), *needles)


@pytest.mark.parametrize("args,needles", [
    (["train", "--config", "does/not/exist.json"], ["does/not/exist.json", "cannot read"]),
    (["train", "--config", "configs/test/tiny.json", "--resume", "nope.ckpt"], ["nope.ckpt", "cannot read the checkpoint"]),
    (["train", "--config", "configs/test/tiny.json", "--bogus"], ["--bogus"]),
    (["train", "--config", "configs/test/tiny.json", "--steps", "-5"], ["--steps", "train.steps"]),
    (["train", "--config", "configs/test/tiny.json", "--lr", "abc"], ["--lr", "train.lr"]),
    (["train", "--config", "configs/test/tiny.json", "--set", "train.nope=1"], ["train.nope"]),
    (["train", "--config", "configs/test/tiny.json", "--set", "novalue"], ["KEY=VALUE"]),
    (["train", "--config", "configs/test/tiny.json", "--device", "cuda"], ["--device cuda"]),
    (["train", "--config", "configs/test/tiny.json", "--profile", "5"], ["output.profile", "START:END"]),
    (["train", "--config", "configs/test/tiny.json", "--profile", "4:2"], ["output.profile", "START:END"]),
    (["train", "--config", "configs/test/tiny.json", "--profile", "0:3"], ["output.profile", "START:END"]),
    (["train", "--config", "configs/test/tiny.json", "--set", "output.image_every=-1"], ["output.image_every"]),
    (["frobnicate"], ["unknown command"]),
    (["bench", "warp"], ["unknown benchmark"]),
    # the nearest known name, where one is near: flags, commands, subcommands, --set keys
    (["train", "--config", "configs/test/tiny.json", "--stpes", "3"],
     ["unknown option --stpes", "(did you mean --steps?)"]),
    (["train", "--config", "configs/test/tiny.json", "--batchsize=2"], ["(did you mean --batch-size?)"]),
    (["probe", "--config", "configs/test/tiny.json", "--out"], ["--out needs a value"]),
    (["train", "--config", "configs/test/tiny.json", "--set", "train.stpes=3"], ["(did you mean train.steps?)"]),
    (["train", "--config", "configs/test/tiny.json", "--set", "model.lr=3"], ["(did you mean train.lr?)"]),
    (["trian"], ["unknown command \"trian\" (did you mean train?)"]),
    (["predcit"], ["(did you mean predict?)"]),
    (["bench", "stpe"], ["unknown benchmark \"stpe\" (did you mean step?)"]),
    (["ckpt", "consolidat"], ["(did you mean consolidate?)"]),
    (["ckpt", "consolidate", "x.zero", "--overwirte"], ["(did you mean --overwrite?)"]),
    (["bench", "allreduce", "--devcie", "cpu"], ["(did you mean --device?)"]),
    (["--verison"], ["(did you mean --version?)"]),
    (["bench", "step", "--resume", "x.ckpt"], ["--resume", "not one of this command's"]),
    (["probe", "--config", "configs/test/tiny.json"], ["--out PREFIX is required"]),
])
def test_bad_command_line_is_one_line_and_exit_2(tmp_path, args, needles):
    if args[-2:] == ["--device", "cuda"] and "device: cuda" in run("detect", "--config", "configs/test/tiny.json").stdout:
        pytest.skip("a usable GPU is present, so --device cuda is not an error here")
    assert_usage_error(run(*args, "--out", tmp_path / "r", check=False) if args[0] == "train" else run(*args, check=False), *needles)


def test_no_suggestion_when_nothing_is_near():
    p = run("train", "--config", "configs/test/tiny.json", "--frobnicate", check=False)
    assert_usage_error(p, "unknown option --frobnicate")
    assert "did you mean" not in p.stderr
    assert "did you mean" not in run("xyzzy", check=False).stderr


@pytest.mark.parametrize("cmd", [["--help"], ["train", "--help"], ["detect", "--help"], ["bench", "--help"],
                                 ["bench", "step", "--help"], ["bench", "gemm", "--help"], ["probe", "--help"],
                                 ["export", "--help"], ["predict", "--help"], ["env", "--help"]])
def test_help_everywhere(cmd):
    p = run(*cmd)
    assert "usage: voxscale" in p.stdout


COMMANDS = ["train", "detect", "env", "bench step", "bench kernels", "bench allreduce", "bench scaling", "bench gemm",
            "bench data", "probe", "export", "predict", "ckpt consolidate"]


def test_help_lists_every_command_and_subcommand_with_one_line_each():
    out = run("--help").stdout
    assert "--version" in out and "-v / --verbose" in out
    listed = [l.split("  ")[1].strip() for l in out.splitlines() if re.match(r"^  \S", l)]
    assert listed == COMMANDS, out
    for line in out.splitlines():  # each command's line says what it does; train no longer only "the 3D autoencoder"
        if re.match(r"^  \S", line):
            assert len(line.split(None, 2 if line.split()[0] in ("bench", "ckpt") else 1)[-1]) > 20, line
    assert "resnet3d" in out and "vit3d_diffusion" in out
    for cmd in COMMANDS:  # and every one it lists answers --help
        assert "usage: voxscale" in run(*cmd.split(), "--help").stdout, cmd
    assert [l.split()[1] for l in run("bench", "--help").stdout.splitlines()[1:]] == \
        [c.split()[1] for c in COMMANDS if c.startswith("bench ")]


def test_version_names_the_build_and_its_libraries():
    p = run("--version")
    lines = p.stdout.splitlines()
    assert re.match(r"^voxscale \S+$", lines[0]), lines[0]
    assert lines[0] != "voxscale " and run("-V").stdout == p.stdout
    for head in ("build: CUDA=", "oneDNN: ", "OpenBLAS: ", "MPI: ", "CUDA"):
        assert any(l.startswith(head) for l in lines), (head, p.stdout)
    assert re.search(r"^oneDNN: \d+\.\d+\.\d+ \(built against \d+\.\d+\.\d+\)$", p.stdout, re.M), p.stdout
    if "build: CUDA=1" in p.stdout:  # a CUDA build names the versions it was compiled with, and what loads here
        assert re.search(r"^CUDA: built with CUDA runtime \d+\.\d+, cuDNN \d+\.\d+\.\d+", p.stdout, re.M), p.stdout
        assert re.search(r"^CUDA at run time: NVIDIA driver: ", p.stdout, re.M), p.stdout


def build_info(tmp_path, src, **make_vars):
    """The build facts the Makefile writes for a tree (parsing it only: make -n builds nothing)."""
    build = tmp_path / "b"
    env = {k: v for k, v in os.environ.items() if k != "VX_VERSION"}
    args = ["make", "-s", "-n", "-C", str(src), "BUILD=%s" % build, "CUDA=0", "MPI=0"]
    subprocess.run(args + ["%s=%s" % kv for kv in make_vars.items()] + ["all"], env=env, capture_output=True)
    return (build / "gen" / "vx_build_info.h").read_text()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_the_version_is_git_describe_or_vx_version_or_unknown(tmp_path):
    from conftest import ROOT
    if os.path.exists(os.path.join(ROOT, ".git")) and shutil.which("git"):
        want = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
        assert '#define VX_VERSION "%s"' % want in build_info(tmp_path / "a", ROOT)
    assert '#define VX_VERSION "v9.9-test"' in build_info(tmp_path / "b", ROOT, VX_VERSION="v9.9-test")
    copy = tmp_path / "copy"  # a tree without .git (the Docker build, ci/gpu.sh's copy)
    copy.mkdir()
    shutil.copy(os.path.join(ROOT, "Makefile"), copy)
    shutil.copytree(os.path.join(ROOT, "mk"), copy / "mk")
    info = build_info(tmp_path / "c", copy)
    assert '#define VX_VERSION "unknown"' in info and '#define VX_BUILD_FLAGS "CUDA=0 MPI=0' in info, info


def test_bench_results_name_the_commit_the_binary_was_built_from(tmp_path):
    """A benchmark's JSON names the commit its binary was built from (its --version), whatever checkout it runs in:
    run from outside any git tree it is still that commit, not "unknown" and not some other tree's HEAD (a parent's
    build run from this tree by bench/alternate.py --base was once filed under this tree's commit)."""
    from conftest import ROOT, VOXSCALE
    version = run("--version").stdout.splitlines()[0].split()[1]
    elsewhere = tmp_path / "elsewhere"  # not a git checkout
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "VX_COMMIT"}
    p = subprocess.run([VOXSCALE, "bench", "step", "--config", os.path.join(ROOT, "configs/test/tiny.json"),
                        "--iters", "1", "--warmup", "0", "--device", "cpu", "--results", str(tmp_path / "r")],
                       cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    [device] = os.listdir(tmp_path / "r")
    doc = json.loads((tmp_path / "r" / device / "step_tiny.json").read_text())
    assert doc["commit"] == version, (doc["commit"], version)


def test_env_is_one_block_for_a_bug_report():
    out = run("env", "--config", "configs/test/tiny.json").stdout
    assert out.startswith("Copy-and-paste the text below into a bug report.\n\nvoxscale "), out[:200]
    for head in ("build: ", "oneDNN: ", "OpenBLAS: ", "os: ", "cpu: ", "ram: ", "nvidia device files in /dev: ",
                 "environment: ", "the plan train would choose for configs/test/tiny.json:", "device: ", "plan: ",
                 "model: ", "memory: arena "):
        assert re.search("^" + re.escape(head), out, re.M), (head, out)
    assert re.search(r"^gpus: |^gpu 0: ", out, re.M), out
    env = dict(os.environ, VX_CONV_LOG="0", SECRET_TOKEN="x")  # its own variables are listed, nothing else
    out = run("env", "--config", "configs/test/tiny.json", env=env).stdout
    assert "VX_CONV_LOG=0" in out and "SECRET_TOKEN" not in out


def test_help_config_lists_every_key():
    p = run("train", "--help-config")
    for key in ("model.input_size", "model.channels", "train.grad_accum", "train.warmup_steps", "output.dir"):
        assert key in p.stdout


def test_resolved_config_has_every_default(tmp_path):
    run("train", "--config", "configs/test/tiny.json", "--steps", "1", "--lr", "0.002", "--out", tmp_path / "r")
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert cfg["train"]["steps"] == 1 and cfg["train"]["lr"] == 0.002
    assert cfg["train"]["beta2"] == 0.999 and cfg["model"]["logvar_max"] == 20 and cfg["data"]["source"] == "phantom"
    # The resolved config is itself a valid config that reproduces the run's settings.
    run("train", "--config", tmp_path / "r" / "config.json", "--out", tmp_path / "r2", "--steps", "1")


def test_detect_reports_hardware_and_the_choice():
    p = run("detect", "--config", "configs/default.json")
    out = p.stdout
    assert "cpu:" in out and "cores" in out and "ram:" in out
    assert "gpus: no GPU found (" in out or "gpus: no usable GPU (" in out or "gpu 0:" in out
    assert "device: cpu (" in out and "batch size: 2" in out


def test_detect_auto_batch(tmp_path):
    p = run("detect", "--config", "configs/default.json", "--batch-size", "0", "--device", "cpu")
    # the hardware plan's line: float32 on the CPU, the batch capped at the cores, checkpointing not needed
    plan = [line for line in p.stdout.splitlines() if line.startswith("plan: ")]
    assert len(plan) == 1, p.stdout
    assert plan[0].startswith("plan: float32; batch ") and "activation checkpointing off" in plan[0], plan[0]
    assert "train.batch_size 0: the largest power of two that fits" in plan[0]
    assert "batch size:" in p.stdout


def test_detect_plans_accumulation_for_a_global_batch(tmp_path):
    p = run("detect", "--config", "configs/default.json", "--batch-size", "0", "--device", "cpu",
            "--set", "train.global_batch=16")
    [plan] = [line for line in p.stdout.splitlines() if line.startswith("plan: ")]
    # the automatic batch divides the global one and accumulation makes up the rest (2 cores: batch 2 at most)
    assert "= 16 samples per step (train.global_batch)" in plan, plan
    batch, accum = (int(w) for w in re.search(r"batch (\d+) per rank x 1 rank\(s\) x (\d+) accumulation", plan).groups())
    assert batch * accum == 16 and batch >= 1


def test_bench_step_writes_results(tmp_path):
    run("bench", "step", "--config", "configs/test/tiny.json", "--iters", "3", "--warmup", "1", "--results", tmp_path)
    files = list(tmp_path.glob("*/step_tiny.json"))
    assert len(files) == 1
    r = json.loads(files[0].read_text())
    assert r["iters"] == 3 and r["step_ms_median"] > 0 and r["samples_per_s"] > 0
    assert r["ceiling_gflops"] > 0 and 0 < r["fraction_of_ceiling"] < 1
    assert (files[0].with_suffix(".md")).exists()
    # every layer of the layer pass, in model order, forward and backward apart; they add up to the layers' total
    layers = r["layers"]
    assert layers[0]["name"] == "encoder.conv_in" and len({l["name"] for l in layers}) == len(layers) > 10, layers[:3]
    assert all(l["forward_ms"] >= 0 and l["backward_ms"] >= 0 for l in layers)
    assert abs(sum(l["forward_ms"] + l["backward_ms"] for l in layers) - r["conv_ms"] - r["other_layers_ms"]) < 0.05


def trained(tmp_path, name="r", *extra):
    out = tmp_path / name
    run("train", "--config", "configs/test/tiny.json", "--steps", "6", "--out", out, "--set", "train.ckpt_every=3",
        "--set", "output.tensorboard=0", *extra)
    return out


def test_resume_finds_its_runs_config_and_says_so(tmp_path):
    r = trained(tmp_path, "r", "--set", "train.lr=0.001")  # (not tiny.json's lr: the run's own must be what runs)
    p = run("train", "--resume", r / "checkpoints" / "step_3.ckpt", "--out", tmp_path / "a")
    assert "resume: config %s (the run's config.json" % (r / "config.json") in p.stdout, p.stdout
    q = run("train", "--config", r / "config.json", "--resume", r / "checkpoints" / "step_3.ckpt", "--out",
            tmp_path / "b")
    assert "resume: config" not in q.stdout
    a, b = ([(m["step"], m["loss"]) for m in metrics(tmp_path / d) if "loss" in m] for d in ("a", "b"))
    assert a == b and a[-1][0] == 6, (a, b)
    assert json.loads((tmp_path / "a" / "config.json").read_text())["train"]["lr"] == 0.001
    # a sharded checkpoint's run is found from its directory and from its manifest alike
    z = trained(tmp_path, "z", "--zero", "1")
    for ck in ("step_3.zero", "step_3.zero/manifest.json"):
        p = run("train", "--resume", z / "checkpoints" / ck, "--out", tmp_path / ck.replace("/", "-"))
        assert "resume: config %s " % (z / "config.json") in p.stdout, p.stdout


def test_resume_refuses_a_differing_config_naming_the_difference(tmp_path):
    r = trained(tmp_path, "r", "--set", "train.lr=0.001", "--set", "train.weight_decay=0.5")
    ck = r / "checkpoints" / "step_3.ckpt"
    p = run("train", "--config", "configs/test/tiny.json", "--resume", ck, "--out", tmp_path / "a", check=False)
    assert_usage_error(p, "--config configs/test/tiny.json differs from the run's config.json", str(r / "config.json"),
                       "train.lr is 0.001 there, 0.003 here", "(and 1 more: train.weight_decay)", "--set KEY=VALUE")
    assert not (tmp_path / "a").exists()
    # the same flags on the command line change both alike: then the files agree; and what a resumed run may change
    # (its length, how often it logs and checkpoints, its outputs, its batch split) is no difference
    run("train", "--config", "configs/test/tiny.json", "--resume", ck, "--out", tmp_path / "b", "--set",
        "train.lr=0.001", "--set", "train.weight_decay=0.5", "--steps", "7", "--batch-size", "1", "--set",
        "train.grad_accum=2", "--set", "train.log_every=1", "--set", "output.tensorboard=1")
    # a key changed on purpose with --set is taken
    run("train", "--resume", ck, "--out", tmp_path / "c", "--set", "train.lr=0.0005")
    assert json.loads((tmp_path / "c" / "config.json").read_text())["train"]["lr"] == 0.0005


def test_resume_without_its_runs_config_names_the_file(tmp_path):
    r = trained(tmp_path)
    os.makedirs(tmp_path / "elsewhere" / "checkpoints")
    ck = tmp_path / "elsewhere" / "checkpoints" / "step_3.ckpt"
    shutil.copy(r / "checkpoints" / "step_3.ckpt", ck)
    p = run("train", "--resume", ck, "--out", tmp_path / "a", check=False)
    assert_usage_error(p, "no config.json of its run at %s" % (tmp_path / "elsewhere" / "config.json"), "--config FILE")
    # with --config and no run config beside it, the checkpoint is resumed as before
    run("train", "--config", "configs/test/tiny.json", "--resume", ck, "--out", tmp_path / "b", "--steps", "6")

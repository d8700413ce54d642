"""The settings launchers hand a rank besides its place in the run (src/app/launcher_settings.h): accelerate's
ACCELERATE_* variables, set here by hand as `accelerate launch` (0.21, accelerate/utils/launch.py) writes them, and
then by the real accelerate CLI where it is installed; a DeepSpeed ds_config.json read by --deepspeed-config. Each
setting is taken as the flag it stands for and said on rank 0, a contradicting flag is exit 2 naming both, a value
voxscale cannot honour is exit 2 naming the variable or key; 2 ranks so launched train the 1-rank model."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import MPIRUN, ROOT, VOXSCALE, cpu_levels, needs_mpirun
from test_distributed import assert_same_training

TINY = "configs/test/tiny.json"
QUIET = ["--threads", "1", "--set", "train.val_samples=0", "--set", "output.tensorboard=0", "--set",
         "train.log_every=1"]


def clean_env(**extra):
    """This environment without any launcher's variables (a developer's shell may hold some), plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCELERATE_", "OMPI_", "PMI_", "SLURM_")) and k not in
           ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(extra)
    return env


def train(out, *args, env=None, steps=1):
    """One process of `train` on the tiny config; returns the CompletedProcess (no check)."""
    return subprocess.run([VOXSCALE, "train", "--config", TINY, "--steps", str(steps), "--out", str(out), *QUIET,
                           *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=clean_env(**(env or {})))


def config_of(out):
    return json.loads((out / "config.json").read_text())


def refused(p, *needles):
    """Exit 2 with one error line holding every needle."""
    lines = [l for l in p.stderr.splitlines() if l.startswith("voxscale:")]
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stdout[-2000:], p.stderr)
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


BF16_CPU = cpu_levels()["bf16"] or cpu_levels()["amx"]


# ---- accelerate's variables, set by hand ------------------------------------------------------------------------
def test_accelerate_settings_become_their_flags(tmp_path):
    out = tmp_path / "run"
    p = train(out, env=dict(ACCELERATE_USE_CPU="True", ACCELERATE_MIXED_PRECISION="no",
                            ACCELERATE_DYNAMO_BACKEND="INDUCTOR", ACCELERATE_GRADIENT_ACCUMULATION_STEPS="2"))
    assert p.returncode == 0, p.stderr
    for line in ("accelerate: use cpu -> --device cpu", "accelerate: mixed precision no -> --amp off",
                 "accelerate: dynamo backend INDUCTOR -> --compile",
                 "accelerate: gradient accumulation steps 2 -> --set train.grad_accum=2"):
        assert p.stdout.count(line) == 1, line
    t = config_of(out)["train"]
    assert (t["device"], t["precision"], t["compile"], t["grad_accum"]) == ("cpu", "off", 1, 2)


def test_what_accelerate_writes_by_default_changes_nothing(tmp_path):
    """accelerate writes ACCELERATE_USE_CPU=False and ACCELERATE_DYNAMO_BACKEND=NO whether or not asked."""
    p = train(tmp_path / "run", "--device", "cpu", env=dict(ACCELERATE_USE_CPU="False", ACCELERATE_DYNAMO_BACKEND="NO"))
    assert p.returncode == 0 and "accelerate:" not in p.stdout, p.stdout


def test_accelerate_bf16_trains_in_bf16_or_is_refused_by_name(tmp_path):
    out = tmp_path / "run"
    p = train(out, "--device", "cpu", env=dict(ACCELERATE_MIXED_PRECISION="bf16"))
    assert "accelerate: mixed precision bf16 -> --amp bf16" in p.stdout
    if BF16_CPU:
        assert p.returncode == 0 and config_of(out)["train"]["precision"] == "bf16"
        assert "bf16 math in the convolutions" in p.stdout
    else:
        refused(p, "bf16", "AVX512-BF16")


def test_accelerate_bf16_without_cpu_bf16_is_refused_never_float32(tmp_path):
    p = train(tmp_path / "run", "--device", "cpu", env=dict(ACCELERATE_MIXED_PRECISION="bf16",
                                                          VX_CPU_HIDE="avx512_bf16,amx_bf16"))
    assert "accelerate: mixed precision bf16 -> --amp bf16" in p.stdout
    refused(p, "train.precision bf16", "AVX512-BF16")


def test_accelerate_fp16_on_the_cpu_is_refused_by_name(tmp_path):
    p = train(tmp_path / "run", "--device", "cpu", env=dict(ACCELERATE_MIXED_PRECISION="fp16"))
    refused(p, "fp16 needs a GPU")


def test_accelerate_deepspeed_plugin_variables(tmp_path):
    out = tmp_path / "run"
    p = train(out, "--device", "cpu", env=dict(ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE="1",
                                               ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE="cpu",
                                               ACCELERATE_GRADIENT_CLIPPING="0.5"))
    assert p.returncode == 0, p.stderr
    assert "accelerate: deepspeed zero stage 1 -> --zero 1" in p.stdout
    assert "accelerate: deepspeed offload optimizer cpu -> --set dist.offload_optimizer=cpu" in p.stdout
    assert "accelerate: gradient clipping 0.5 -> --set train.grad_clip=0.5" in p.stdout
    c = config_of(out)
    assert (c["dist"]["zero"], c["dist"]["offload_optimizer"], c["train"]["grad_clip"]) == ("1", "cpu", 0.5)


def test_deepspeed_variables_without_use_deepspeed_are_not_read(tmp_path):
    """accelerate reads its DeepSpeed plugin's variables only with --use_deepspeed."""
    out = tmp_path / "run"
    p = train(out, "--device", "cpu", env=dict(ACCELERATE_DEEPSPEED_ZERO_STAGE="1"))
    assert p.returncode == 0 and config_of(out)["dist"]["zero"] == "0"


def test_use_deepspeed_alone_is_zero_2_and_an_explicit_zero_wins(tmp_path):
    p = train(tmp_path / "a", "--device", "cpu", env=dict(ACCELERATE_USE_DEEPSPEED="true"))
    assert p.returncode == 0 and "(its default: stage 2) -> --zero 2" in p.stdout, p.stdout + p.stderr
    out = tmp_path / "b"
    p = train(out, "--device", "cpu", "--zero", "1", env=dict(ACCELERATE_USE_DEEPSPEED="true"))
    assert p.returncode == 0 and "--zero 1 on the command line wins" in p.stdout
    assert config_of(out)["dist"]["zero"] == "1"


@pytest.mark.parametrize("var,value,needle", [
    ("ACCELERATE_MIXED_PRECISION", "fp32", "unknown mixed precision"),
    ("ACCELERATE_MIXED_PRECISION", "fp8", "no fp8"),
    ("ACCELERATE_USE_CPU", "maybe", "expected true or false"),
    ("ACCELERATE_DYNAMO_BACKEND", "WARP", "not one of accelerate's dynamo backends"),
    ("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "0", "whole number 1..1024"),
    ("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3", "no ZeRO-3"),
    ("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "nvme", "nvme is not supported"),
    ("ACCELERATE_GRADIENT_CLIPPING", "x", "expected a number"),
    ("ACCELERATE_USE_FSDP", "true", "no FSDP"),
])
def test_a_value_voxscale_cannot_honour_names_the_variable(tmp_path, var, value, needle):
    env = {var: value}
    if "DEEPSPEED" in var or "CLIPPING" in var:
        env["ACCELERATE_USE_DEEPSPEED"] = "true"
    refused(train(tmp_path / "run", env=env), "%s=%s" % (var, value), needle)


def test_a_flag_that_agrees_wins_one_that_contradicts_is_exit_2(tmp_path):
    env = dict(ACCELERATE_USE_CPU="true", ACCELERATE_GRADIENT_ACCUMULATION_STEPS="2")
    p = train(tmp_path / "a", "--device", "cpu", "--set", "train.grad_accum=2", env=env)
    assert p.returncode == 0 and "accelerate: use cpu = --device cpu, as the command line says" in p.stdout
    refused(train(tmp_path / "b", "--device", "cuda", env=env), "ACCELERATE_USE_CPU=true", "--device cuda",
            "drop one of them")
    refused(train(tmp_path / "c", "--set", "train.grad_accum=4", env=env),
            "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2", "--set train.grad_accum=4")
    refused(train(tmp_path / "d", "--amp", "fp16", env=dict(ACCELERATE_MIXED_PRECISION="bf16")),
            "ACCELERATE_MIXED_PRECISION=bf16", "--amp bf16", "--amp fp16")


def test_accelerates_default_no_yields_to_an_explicit_amp(tmp_path):
    """accelerate writes ACCELERATE_MIXED_PRECISION=no when --mixed_precision is not given."""
    out = tmp_path / "run"
    p = train(out, "--device", "cpu", "--amp", "off", env=dict(ACCELERATE_MIXED_PRECISION="no"))
    assert p.returncode == 0 and "as the command line says" in p.stdout
    if BF16_CPU:
        p = train(tmp_path / "bf16", "--device", "cpu", "--amp", "bf16", env=dict(ACCELERATE_MIXED_PRECISION="no"))
        assert p.returncode == 0 and "--amp bf16 on the command line wins" in p.stdout


@needs_mpirun
def test_two_tcp_ranks_with_accelerate_settings_train_the_one_rank_model(tmp_path):
    """Ranks as `accelerate launch --multi_gpu` starts them (torchrun's variables) with its DeepSpeed plugin's
    settings, against one process given the same settings as flags (stage 0: the ranks write one ordinary
    checkpoint to compare; the ZeRO stages' equality is test_zero.py's)."""
    one = tmp_path / "one"
    p = train(one, "--device", "cpu", "--zero", "0", "--set", "train.grad_accum=2", "--set", "train.grad_clip=0.5",
              "--set", "train.global_batch=8", steps=10)
    assert p.returncode == 0, p.stderr
    two = tmp_path / "two"
    port = 29500 + os.getpid() % 1000
    procs = []
    for rank in range(2):
        env = clean_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), ACCELERATE_USE_CPU="True",
                        ACCELERATE_MIXED_PRECISION="no", ACCELERATE_DYNAMO_BACKEND="NO",
                        ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE="0",
                        ACCELERATE_GRADIENT_ACCUMULATION_STEPS="2", ACCELERATE_GRADIENT_CLIPPING="0.5")
        procs.append(subprocess.Popen([VOXSCALE, "train", "--config", TINY, "--steps", "10", "--out", str(two),
                                       "--set", "train.global_batch=8", *QUIET], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "2 ranks (torchrun)" in outs[0][0] and "accelerate: deepspeed zero stage 0 -> --zero 0" in outs[0][0]
    assert "accelerate:" not in outs[1][0], "rank 0 alone says what it took"
    assert_same_training(two, one, 10)


# ---- the real accelerate CLI ------------------------------------------------------------------------------------
ACCELERATE = shutil.which("accelerate", path=os.path.join(ROOT, ".venv", "bin")) or shutil.which("accelerate")
needs_accelerate = pytest.mark.skipif(ACCELERATE is None, reason="accelerate is not installed (ci/deps.sh installs "
                                      "accelerate 0.21.0 into .venv without its dependencies)")


def accelerate_env(tmp_path):
    # its own config folder: a developer's ~/.cache/huggingface/accelerate/default_config.yaml would change the run
    return clean_env(HF_HOME=str(tmp_path / "hf"))


@needs_accelerate
@needs_mpirun
def test_accelerate_launch_cpu_bf16_on_two_mpi_ranks(tmp_path):
    """accelerate's multi-CPU runs are mpirun's ranks, each `accelerate launch --cpu` (its simple launcher)."""
    out = tmp_path / "run"
    p = subprocess.run([*MPIRUN, "-np", "2", ACCELERATE, "launch", "--no_python", "--cpu", "--mixed_precision",
                        "bf16", VOXSCALE, "train", "--config", TINY, "--steps", "3", "--out", str(out), *QUIET],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env=accelerate_env(tmp_path))
    assert p.stdout.count("accelerate: mixed precision bf16 -> --amp bf16") == 1, p.stdout[-3000:] + p.stderr[-3000:]
    if BF16_CPU:
        assert p.returncode == 0, p.stderr[-3000:]
        assert "2 ranks (mpirun)" in p.stdout and config_of(out)["train"]["precision"] == "bf16"
    else:  # each rank's voxscale refuses in one line with exit 2; accelerate's launcher turns a child's failure into
        # its own exit 1 and names the child's status, and mpirun reports that
        assert p.returncode != 0 and "needs AVX512-BF16 or AMX-BF16" in p.stderr, p.stderr[-3000:]
        assert "returned non-zero exit status 2" in p.stderr, p.stderr[-3000:]


@needs_accelerate
def test_accelerate_launch_multi_gpu_starts_torchrun_ranks(tmp_path):
    """--multi_gpu goes through torch.distributed.run in accelerate's process. On Debian's torch 1.13 under Python
    3.11 that crashes before any rank starts with torchrun's default redirects "0" (test_real_launchers.py says
    why); accelerate passes its own --tee and takes torchrun's other defaults from PET_* variables, so there the run
    gives `--tee 1` and PET_REDIRECTS=1, as a user of that torch would. 2 ranks, global batch 8, match 1 rank."""
    from test_real_launchers import torchrun_needs_redirects
    one = tmp_path / "one"
    p = train(one, "--device", "cpu", "--set", "train.global_batch=8", steps=6)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "run"
    env = accelerate_env(tmp_path)
    fix = []
    if torchrun_needs_redirects():
        fix = ["--tee", "1"]
        env["PET_REDIRECTS"] = "1"
    p = subprocess.run([ACCELERATE, "launch", "--no_python", "--multi_gpu", "--num_processes", "2", *fix,
                        "--main_process_port", str(29500 + os.getpid() % 1000 + 7), "--mixed_precision", "no",
                        VOXSCALE, "train", "--config", TINY, "--steps", "6", "--out", str(out), "--device", "cpu",
                        "--set", "train.global_batch=8", *QUIET], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "2 ranks (torchrun)" in p.stdout and "accelerate: mixed precision no -> --amp off" in p.stdout
    assert_same_training(out, one, 6)


# ---- a DeepSpeed ds_config.json ---------------------------------------------------------------------------------
def ds_config(tmp_path, cfg, name="ds_config.json"):
    p = tmp_path / name
    p.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return p


def test_every_deepspeed_key_is_read(tmp_path):
    ds = ds_config(tmp_path, {"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}},
                              "bf16": {"enabled": False}, "gradient_accumulation_steps": 2,
                              "gradient_clipping": 0.25, "train_micro_batch_size_per_gpu": 3})
    out = tmp_path / "run"
    p = train(out, "--device", "cpu", "--deepspeed-config", ds)
    assert p.returncode == 0, p.stderr
    said = "deepspeed config %s: " % ds
    for line in ("zero_optimization.stage 1 -> --zero 1", "offload_optimizer.device cpu -> --set "
                 "dist.offload_optimizer=cpu", "bf16.enabled false -> --amp off",
                 "gradient_accumulation_steps 2 -> --set train.grad_accum=2",
                 "gradient_clipping 0.25 -> --set train.grad_clip=0.25",
                 "train_micro_batch_size_per_gpu 3 -> --batch-size 3"):
        assert line in p.stdout, line
    assert said + "zero_optimization.stage 1" in p.stdout and "warning" not in p.stdout
    c = config_of(out)
    assert (c["dist"]["zero"], c["dist"]["offload_optimizer"]) == ("1", "cpu")
    t = c["train"]
    assert (t["precision"], t["grad_accum"], t["grad_clip"], t["batch_size"], t["global_batch"]) == ("off", 2, 0.25,
                                                                                                     3, 0)


def test_deepspeed_fp16_is_refused_on_the_cpu_by_name(tmp_path):
    ds = ds_config(tmp_path, {"fp16": {"enabled": True, "loss_scale": 0}})
    p = train(tmp_path / "run", "--device", "cpu", "--deepspeed-config", ds)
    assert "fp16.enabled true -> --amp fp16" in p.stdout
    refused(p, "fp16 needs a GPU")


def test_auto_keeps_ours_and_unknown_keys_are_one_warning_line(tmp_path):
    ds = ds_config(tmp_path, {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                              "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
                              "zero_optimization": {"stage": "auto", "overlap_comm": True,
                                                    "offload_optimizer": {"device": "auto", "pin_memory": True}},
                              "optimizer": {"type": "AdamW"}, "steps_per_print": 10})
    out = tmp_path / "run"
    p = train(out, "--device", "cpu", "--deepspeed-config", ds)
    assert p.returncode == 0, p.stderr
    assert "->" not in "".join(l for l in p.stdout.splitlines() if l.startswith("deepspeed config"))
    warn = [l for l in p.stdout.splitlines() if "warning" in l]
    assert len(warn) == 1, p.stdout
    for key in ("zero_optimization.overlap_comm", "zero_optimization.offload_optimizer.pin_memory", "optimizer",
                "steps_per_print"):
        assert key in warn[0], key
    t = config_of(out)["train"]
    assert (t["batch_size"], t["grad_accum"], t["grad_clip"]) == (2, 1, 1.0)  # tiny.json's, the defaults


def test_train_batch_size_alone_is_the_global_batch_and_must_agree_with_the_others(tmp_path):
    out = tmp_path / "a"
    p = train(out, "--device", "cpu", "--deepspeed-config", ds_config(tmp_path, {"train_batch_size": 8}, "a.json"))
    assert p.returncode == 0 and config_of(out)["train"]["global_batch"] == 8, p.stderr
    out = tmp_path / "b"  # 8 = 2 per GPU x 4 accumulation x 1 rank: the accumulation is derived, as DeepSpeed does
    p = train(out, "--device", "cpu", "--deepspeed-config",
              ds_config(tmp_path, {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2}, "b.json"))
    assert p.returncode == 0 and config_of(out)["train"]["grad_accum"] == 4, p.stderr
    bad = ds_config(tmp_path, {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                               "gradient_accumulation_steps": 2}, "c.json")
    refused(train(tmp_path / "c", "--device", "cpu", "--deepspeed-config", bad), "train_batch_size 8 is not", "= 4")


@pytest.mark.parametrize("text,needles", [
    ('{"zero_optimization": {"stage": 2,}', ["not valid JSON (line 1)"]),
    ('{\n  "fp16": {"enabled": true}\n  "bf16": {}\n}', ["not valid JSON (line 3)"]),
    ('[1, 2]', ["expected a JSON object"]),
    ('{"zero_optimization": {"stage": 3}}', ["stage 3", "not in voxscale"]),
    ('{"zero_optimization": {"offload_optimizer": {"device": "nvme"}}}', ["offload_optimizer.device", "nvme"]),
    ('{"fp16": {"enabled": true}, "bf16": {"enabled": true}}', ["both true"]),
    ('{"gradient_accumulation_steps": 1.5}', ["gradient_accumulation_steps must be a whole number"]),
    ('{"fp16": {"enabled": "yes"}}', ["fp16.enabled must be true, false"]),
])
def test_a_bad_deepspeed_config_is_one_line_and_exit_2(tmp_path, text, needles):
    ds = ds_config(tmp_path, text)
    refused(train(tmp_path / "run", "--deepspeed-config", ds), str(ds), *needles)


def test_a_missing_deepspeed_config_is_one_line(tmp_path):
    refused(train(tmp_path / "run", "--deepspeed-config", tmp_path / "none.json"), "none.json: cannot read it")


def test_deepspeed_config_against_flags_and_accelerate(tmp_path):
    ds = ds_config(tmp_path, {"zero_optimization": {"stage": 1}, "gradient_accumulation_steps": 2})
    p = train(tmp_path / "a", "--device", "cpu", "--zero", "1", "--deepspeed-config", ds)
    assert p.returncode == 0 and "zero_optimization.stage 1 = --zero 1, as the command line says" in p.stdout
    refused(train(tmp_path / "b", "--zero", "2", "--deepspeed-config", ds), "zero_optimization.stage 1",
            "--zero 2", "drop one of them")
    refused(train(tmp_path / "c", "--deepspeed-config", ds, env=dict(ACCELERATE_GRADIENT_ACCUMULATION_STEPS="4")),
            "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=4", "gradient_accumulation_steps 2", "make them agree")
    # accelerate --use_deepspeed --deepspeed_config_file FILE: the same file, read through accelerate's variable
    out = tmp_path / "d"
    p = train(out, "--device", "cpu", env=dict(ACCELERATE_USE_DEEPSPEED="true",
                                               ACCELERATE_DEEPSPEED_CONFIG_FILE=str(ds)))
    assert p.returncode == 0 and "zero_optimization.stage 1 -> --zero 1" in p.stdout, p.stdout + p.stderr
    assert "its default" not in p.stdout and config_of(out)["dist"]["zero"] == "1"


def deepspeed_two_rank_case(tmp_path):
    """A ds_config.json for 2 ranks (global batch 8 = 2 per rank x 2 accumulation x 2 ranks, clipping 0.5, stage
    0) and the 1-rank run its ranks must reproduce (2 x 4 accumulation, the lr not scaled): (config path, run)."""
    ds = ds_config(tmp_path, {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                              "gradient_clipping": 0.5, "zero_optimization": {"stage": 0}})
    one = tmp_path / "one"
    p = train(one, "--device", "cpu", "--set", "train.grad_accum=4", "--set", "train.grad_clip=0.5",
              "--batch-size", "2", "--set", "train.global_batch=0", "--lr-scaling", "none", steps=10)
    assert p.returncode == 0, p.stderr
    return ds, one


@needs_mpirun
def test_two_ranks_as_the_deepspeed_launcher_starts_them_train_the_one_rank_model(tmp_path):
    """`deepspeed --num_gpus 2 --no_python --no_local_rank voxscale train --deepspeed-config ds.json`: its
    launcher (deepspeed/launcher/launch.py) sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_SIZE,
    CROSS_RANK and CROSS_SIZE, set here by hand (test_real_launchers.py runs the launcher itself)."""
    ds, one = deepspeed_two_rank_case(tmp_path)
    two = tmp_path / "two"
    port = 29500 + os.getpid() % 1000 + 3
    procs = []
    for rank in range(2):
        env = clean_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_SIZE="2", CROSS_RANK="0",
                        CROSS_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([VOXSCALE, "train", "--config", TINY, "--steps", "10", "--out", str(two),
                                       "--device", "cpu", "--deepspeed-config", str(ds), "--lr-scaling", "none",
                                       *QUIET], cwd=ROOT,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "2 ranks (torchrun), this is rank 0 (local 0 of 2)" in outs[0][0]
    assert "gradient_accumulation_steps 2 -> --set train.grad_accum=2" in outs[0][0], outs[0][0]
    assert_same_training(two, one, 10)

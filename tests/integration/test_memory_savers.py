"""The two ways voxscale trades work for memory, and that they change nothing else:
- activation checkpointing (--checkpoint-activations): each ResBlock's (dense layer's, transformer block's) inside is
  recomputed in backward, so the gradients must be bit for bit the stored ones, and the planned arena smaller; a
  DenseNet's activations then grow linearly in its layers (the memory-efficient DenseNet);
- the fused GroupNorm + SiLU (train.fuse, default 1): one op instead of two, with the pre-activation recomputed,
  so the arena is smaller and the results equal the unfused pair's to float rounding (test_pytorch.py pins both to
  PyTorch); the fused BatchNorm + ReLU: the pair's bits in float32."""
import re
import tempfile

import pytest

from conftest import metrics, run


def planned_arena_mib(tmp_path, *extra):
    """The planned activation arena (MiB) that `bench step` reports for a config."""
    results = tempfile.mkdtemp(dir=tmp_path, prefix="bench-")  # (each call its own: results are never replaced)
    p = run("bench", "step", "--iters", "1", "--warmup", "0", "--results", results, *extra)
    m = re.search(r"memory: arena ([0-9.]+) MiB planned", p.stdout + p.stderr)
    assert m, p.stdout + p.stderr
    return float(m.group(1))


@pytest.mark.parametrize("config,extra", [
    ("configs/test/probe.json", []),                                        # 1x1 shortcuts (channels change)
    ("configs/test/probe.json", ["--set", "model.res_blocks=2"]),           # identity shortcuts too
    ("configs/test/probe.json", ["--set", "train.fuse=0"]),                 # separate SiLU nodes rerun as well
    # densenet: each dense layer's BatchNorms rerun from the block's buffer (with the batch's statistics), and
    # MONAI's dropout_prob inside the layers draws the same keyed mask
    ("configs/test/cxr-tiny.json", ["--set", "model.dropout_prob=0.2", "--set", "train.batch_size=4",
                                    "--set", "model.block_config=[3, 4]"]),
    # resnet3d: each residual block (bottlenecks, strided shortcuts) reruns its convolutions and BatchNorms
    ("configs/test/resnet-tiny.json", ["--set", "model.depth=50", "--set", "model.widen_factor=0.25",
                                       "--set", "model.conv1_t_stride=2"]),
])
def test_checkpointed_gradients_are_the_stored_ones_bit_for_bit(tmp_path, config, extra):
    run("probe", "--config", config, "--out", tmp_path / "stored", *extra)
    run("probe", "--config", config, "--out", tmp_path / "recomputed", "--checkpoint-activations", *extra)
    # the .bin holds the input, the noise, the parameters, the output, the losses and every gradient
    stored = (tmp_path / "stored.bin").read_bytes()
    assert stored == (tmp_path / "recomputed.bin").read_bytes()
    assert planned_arena_mib(tmp_path, "--config", config, "--checkpoint-activations", *extra) < \
        planned_arena_mib(tmp_path, "--config", config, *extra)


def test_checkpointed_training_follows_the_same_losses(tmp_path):
    common = ["--config", "configs/test/tiny.json", "--steps", "6", "--set", "train.log_every=1",
              "--set", "train.grad_accum=2"]
    run("train", *common, "--out", tmp_path / "stored")
    run("train", *common, "--out", tmp_path / "recomputed", "--checkpoint-activations")
    a = [r["loss"] for r in metrics(tmp_path / "stored") if "loss" in r]
    b = [r["loss"] for r in metrics(tmp_path / "recomputed") if "loss" in r]
    assert len(a) == 6 and a == b


def test_fused_norm_act_saves_memory_and_matches_the_pair(tmp_path):
    assert planned_arena_mib(tmp_path) < 0.85 * planned_arena_mib(tmp_path, "--set", "train.fuse=0")
    common = ["--config", "configs/test/tiny.json", "--steps", "6", "--set", "train.log_every=1"]
    run("train", *common, "--out", tmp_path / "fused")
    run("train", *common, "--out", tmp_path / "pair", "--set", "train.fuse=0")
    a = [r["loss"] for r in metrics(tmp_path / "fused") if "loss" in r]
    b = [r["loss"] for r in metrics(tmp_path / "pair") if "loss" in r]
    assert len(a) == 6
    assert all(abs(x - y) <= 1e-4 * abs(y) for x, y in zip(a, b)), (a, b)


@pytest.mark.parametrize("config", ["configs/test/cxr-tiny.json", "configs/test/resnet-tiny.json"])
def test_fused_batchnorm_relu_is_the_pair_bit_for_bit(tmp_path, config):
    """train.fuse's BatchNorm+ReLU (densenet's every norm, resnet3d's conv-bn-relu units): in float32 the probe's
    every byte (parameters, outputs, losses, the ReLU masks, every gradient, the running statistics after the steps)
    is the separate pair's, and the plan needs no more memory."""
    run("probe", "--config", config, "--out", tmp_path / "fused")
    run("probe", "--config", config, "--out", tmp_path / "pair", "--set", "train.fuse=0")
    assert (tmp_path / "fused.bin").read_bytes() == (tmp_path / "pair.bin").read_bytes()
    assert planned_arena_mib(tmp_path, "--config", config) <= \
        planned_arena_mib(tmp_path, "--config", config, "--set", "train.fuse=0")


def test_densenet_checkpointed_memory_grows_linearly_in_the_layers(tmp_path):
    """A dense block of L layers keeps, with checkpointing, only its buffer of every layer's features (linear in L);
    without it each layer's norm1 output, as wide as the channels before it, stays for conv1's backward (quadratic in
    L; MONAI keeps each concatenation too). Planned arenas of one block of 8, 16 and 32 layers: the second 16 layers'
    increase is twice the first 8's when linear (4x when purely quadratic; 3.12 measured, the linear terms
    included)."""
    def arena(layers, ck):
        p = run("detect", "--config", "configs/test/cxr-tiny.json", "--device", "cpu",
                "--set", "model.block_config=[%d]" % layers, "--set", "train.checkpoint_activations=%d" % ck)
        return float(re.search(r"memory: arena ([0-9.]+) MiB planned", p.stdout + p.stderr).group(1))
    kept = [arena(n, 1) for n in (8, 16, 32)]
    stored = [arena(n, 0) for n in (8, 16, 32)]
    growth_kept = (kept[2] - kept[1]) / (kept[1] - kept[0])
    growth_stored = (stored[2] - stored[1]) / (stored[1] - stored[0])
    print("\ndensenet arena MiB at 8/16/32 layers: checkpointed %s (growth %.2f), stored %s (growth %.2f)" % (
        kept, growth_kept, stored, growth_stored))
    assert 1.7 < growth_kept < 2.3, kept
    assert growth_stored > 3, stored
    assert kept[2] < 0.3 * stored[2]

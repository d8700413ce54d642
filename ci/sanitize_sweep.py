#!/usr/bin/env python3
"""ci/sanitize_sweep.py: every family run whole under the sanitizer build (make asan: ASan + UBSan, every report
fatal), so that a bad read anywhere on a command's path fails CI, not only in the op table the unit tests cover
(issue 34: resnet3d read tensors[-1] on every run and nothing caught it).

For each family on its tiny config (ae3d, resnet3d with each task, densenet on chest films, vit3d, vit3d_diffusion),
the cases are: train with validation and checkpoints, a resume of it, export, train --init-from the export, predict from the checkpoint and from
the export (families predict writes for), train with dist.zero 2 and ckpt consolidate of its sharded checkpoint,
`bench step`; then a vit3d_diffusion cascade (train across its boundary, resume, export, predict); a 2-rank TCP run (ZeRO-2, SyncBatchNorm) and its consolidation, the launchers' settings, 2-D JPEG
films resized on load (and a truncated one, exit 2), and a SIGINT'd run (exit 130).
A case fails when its exit code is not the one expected or its output holds a sanitizer report.

    ci/sanitize_sweep.py [--voxscale build/asan/voxscale] [--work DIR] [-k SUBSTRING]

Prints a line per failed case (and its output's end) and last "sanitizer sweep: N cases, N passed, N failed";
exits 0 when none failed. Standard library only: the volumes predict reads are written here as NIfTI-1."""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPORT = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer",
          "AddressSanitizer:DEADLYSIGNAL")
QUIET = ["--device", "cpu", "--threads", "1", "--set", "train.log_every=1"]
RESNET = "configs/test/resnet-tiny.json"
TINY = "configs/test/tiny.json"
FAMILIES = {
    "ae3d": ["--config", "configs/test/tiny.json"],
    "resnet3d-classification": ["--config", RESNET],
    "resnet3d-multilabel": ["--config", RESNET, "--set", "model.task=multilabel"],
    "resnet3d-regression": ["--config", RESNET, "--set", "model.task=regression", "--set", "model.num_classes=2"],
    "resnet3d-survival": ["--config", RESNET, "--set", "model.task=survival", "--set", "model.num_classes=1"],
    "densenet": ["--config", "configs/test/cxr-tiny.json", "--set", "train.batch_size=4", "--set",
                 "train.val_samples=8", "--set", "model.dropout_prob=0.1",  # dense layers' dropout, and their
                 "--set", "train.checkpoint_activations=1"],                 # insides rerun from the block's buffer
    "vit3d": ["--config", "configs/test/vit3d-tiny.json"],
    "vit3d_diffusion": ["--config", "configs/test/vit3d-diffusion-tiny.json", "--set", "diffusion.sample_steps=2"],
}
PREDICTS = ("ae3d", "resnet3d", "densenet", "vit3d_diffusion")  # the families predict writes outputs for


def write_nifti(path, n, seed):
    """An n^3 float32 NIfTI-1 volume (a smooth blob plus a pattern of the seed), written with struct alone."""
    hdr = bytearray(348)
    struct.pack_into("<i", hdr, 0, 348)
    struct.pack_into("<8h", hdr, 40, 3, n, n, n, 1, 1, 1, 1)
    struct.pack_into("<hh", hdr, 70, 16, 32)  # datatype FLOAT32, bitpix
    struct.pack_into("<8f", hdr, 76, 1, 1, 1, 1, 1, 1, 1, 1)
    struct.pack_into("<f", hdr, 108, 352.0)  # vox_offset
    struct.pack_into("<f", hdr, 112, 1.0)  # scl_slope
    hdr[344:348] = b"n+1\0"
    c = (n - 1) / 2.0
    vals = [100.0 * (((x - c) ** 2 + (y - c) ** 2 + (z - c) ** 2) < (n / 3.0) ** 2) + (x * 7 + y * 3 + z + seed) % 11
            for z in range(n) for y in range(n) for x in range(n)]
    with open(path, "wb") as f:
        f.write(bytes(hdr) + b"\0\0\0\0" + struct.pack("<%df" % len(vals), *vals))


class Sweep:
    def __init__(self, voxscale, work, only):
        self.voxscale, self.work, self.only = voxscale, work, only
        self.passed, self.failed = 0, []

    def case(self, name, args, expect=0, sigint_after=None, env=None):
        """Runs voxscale args; passes when it exits `expect` with no sanitizer report. sigint_after: seconds after
        which SIGINT is sent (a run stopped on it exits 130)."""
        if self.only and self.only not in name:
            return None
        e = dict(os.environ, **(env or {}))
        t0 = time.time()
        p = subprocess.Popen([self.voxscale, *map(str, args)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=e)
        if sigint_after is not None:
            time.sleep(sigint_after)
            p.send_signal(signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n(timed out after 300 s)"
        report = next((r for r in REPORT if r in out), None)
        if p.returncode == expect and report is None:
            self.passed += 1
            return out
        why = "sanitizer report (%s)" % report if report else "exit %d, expected %d" % (p.returncode, expect)
        self.failed.append(name)
        print("FAILED %s: %s after %.1f s: voxscale %s" % (name, why, time.time() - t0, " ".join(map(str, args))))
        print("\n".join("    " + line for line in out.splitlines()[-25:]))
        return out

    def family(self, name, cfg, vols):
        d = os.path.join(self.work, name)
        run, ck = os.path.join(d, "run"), os.path.join(d, "run", "checkpoints")
        train = ["train", *cfg, *QUIET, "--set", "train.val_every=2", "--set", "train.ckpt_every=2"]
        self.case(name + ": train with validation", [*train, "--steps", 4, "--out", run])
        self.case(name + ": resume", [*train, "--steps", 6, "--out", os.path.join(d, "resumed"), "--resume",
                                      os.path.join(ck, "step_2.ckpt")])
        weights = os.path.join(d, "weights.safetensors")
        self.case(name + ": export", ["export", "--ckpt", os.path.join(ck, "step_4.ckpt"), "--out", weights])
        self.case(name + ": train --init-from", [*train, "--steps", 2, "--out", os.path.join(d, "init"),
                                                 "--init-from", weights])
        if name.split("-")[0] in PREDICTS:
            self.case(name + ": predict --ckpt", ["predict", "--ckpt", os.path.join(ck, "step_4.ckpt"), "--data",
                                                  vols, "--out", os.path.join(d, "pred"), "--device", "cpu"])
            self.case(name + ": predict --weights", ["predict", "--weights", weights, "--data", vols, "--out",
                                                     os.path.join(d, "pred_w"), "--device", "cpu"])
        zero = os.path.join(d, "zero")
        self.case(name + ": train --zero 2", [*train, "--steps", 2, "--zero", 2, "--out", zero])
        self.case(name + ": ckpt consolidate", ["ckpt", "consolidate", os.path.join(zero, "checkpoints",
                                                                                   "step_2.zero")])
        self.case(name + ": bench step", ["bench", "step", *cfg, "--device", "cpu", "--threads", 1, "--iters", 1,
                                          "--warmup", 1, "--results", os.path.join(d, "bench")])

    def cascade(self, vols):
        """A vit3d_diffusion cascade (two stages, two networks): train across the boundary with validation, resume
        at the boundary, predict through both networks from the checkpoint and from its export."""
        d = os.path.join(self.work, "cascade")
        run, ck = os.path.join(d, "run"), os.path.join(d, "run", "checkpoints")
        stages = ('[{"input_size": [8, 8, 8], "steps": 2, "model": {"hidden_size": 32, "blocks": 1, '
                  '"patch_size": [2, 2, 2]}}, {"input_size": [16, 16, 16], "steps": 2}]')
        train = ["train", "--config", "configs/test/vit3d-cascade-tiny.json", *QUIET, "--set", "train.val_every=2",
                 "--set", "train.ckpt_every=2", "--set", "train.stages=" + stages, "--set", "diffusion.sample_steps=2"]
        self.case("vit3d cascade: train across the boundary", [*train, "--out", run])
        self.case("vit3d cascade: resume at the boundary", [*train, "--out", os.path.join(d, "resumed"), "--resume",
                                                           os.path.join(ck, "step_2.ckpt")])
        weights = os.path.join(d, "weights.safetensors")
        self.case("vit3d cascade: export", ["export", "--ckpt", os.path.join(ck, "step_4.ckpt"), "--out", weights])
        self.case("vit3d cascade: predict --ckpt", ["predict", "--ckpt", os.path.join(ck, "step_4.ckpt"), "--data",
                                                    vols, "--out", os.path.join(d, "pred"), "--device", "cpu"])
        self.case("vit3d cascade: predict --weights", ["predict", "--weights", weights, "--data", vols, "--out",
                                                       os.path.join(d, "pred_w"), "--device", "cpu"])

    def ranks(self):
        """Two TCP ranks (started by train --gpus 2 --device cpu): ZeRO-2 over SyncBatchNorm, then consolidated."""
        d = os.path.join(self.work, "ranks")
        self.case("2 tcp ranks: train --zero 2, sync_bn", ["train", "--config", RESNET, *QUIET, "--gpus", 2,
                                                            "--zero", 2, "--set", "model.sync_bn=1", "--steps", 2,
                                                            "--set", "train.val_every=2", "--out", d])
        self.case("2 tcp ranks: ckpt consolidate", ["ckpt", "consolidate", os.path.join(d, "checkpoints",
                                                                                       "step_2.zero")])

    def launchers(self):
        """A launcher's settings (src/app/launcher_settings.c, deepspeed_config.c) on one rank placed as torchrun
        places it: accelerate's variables with its DeepSpeed plugin, and a ds_config.json with an unknown key (the
        warning path), then a contradicting flag (exit 2) and the --local_rank=N DeepSpeed adds (exit 2)."""
        d = os.path.join(self.work, "launchers")
        os.makedirs(d, exist_ok=True)
        ds = os.path.join(d, "ds_config.json")
        with open(ds, "w") as f:
            json.dump({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                       "gradient_clipping": 0.5, "zero_optimization": {"stage": 1, "overlap_comm": True},
                       "optimizer": {"type": "AdamW"}}, f)
        torchrun = dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(29500 + os.getpid() % 1000))
        accelerate = dict(torchrun, ACCELERATE_MIXED_PRECISION="no", ACCELERATE_USE_CPU="True",
                          ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE="2",
                          ACCELERATE_GRADIENT_ACCUMULATION_STEPS="2", ACCELERATE_GRADIENT_CLIPPING="1.0")
        self.case("launchers: accelerate's variables", ["train", "--config", TINY, *QUIET, "--steps", 2, "--out",
                                                        os.path.join(d, "accelerate")], env=accelerate)
        self.case("launchers: --deepspeed-config", ["train", "--config", TINY, *QUIET, "--steps", 2,
                                                    "--deepspeed-config", ds, "--out", os.path.join(d, "ds")],
                  env=torchrun)
        self.case("launchers: a contradicting flag", ["train", "--config", TINY, *QUIET, "--steps", 2, "--zero", 0,
                                                      "--out", os.path.join(d, "refused")], expect=2, env=accelerate)
        self.case("launchers: deepspeed's --local_rank", ["--local_rank=0", "train", "--config", TINY], expect=2)

    def films(self):
        """2-D JPEG films (cjpeg writes them; one colour, one progressive) in a manifest, resized on load
        (data.resize fit, a JPEG's DCT scaling) for a 2-D ResNet, with CheXpert's uncertain and blank cells masked
        and pos_weight from the counts: train with validation, and a truncated film in the manifest (exit 2)."""
        d = os.path.join(self.work, "films")
        os.makedirs(d, exist_ok=True)
        if not shutil.which("cjpeg"):
            self.failed.append("films: cjpeg (libjpeg-turbo-progs) is not installed; ci/deps.sh installs it")
            return
        rows = ["path,split,finding,other"]
        for i in range(8):
            w, h = 70 + i, 90
            px = bytes(min(255, (x * 3 + y * 2 + 40 * (i % 2) * (abs(x - 30) < 8 and abs(y - 40) < 8)) % 256)
                       for y in range(h) for x in range(w))
            pnm = b"P5 %d %d 255\n" % (w, h) + px
            flags = ["-progressive"] if i == 3 else []
            if i == 5:  # a colour film
                pnm = b"P6 %d %d 255\n" % (w, h) + bytes(v for p in px for v in (p, p, 255 - p))
            jpg = subprocess.run(["cjpeg", *flags], input=pnm, stdout=subprocess.PIPE, check=True).stdout
            with open(os.path.join(d, "f%d.jpg" % i), "wb") as f:
                f.write(jpg)
            rows.append("f%d.jpg,%s,%d,%s" % (i, "val" if i % 4 >= 2 else "train", i % 2, ["1", "0", "-1", ""][i % 4]))
        csv = os.path.join(d, "films.csv")
        with open(csv, "w") as f:
            f.write("\n".join(rows) + "\n")
        films = ["--config", RESNET, "--set", "model.spatial_dims=2", "--set", "model.input_size=[1, 32, 32]",
                 "--set", "model.task=multilabel", "--set", "model.num_classes=2", "--set", "data.source=csv",
                 "--set", "data.label_columns=finding,other", "--set", "data.resize=fit", "--set", "data.csv=" + csv,
                 "--set", "data.uncertain=u_ignore", "--set", "data.blank=ignore", "--set", "model.pos_weight_auto=1",
                 "--set", "data.affine=[10, 0.1, 0.05]", "--set", "data.augment=0"]
        self.case("films: 2-D JPEGs resized, train with validation",
                  ["train", *films, *QUIET, "--steps", 2, "--set", "train.val_every=2", "--out",
                   os.path.join(d, "run")])
        with open(os.path.join(d, "f1.jpg"), "rb") as f:
            cut = f.read()[:300]
        with open(os.path.join(d, "f1.jpg"), "wb") as f:
            f.write(cut)
        self.case("films: a truncated JPEG", ["train", *films, *QUIET, "--steps", 2, "--out",
                                              os.path.join(d, "refused")], expect=2)

    def bf16(self):
        """The CPU's bf16 math where the CPU has it (AVX512-BF16 or AMX-BF16): a transformer with its GEMMs forced into
        bf16 (VX_GEMM_BF16=on: oneDNN's bf16 matmul per job, per-thread scratchpads) and the convolutions' bf16
        candidates, trained with validation."""
        with open("/proc/cpuinfo") as f:
            flags = f.read()
        if "avx512_bf16" not in flags and "amx_bf16" not in flags:
            return
        d = os.path.join(self.work, "bf16")
        two_threads = [a if a != "1" else "2" for a in QUIET]  # jobs running oneDNN's primitives side by side
        self.case("bf16: vit3d_diffusion with bf16 GEMMs", ["train", *FAMILIES["vit3d_diffusion"], *two_threads,
                                                            "--amp", "bf16", "--steps", 2, "--set",
                                                            "train.val_every=2", "--out", os.path.join(d, "diffusion")],
                  env={"VX_GEMM_BF16": "on"})

    def stopped(self):
        """A run stopped by SIGINT mid-run writes its checkpoint and exits 130."""
        self.case("SIGINT: train stops with a checkpoint", ["train", "--config", RESNET, *QUIET, "--steps", 100000,
                                                            "--set", "train.val_every=0", "--out",
                                                            os.path.join(self.work, "stopped")],
                  expect=130, sigint_after=3.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--voxscale", default=os.path.join(os.environ.get("BUILD", "build"), "asan", "voxscale"))
    ap.add_argument("--work", help="a folder for the runs (default: a temporary one, removed at the end)")
    ap.add_argument("-k", dest="only", help="only the cases whose name holds this")
    a = ap.parse_args()
    voxscale = os.path.abspath(os.path.join(ROOT, a.voxscale))
    if not os.access(voxscale, os.X_OK):
        sys.exit("sanitizer sweep: %s is not there: run `make asan` first" % voxscale)
    # every report fatal (the build's -fno-sanitize-recover does it for UBSan), leak detection off: a refused or
    # stopped command exits through vx_exit without freeing (mk/asan.mk); the convolution choices in a file of
    # this sweep, so that a user's cache is neither read nor written
    os.environ["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0:halt_on_error=1"
    os.environ["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    work = a.work or tempfile.mkdtemp(prefix="voxscale-sanitize-")
    if a.work:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "vols"), exist_ok=True)
    os.environ.setdefault("VX_CONV_CACHE", os.path.join(work, "conv-cpu.tsv"))
    vols = os.path.join(work, "vols")
    for i in range(3):
        write_nifti(os.path.join(vols, "v%d.nii" % i), 18, i)
    t0 = time.time()
    s = Sweep(voxscale, work, a.only)
    for name, cfg in FAMILIES.items():
        s.family(name, cfg, vols)
    s.cascade(vols)
    s.ranks()
    s.launchers()
    s.films()
    s.bf16()
    s.stopped()
    total = s.passed + len(s.failed)
    print("sanitizer sweep: %d cases, %d passed, %d failed (%s, %.0f s)" % (total, s.passed, len(s.failed),
                                                                            os.path.relpath(voxscale, ROOT),
                                                                            time.time() - t0))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if s.failed or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main())

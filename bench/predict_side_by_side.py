"""`voxscale predict` beside MONAI on the same volumes and weights: agreement and throughput (issue 28).

  python bench/predict_side_by_side.py --config configs/resnet3d-18-cls.json [--volumes 32] [--steps 2] [--threads 2]

Trains the config for --steps steps on the CPU (so BatchNorm's running statistics and the weights are not the
initial ones), exports the checkpoint, writes --volumes NIfTI volumes of the config's input size, then runs
`voxscale predict` (its own volumes/s: decoding, transforms, forward) and MONAI's ResNet (resnet3d) or
bench/reference/ae3d.py's AE3D (ae3d) holding the exported weights (torch, --threads threads, evaluation mode, the same batch, the forward alone: a ceiling-free baseline that
does no decoding), alternating --repeats times, and prints one JSON line: the largest probability and logit
differences (ae3d: the reconstructions'), and both throughputs (median of the repeats). data.normalize is none so both read the same voxels."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "reference"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/resnet3d-18-cls.json")
    ap.add_argument("--volumes", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--voxscale", default=os.path.join(ROOT, "build", "voxscale"))
    args = ap.parse_args()
    import nibabel as nib
    import resnet3d
    from safetensors.torch import load_file
    tmp = tempfile.mkdtemp(prefix="predict-bench-")
    vx = lambda *a: subprocess.run([args.voxscale, *map(str, a)], cwd=ROOT, capture_output=True, text=True, check=True)
    run = os.path.join(tmp, "run")
    vx("train", "--config", args.config, "--out", run, "--steps", args.steps, "--device", "cpu", "--threads",
       args.threads, "--set", "output.tensorboard=0", "--set", "train.val_samples=0")
    ck = os.path.join(run, "checkpoints", "step_%d.ckpt" % args.steps)
    vx("export", "--ckpt", ck, "--out", os.path.join(tmp, "w.safetensors"))
    cfg = json.load(open(os.path.join(run, "config.json")))
    d, h, w = cfg["model"]["input_size"]
    rng = np.random.default_rng(0)
    vols = os.path.join(tmp, "vols")
    os.makedirs(vols)
    arrays = []
    for i in range(args.volumes):
        a = rng.random((w, h, d), dtype=np.float32)
        nib.save(nib.Nifti1Image(a, np.eye(4)), os.path.join(vols, "v%03d.nii.gz" % i))
        arrays.append(a.transpose(2, 1, 0))
    ae = cfg["model"]["family"] == "ae3d"
    if ae:
        import ae3d
        model = ae3d.AE3D(cfg["model"])
    else:
        model = resnet3d.build_model(cfg)
    model.load_state_dict(load_file(os.path.join(tmp, "w.safetensors")), strict=True)
    model.eval()
    torch.set_num_threads(args.threads)
    x = torch.from_numpy(np.stack(arrays)[:, None].copy())
    ours_rate, theirs_rate = [], []
    for r in range(args.repeats):
        out = os.path.join(tmp, "pred%d" % r)
        p = vx("predict", "--ckpt", ck, "--data", vols, "--out", out, "--device", "cpu", "--threads", args.threads,
               "--batch-size", args.batch, "--set", "data.normalize=none")
        ours_rate.append(float(re.search(r"predict: \d+ volumes in [\d.]+ s \(([\d.]+) volumes/s", p.stdout).group(1)))
        t0 = time.perf_counter()
        with torch.no_grad():
            logits = torch.cat([(model(x[i:i + args.batch])[0] if ae else model(x[i:i + args.batch]))
                                for i in range(0, len(x), args.batch)])
        theirs_rate.append(len(x) / (time.perf_counter() - t0))
    common = {"config": args.config, "volumes": args.volumes, "batch": args.batch, "threads": args.threads,
              "voxscale_predict_volumes_per_s": float(np.median(ours_rate)),
              "torch_forward_volumes_per_s": float(np.median(theirs_rate)),
              "runs": {"voxscale": ours_rate, "torch": theirs_rate}}
    if ae:  # the reconstructions voxscale wrote against PyTorch's
        rec = np.stack([np.asarray(nib.load(os.path.join(tmp, "pred0", "v%03d_recon.nii.gz" % i)).dataobj)
                        .transpose(2, 1, 0) for i in range(args.volumes)])
        print(json.dumps(dict(common, max_abs_recon_diff=float(np.abs(rec - logits[:, 0].numpy()).max()))))
        return
    import csv
    rows = list(csv.DictReader(open(os.path.join(tmp, "pred0", "predictions.csv"))))
    k = cfg["model"]["num_classes"]
    ours = np.array([[float(rw["prob_%d" % c]) for c in range(k)] for rw in rows])
    probs = torch.softmax(logits, 1).numpy()
    # logits up to each row's constant: log-probabilities compared
    lp_ours, lp_theirs = np.log(ours), torch.log_softmax(logits, 1).numpy()
    print(json.dumps(dict(common, max_abs_prob_diff=float(np.abs(ours - probs).max()),
                          max_abs_logprob_diff=float(np.abs(lp_ours - lp_theirs).max()))))


if __name__ == "__main__":
    main()

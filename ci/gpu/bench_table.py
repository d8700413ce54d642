#!/usr/bin/env python3
"""ci/gpu/bench_table.py OUT.md PYTORCH.jsonl VOXSCALE_STEP.json...: one config's side-by-side table from ci/gpu.sh's
bench step: voxscale's `bench step` results (one per TF32 setting) and bench/reference/ae3d.py's runs (eager and
torch.compile per TF32 setting, same batch; the JSON lines it prints as each run finishes, so runs finished before
a time limit stopped it still count), all from the same call on the same GPU. Writes OUT.md and prints the step's
key figure (one line). Exits 1 when a voxscale result lacks a PyTorch counterpart at its batch and TF32 in any of
the modes seen (or when there is no PyTorch result at all)."""
import json
import sys


def main():
    out_md, pt_path, *vx_paths = sys.argv[1:]
    vx = {}
    for p in vx_paths:
        try:
            r = json.load(open(p))
        except (OSError, ValueError) as e:
            print("no voxscale result: %s" % e)
            sys.exit(1)
        vx[r["tf32"]] = r
    if not vx:
        print("no voxscale result")
        sys.exit(1)
    try:
        with open(pt_path) as f:
            runs = [json.loads(l) for l in f if l.startswith("{")]
        runs = [r for r in runs if r.get("dtype", "fp32") == "fp32"]  # bf16/fp16 runs are amp_table.py's
    except OSError:
        runs = []
    if not runs:
        print("no PyTorch result in %s" % pt_path)
        sys.exit(1)
    pt = runs[0]
    by = {(r["tf32"], r["mode"]): r for r in runs}
    tf32s = sorted(vx, reverse=True)
    modes = [m for m in ("eager", "compile") if any((t, m) in by for t in tf32s)]
    problems = [t for t in tf32s if vx[t]["batch"] != pt["batch"] or not all((t, m) in by for m in modes)]
    first = vx[tf32s[0]]
    col = lambda t: "TF32 %s" % ("on" if t else "off")  # noqa: E731
    md = ["# %s: voxscale vs PyTorch, same GPU, same call" % first["config"], "",
          "| | " + " | ".join(col(t) for t in tf32s) + " |", "|---|" + "---|" * len(tf32s)]
    md.append("| voxscale step (median of %d) | " % first["iters"] +
              " | ".join("%.2f ms" % vx[t]["step_ms_median"] for t in tf32s) + " |")
    for m in modes:
        md.append("| PyTorch %s step (median of %d) | " % (m, pt["iters"]) +
                  " | ".join("%.2f ms" % by[(t, m)]["step_ms_median"] if (t, m) in by else "-" for t in tf32s) + " |")
    for m in modes:
        md.append("| voxscale speed-up over PyTorch %s | " % m +
                  " | ".join("%.2fx" % (by[(t, m)]["step_ms_median"] / vx[t]["step_ms_median"]) if (t, m) in by else "-"
                             for t in tf32s) + " |")
    md.append("| voxscale samples/s | " + " | ".join("%.2f" % vx[t]["samples_per_s"] for t in tf32s) + " |")
    md.append("| voxscale conv rate / ceiling | " + " | ".join(
        "%.1f / %.1f TFLOP/s" % (vx[t]["conv_gflops"] / 1e3, vx[t]["ceiling_gflops"] / 1e3) for t in tf32s) + " |")
    md.append("| peak memory: voxscale | " + " | ".join("%.0f MiB" % vx[t]["peak_memory_mib"] for t in tf32s) + " |")
    for m in modes:
        md.append("| peak memory: PyTorch %s | " % m + " | ".join(
            "%.0f MiB" % by[(t, m)]["peak_memory_mib"] if by.get((t, m), {}).get("peak_memory_mib") is not None
            else "-"
            for t in tf32s) + " |")
    if "compile" in modes:
        md.append("| torch.compile warm-up (compilation) | " + " | ".join(
            "%.0f s" % by[(t, "compile")]["warmup_s"] if (t, "compile") in by else "-" for t in tf32s) + " |")
    md += ["", "Batch %d of %s, fp32 (TF32 in convolutions as the column says). voxscale: %s, commit %s, timed with "
           "CUDA events; %s (cuDNN %s), wall clock around synchronized steps; one step = forward, L1+KL "
           "loss, backward, global-norm clip, AdamW. voxscale's peak memory counts its own allocations (arena, "
           "parameters, gradients, AdamW state); PyTorch's is torch.cuda.max_memory_allocated."
           % (first["batch"], "x".join(map(str, first["input_size"])), first["device_detail"], first["commit"],
              pt["framework"], pt.get("cudnn"))]
    if problems:
        md += ["", "Missing a PyTorch counterpart at the same batch and TF32 for: %s" % ", ".join(col(t) for t in problems)]
    with open(out_md, "w") as f:
        f.write("\n".join(md) + "\n")
    parts = []
    for t in tf32s:
        pts = ", ".join("%s %.2f" % (m, by[(t, m)]["step_ms_median"]) for m in modes if (t, m) in by)
        parts.append("%s: %.2f ms (PyTorch %s)" % (col(t), vx[t]["step_ms_median"], pts))
    peak_pt = [by[(tf32s[0], m)].get("peak_memory_mib") for m in modes if (tf32s[0], m) in by]
    parts.append("peak %.0f MiB (PyTorch %s)" % (vx[tf32s[0]]["peak_memory_mib"],
                                                 "/".join("%.0f" % p for p in peak_pt if p is not None) or "-"))
    if problems:
        parts.append("PyTorch incomplete for %s" % ", ".join(col(t) for t in problems))
    print("; ".join(parts))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

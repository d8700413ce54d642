#!/usr/bin/env bash
# bench/side_by_side.sh CONFIG [DEVICE]: times the training step of CONFIG in voxscale (bench step) and in the same
# model in PyTorch (bench/reference/ae3d.py for ae3d, MONAI's ResNet in bench/reference/resnet3d.py for resnet3d,
# bench/reference/vit3d_diffusion.py for vit3d_diffusion), one after the other on the same machine, and writes
# results/<device>/side_by_side_<config>.md. DEVICE is cpu (default) or cuda. VOXSCALE names another binary (a build of
# the parent commit, for the same-run comparison bench/alternate.sh makes); RESULTS another results folder.
# BF16=1 (cpu) adds the bf16 rows in the same run: voxscale --amp bf16 (bf16 math in the convolutions, on CPUs with
# AVX512-BF16 or AMX) and PyTorch's bf16 autocast, after the float32 pair, into the same Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:?usage: bench/side_by_side.sh CONFIG [cpu|cuda]}
device=${2:-cpu}
iters=${ITERS:-10}; warmup=${WARMUP:-2}
stem=$(basename "$config" .json)
# .venv has MONAI (ci/deps.sh) over the system Python, whose PyTorch both references use
python=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo /usr/bin/python3)}

log=$(mktemp); trap 'rm -f "$log"' EXIT  # private: other runs on the machine may be doing the same
"${VOXSCALE:-./build/voxscale}" bench step --config "$config" --device "$device" --iters "$iters" --warmup "$warmup" \
    --results "${RESULTS:-results}" > "$log"
ours=$(sed -n 's/^written: \(.*\)\/step_.*/\1/p' "$log")
# The same batch and the same convolution math (TF32 on or off) as the voxscale run just measured.
read -r batch tf32 < <("$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["batch"], r.get("tf32", 1))' "$ours/step_$stem.json")
family=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("model", {}).get("family", "ae3d"))' "$config")
reference=bench/reference/$family.py
[ -f "$reference" ] || { echo "side_by_side.sh: no PyTorch reference for model.family $family ($reference)" >&2; exit 2; }
"$python" "$reference" --config "$config" --bench --device "$device" --iters "$iters" --warmup "$warmup" \
    --batch-size "$batch" --tf32 "$tf32" --out "$ours/pytorch_step_$stem.json" > /dev/null
"$python" - "$ours/step_$stem.json" "$ours/pytorch_step_$stem.json" "$ours/side_by_side_$stem.md" <<'PY'
import json, sys
vx, pt = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
with open(sys.argv[3], "w") as f:
    f.write("# %s: voxscale vs PyTorch, same machine, same run\n\n" % vx["config"])
    f.write("| | voxscale (%s, %d threads) | %s (%d threads) |\n|---|---|---|\n" % (vx["backend"], vx["threads"], pt["framework"], pt["threads"]))
    f.write("| step time, median of %d | %.1f ms | %.1f ms |\n" % (vx["iters"], vx["step_ms_median"], pt["step_ms_median"]))
    f.write("| samples/s | %.3f | %.3f |\n" % (vx["samples_per_s"], pt["samples_per_s"]))
    if pt.get("peak_memory_mib") is not None:  # null on a CPU: CUDA's allocator statistics only
        f.write("| peak memory | %.0f MiB | %.0f MiB |\n" % (vx["peak_memory_mib"], pt["peak_memory_mib"]))
    f.write("| speed-up of voxscale | %.2fx | |\n\n" % (pt["step_ms_median"] / vx["step_ms_median"]))
    f.write("Both: batch %d, fp32 (TF32 in convolutions %s), one step = forward, the loss (%s), backward, "
            "global-norm clip, AdamW. Device: %s. Ceiling for voxscale: %s at %.1f GFLOP/s; voxscale reached %.1f GFLOP/s of "
            "%s. Commit %s.\n" % (vx["batch"], "on" if vx.get("tf32", 1) else "off", vx.get("loss", "L1+KL"),
                                  vx.get("device_detail", vx["device"]), vx["ceiling"], vx["ceiling_gflops"],
                                  vx.get("work_gflops", vx["conv_gflops"]),
                                  "the model's work (convolutions %.3f, GEMMs %.3f, attention %.3f GFLOP a step)" % (
                                      vx["conv_gflop_per_step"], vx["gemm_gflop_per_step"],
                                      vx["attention_gflop_per_step"]) if vx.get("gemm_gflop_per_step") else
                                  "convolution work", vx["commit"]))
print(open(sys.argv[3]).read())
PY
[ "${BF16:-0}" = 1 ] || exit 0
# bf16: voxscale in its own results folder (its JSON would replace the float32 one), then PyTorch's autocast
tmpres=$(mktemp -d); trap 'rm -f "$log"; rm -rf "$tmpres"' EXIT
"${VOXSCALE:-./build/voxscale}" bench step --config "$config" --device "$device" --iters "$iters" --warmup "$warmup" \
    --amp bf16 --results "$tmpres" > "$log"
cp "$(sed -n 's/^written: \(.*\)\/step_.*/\1/p' "$log")/step_$stem.json" "$ours/step_${stem}_bf16.json"
"$python" "$reference" --config "$config" --bench --device "$device" --iters "$iters" --warmup "$warmup" \
    --batch-size "$batch" --dtype bf16 --out "$ours/pytorch_step_${stem}_bf16.json" > /dev/null
"$python" - "$ours" "$stem" <<'PY'
import json, os, sys
d, stem = sys.argv[1], sys.argv[2]
r = {k: json.load(open(os.path.join(d, f))) for k, f in (("vx32", "step_%s.json" % stem), ("vx16", "step_%s_bf16.json" % stem),
                                                          ("pt32", "pytorch_step_%s.json" % stem), ("pt16", "pytorch_step_%s_bf16.json" % stem))}
md = os.path.join(d, "side_by_side_%s.md" % stem)
with open(md) as f:
    before = len(f.read())
with open(md, "a") as f:
    f.write("## bf16 (BF16=1), same run\n\n| | voxscale fp32 | voxscale bf16 math | PyTorch fp32 | PyTorch bf16 autocast |\n"
            "|---|---|---|---|---|\n")
    f.write("| step time, median | %.1f ms | %.1f ms | %.1f ms | %.1f ms |\n" % tuple(r[k]["step_ms_median"] for k in ("vx32", "vx16", "pt32", "pt16")))
    f.write("| bf16 over fp32 | | %.2fx | | %.2fx |\n" % (r["vx32"]["step_ms_median"] / r["vx16"]["step_ms_median"],
                                                        r["pt32"]["step_ms_median"] / r["pt16"]["step_ms_median"]))
    f.write("| voxscale bf16 over PyTorch bf16 | | %.2fx | | |\n\n" % (r["pt16"]["step_ms_median"] / r["vx16"]["step_ms_median"]))
    f.write("voxscale bf16: convolutions in bf16 math where measured faster than float32 (float32 storage, master "
            "weights and optimizer); %.1f GFLOP/s of convolution work against the same float32 ceiling.\n" % r["vx16"]["conv_gflops"])
print(open(md).read()[before:])
PY

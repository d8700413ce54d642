#!/usr/bin/env bash
# bench/side_by_side.sh CONFIG [DEVICE]: times the training step of CONFIG in voxscale (bench step) and in the same
# model in PyTorch (bench/reference/ae3d.py for ae3d, MONAI's ResNet in bench/reference/resnet3d.py for resnet3d,
# bench/reference/vit3d_diffusion.py for vit3d_diffusion), one after the other on the same machine, and writes
# results/<device>/side_by_side_<config>.md. DEVICE is cpu (default) or cuda. VOXSCALE names another binary (a build of
# the parent commit, for the same-run comparison bench/alternate.sh makes); RESULTS another results folder.
# BF16=1 (cpu) adds the bf16 rows in the same run: voxscale --amp bf16 (bf16 math in the convolutions, on CPUs with
# AVX512-BF16 or AMX, and in a transformer's GEMMs on AMX) and PyTorch's bf16 autocast, after the float32 pair, into
# the same Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:?usage: bench/side_by_side.sh CONFIG [cpu|cuda]}
device=${2:-cpu}
iters=${ITERS:-10}; warmup=${WARMUP:-2}
stem=$(basename "$config" .json)
# The PyTorch baselines: PYTHONS, space-separated Pythons, each timed eager and, where its torch has torch.compile
# and BEST is not 0, in its --best mode (torch.compile, channels_last_3d or fused SDPA, fused AdamW). Default: the
# bench venv's PyTorch 2.x from PyPI (.venv-bench, `make bench-venv`: what a user installs today) where it exists,
# then .venv (Debian's torch 1.13, with MONAI; ci/deps.sh). The first Python's eager run is pytorch_step_<config>.json
# (the one the report pages chart); every run is in pytorch_baselines_<config>.json and a column of the table.
if [ -z "${PYTHONS:-}" ]; then
    PYTHONS=""
    [ -x .venv-bench/bin/python ] && PYTHONS=".venv-bench/bin/python "
    PYTHONS+=$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo /usr/bin/python3)
fi
python=${PYTHON:-${PYTHONS%% *}}  # for the scripts below

log=$(mktemp); trap 'rm -f "$log"' EXIT  # private: other runs on the machine may be doing the same
"${VOXSCALE:-./build/voxscale}" bench step --config "$config" --device "$device" --iters "$iters" --warmup "$warmup" \
    --results "${RESULTS:-results}" --overwrite > "$log"
ours=$(sed -n 's/^written: \(.*\)\/step_.*/\1/p' "$log")
# The same batch and the same convolution math (TF32 on or off) as the voxscale run just measured.
read -r batch tf32 < <("$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["batch"], r.get("tf32", 1))' "$ours/step_$stem.json")
family=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("model", {}).get("family", "ae3d"))' "$config")
reference=bench/reference/$family.py
[ -f "$reference" ] || { echo "side_by_side.sh: no PyTorch reference for model.family $family ($reference)" >&2; exit 2; }
# under an ISA cap, torch.compile's disk cache is one of the cap's own (bench/isa_env.py says why); set once for
# every reference run below
inductor_cache=$(python3 bench/isa_env.py --inductor-cache)
[ -z "$inductor_cache" ] || export TORCHINDUCTOR_CACHE_DIR="$inductor_cache"
runs=()
n=0
for py in $PYTHONS; do
    modes=eager
    if [ "${BEST:-1}" != 0 ] && "$py" -c 'import sys, torch; sys.exit(0 if hasattr(torch, "compile") else 1)' 2>/dev/null; then
        modes="eager best"
    fi
    for mode in $modes; do
        n=$((n + 1))
        out=$ours/.pytorch_run_${stem}_$n.json
        echo "side_by_side.sh: $py ($("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)), $mode" >&2
        "$py" "$reference" --config "$config" --bench --device "$device" --iters "$iters" --warmup "$warmup" \
            --batch-size "$batch" --tf32 "$tf32" $([ $mode = best ] && echo --best) --out "$out" > /dev/null
        runs+=("$out")
        [ $n = 1 ] && cp "$out" "$ours/pytorch_step_$stem.json"
    done
done
"$python" - "$ours/step_$stem.json" "$ours/pytorch_baselines_$stem.json" "$ours/side_by_side_$stem.md" "${runs[@]}" <<'PY'
import json, os, sys
vx = json.load(open(sys.argv[1]))
pts = [json.load(open(f)) for f in sys.argv[4:]]
for f in sys.argv[4:]:
    os.remove(f)
# What holds PyTorch below the CPU's own ISA (the AVX2 type approximated on an AVX-512 CPU): recorded with its runs,
# since nothing in torch's own output says so.
sys.path.insert(0, "bench")  # run from the repository's root
import isa_env  # noqa: E402  (bench/isa_env.py)
caps = isa_env.current()
if caps:
    for p in pts:
        p["isa_env"] = caps
    first = os.path.join(os.path.dirname(sys.argv[1]), "pytorch_" + os.path.basename(sys.argv[1]))
    with open(first, "w") as f:  # pytorch_step_<config>.json: the first run, as copied before, with isa_env
        json.dump(pts[0], f, indent=1)
        f.write("\n")
with open(sys.argv[2], "w") as f:
    json.dump(pts, f, indent=1)
    f.write("\n")
def name(pt):
    return "%s, %s (%d threads)" % (pt["framework"].replace("pytorch", "PyTorch"), pt.get("mode", "eager"), pt["threads"])
with open(sys.argv[3], "w") as f:
    f.write("# %s: voxscale vs PyTorch, same machine, same run\n\n" % vx["config"])
    f.write("| | voxscale (%s, %d threads) | %s |\n|---|---|%s\n" % (vx["backend"], vx["threads"],
                                                             " | ".join(name(p) for p in pts), "---|" * len(pts)))
    f.write("| step time, median of %d | %.1f ms | %s |\n" % (vx["iters"], vx["step_ms_median"],
                                                            " | ".join("%.1f ms" % p["step_ms_median"] for p in pts)))
    f.write("| samples/s | %.3f | %s |\n" % (vx["samples_per_s"], " | ".join("%.3f" % p["samples_per_s"] for p in pts)))
    if all(p.get("peak_memory_mib") is not None for p in pts):  # null on a CPU: CUDA's allocator statistics only
        f.write("| peak memory | %.0f MiB | %s |\n" % (vx["peak_memory_mib"],
                                                      " | ".join("%.0f MiB" % p["peak_memory_mib"] for p in pts)))
    f.write("| voxscale's speed-up over it | | %s |\n\n" % " | ".join(
        "%.2fx" % (p["step_ms_median"] / vx["step_ms_median"]) for p in pts))
    f.write("All: batch %d, fp32 (TF32 in convolutions %s), one step = forward, the loss (%s), backward, "
            "global-norm clip, AdamW. Device: %s; ISA level %s. Ceiling for voxscale: %s at %.1f GFLOP/s; voxscale "
            "reached %.1f GFLOP/s of %s. Commit %s.\n" % (
                vx["batch"], "on" if vx.get("tf32", 1) else "off", vx.get("loss", "L1+KL"),
                vx.get("device_detail", vx["device"]), vx.get("isa", "?"), vx["ceiling"], vx["ceiling_gflops"],
                vx.get("work_gflops", vx["conv_gflops"]),
                "the model's work (convolutions %.3f, GEMMs %.3f, attention %.3f GFLOP a step)" % (
                    vx["conv_gflop_per_step"], vx["gemm_gflop_per_step"], vx["attention_gflop_per_step"])
                if vx.get("gemm_gflop_per_step") else "convolution work", vx["commit"]))
    if caps:
        f.write("PyTorch's ISA held by the environment: %s.\n" % isa_env.describe(caps, ", "))
    best = [p for p in pts if p.get("mode", "eager") != "eager"]
    if best:
        f.write("PyTorch's best mode: %s; its warm-up (compilation) took %s s and is not in the step time.\n" % (
            best[0]["mode"], ", ".join("%.0f" % p.get("warmup_s", 0) for p in best)))
print(open(sys.argv[3]).read())
PY
[ "${BF16:-0}" = 1 ] || exit 0
# bf16: voxscale in its own results folder (its JSON would replace the float32 one), then PyTorch's autocast
tmpres=$(mktemp -d); trap 'rm -f "$log"; rm -rf "$tmpres"' EXIT
"${VOXSCALE:-./build/voxscale}" bench step --config "$config" --device "$device" --iters "$iters" --warmup "$warmup" \
    --amp bf16 --results "$tmpres" > "$log"
# the bf16 JSON in the device folder's bf16/ (a section of its own in docs/measured.md; the charts are float32's)
mkdir -p "$ours/bf16"
cp "$(sed -n 's/^written: \(.*\)\/step_.*/\1/p' "$log")/step_$stem.json" "$ours/bf16/step_${stem}_bf16.json"
# what the bf16 run computed in bf16 (its precision line: convolutions where measured faster, a transformer's GEMMs
# where the CPU has AMX) for the table's note
precision=$(sed -n 's/^precision: //p' "$log" | head -1)
"$python" "$reference" --config "$config" --bench --device "$device" --iters "$iters" --warmup "$warmup" \
    --batch-size "$batch" --dtype bf16 --out "$ours/bf16/pytorch_step_${stem}_bf16.json" > /dev/null
"$python" - "$ours" "$stem" "$precision" <<'PY'
import json, os, sys
d, stem, precision = sys.argv[1], sys.argv[2], sys.argv[3]
r = {k: json.load(open(os.path.join(d, f))) for k, f in (("vx32", "step_%s.json" % stem), ("vx16", "bf16/step_%s_bf16.json" % stem),
                                                          ("pt32", "pytorch_step_%s.json" % stem), ("pt16", "bf16/pytorch_step_%s_bf16.json" % stem))}
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
    f.write("voxscale bf16 (its precision line): %s." % precision.rstrip("."))
    if r["vx16"].get("conv_gflops"):
        f.write(" %.1f GFLOP/s of convolution work against the same float32 ceiling." % r["vx16"]["conv_gflops"])
    f.write("\n")
print(open(md).read()[before:])
PY

#!/usr/bin/env bash
# bench/side_by_side.sh CONFIG [DEVICE]: times the training step of CONFIG in voxscale (bench step) and in the same
# model in PyTorch (bench/reference/ae3d.py), one after the other on the same machine, and writes
# results/<device>/side_by_side_<config>.md. DEVICE is cpu (default) or cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:?usage: bench/side_by_side.sh CONFIG [cpu|cuda]}
device=${2:-cpu}
iters=${ITERS:-10}; warmup=${WARMUP:-2}
stem=$(basename "$config" .json)
python=${PYTHON:-/usr/bin/python3}

./build/voxscale bench step --config "$config" --device "$device" --iters "$iters" --warmup "$warmup" > /tmp/vx_side.log
ours=$(sed -n 's/^written: \(.*\)\/step_.*/\1/p' /tmp/vx_side.log)
"$python" bench/reference/ae3d.py --config "$config" --bench --device "$device" --iters "$iters" --warmup "$warmup" \
    --out "$ours/pytorch_step_$stem.json" > /dev/null
"$python" - "$ours/step_$stem.json" "$ours/pytorch_step_$stem.json" "$ours/side_by_side_$stem.md" <<'PY'
import json, sys
vx, pt = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
with open(sys.argv[3], "w") as f:
    f.write("# %s: voxscale vs PyTorch, same machine, same run\n\n" % vx["config"])
    f.write("| | voxscale (%s, %d threads) | %s (%d threads) |\n|---|---|---|\n" % (vx["backend"], vx["threads"], pt["framework"], pt["threads"]))
    f.write("| step time, median of %d | %.1f ms | %.1f ms |\n" % (vx["iters"], vx["step_ms_median"], pt["step_ms_median"]))
    f.write("| samples/s | %.3f | %.3f |\n" % (vx["samples_per_s"], pt["samples_per_s"]))
    f.write("| speed-up of voxscale | %.2fx | |\n\n" % (pt["step_ms_median"] / vx["step_ms_median"]))
    f.write("Both: batch %d, fp32, one step = forward, L1+KL loss, backward, global-norm clip, AdamW. Device: %s. "
            "Ceiling for voxscale: sgemm 2048^3 at %.1f GFLOP/s on the same BLAS; voxscale reached %.1f GFLOP/s "
            "of convolution work. Commit %s.\n" % (vx["batch"], vx["device"], vx["ceiling_sgemm_2048_gflops"],
                                                    vx["conv_gflops"], vx["commit"]))
print(open(sys.argv[3]).read())
PY

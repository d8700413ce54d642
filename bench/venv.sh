#!/usr/bin/env bash
# bench/venv.sh (make bench-venv): .venv-bench, the PyTorch a user installs today (2.x from PyPI, with MONAI for the
# resnet3d reference) and torchvision, for the side-by-side benchmarks (bench/side_by_side.sh takes it first when it exists). Outside
# the test path: the tests' references are Debian's torch in .venv (ci/deps.sh), and this venv is ~5.5 GB (PyPI's
# torch wheel brings CUDA's libraries, which a CPU run loads but never uses). Nothing is done when it is there with
# these versions already. TORCH_VERSION, MONAI_VERSION choose others.
set -euo pipefail
cd "$(dirname "$0")/.."
want="torch==${TORCH_VERSION:-2.15.0} numpy monai==${MONAI_VERSION:-1.6.1}"
stamp=.venv-bench/.voxscale-bench
# torchvision (the chest X-ray loader's baseline, bench/reference/cxr_loader.py: PIL decode and torchvision's Resize
# in a DataLoader) and Pillow, installed on their own so that adding them keeps an existing venv's torch
extras="torchvision==${TORCHVISION_VERSION:-0.29.2} pillow"
extras_stamp=.venv-bench/.voxscale-bench-extras
install_extras() {
    if [ ! -f "$extras_stamp" ] || [ "$(cat "$extras_stamp")" != "$extras" ]; then
        # --no-deps: torchvision's own torch requirement must not move the torch above
        .venv-bench/bin/pip install -q --disable-pip-version-check --no-deps $extras
        echo "$extras" > "$extras_stamp"
    fi
}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    install_extras
    echo "bench-venv: .venv-bench has $want $extras"
    exit 0
fi
echo "bench-venv: creating .venv-bench with $want (a few GB from PyPI)"
rm -rf .venv-bench
/usr/bin/python3 -m venv .venv-bench
read -r torch numpy monai <<<"$want"
.venv-bench/bin/pip install -q --disable-pip-version-check "$torch" "$numpy"
# MONAI without its dependencies: its networks need torch and numpy only (the versions above)
.venv-bench/bin/pip install -q --disable-pip-version-check --no-deps "$monai"
.venv-bench/bin/python -c 'import torch, monai; print("bench-venv: PyTorch", torch.__version__, "MONAI", monai.__version__)'
echo "$want" > "$stamp"
install_extras

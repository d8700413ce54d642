#!/usr/bin/env bash
# ci/deps.sh: installs what voxscale needs to build and test on a fresh Debian 12 machine, and nothing when it
# is all there already (so `make run` and `make test` can call it every time).
#   Debian packages: compiler, cJSON, OpenBLAS, cmocka, protobuf-c, libpng, zlib, PyTorch (the reference model),
#                    clang with libFuzzer and its OpenMP runtime (the fuzz targets), Open MPI (CPU ranks),
#                    libnifti (NIfTI volumes) and nibabel (the tests' reference reader), scikit-learn (AUROC's
#                    reference), pandas, wrapt and astor (what lifelines, below, imports), matplotlib (the
#                    benchmark reports' charts, bench/report), chromium (headless: the report page's test) and
#                    slurm-wlm with munge (a one-node Slurm that tests/integration/test_slurm.py starts),
#                    libjpeg-turbo (JPEG images through its TurboJPEG API; djpeg and cjpeg, the tests' reference
#                    decoder and encoder), Pillow (the tests' CMYK JPEGs and PNG images) and pytest-xdist (ci/test.sh
#                    spreads the integration tests over the cores)
#   .venv: a virtual environment over the system Python (so it sees Debian's torch) with pytest, tensorboard and
#          safetensors (the reference reader and writer the weights files are checked against),
#          and MONAI and lifelines without their dependencies (resnet3d's and Harrell's C's references), and
#          accelerate without its own (its launch CLI, tests/integration/test_launchers.py)
#   .venv-launchers: a second one over the system Python with DeepSpeed's launcher (`deepspeed`, tests/integration/
#          test_real_launchers.py): DeepSpeed imports pydantic 2, which needs a newer typing_extensions than Debian's;
#          kept apart so the tests' references (Debian's torch, MONAI, tensorboard in .venv) run on what Debian ships
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential pkg-config libcjson-dev libopenblas-dev libcmocka-dev protobuf-c-compiler
              libprotobuf-c-dev libpng-dev zlib1g-dev python3-venv python3-torch python3-numpy
              clang libclang-rt-14-dev libomp-dev openmpi-bin libopenmpi-dev libnifti2-dev python3-nibabel
              python3-sklearn python3-pandas python3-wrapt python3-astor python3-matplotlib libdnnl-dev valgrind
              python3-psutil python3-yaml slurm-wlm munge libturbojpeg0-dev libjpeg-turbo-progs python3-pil
              python3-pytest-xdist)
# Headless Chromium for the report page's test: Debian's chromium is the browser itself; Ubuntu's is a stub that
# installs a snap, which containers (the test image on NVIDIA's Ubuntu) cannot run, so there the test skips and says so.
if grep -q '^ID=debian' /etc/os-release 2>/dev/null; then APT_PACKAGES+=(chromium); fi
PIP_PACKAGES=(pytest tensorboard safetensors==0.8.0)
# installed without their dependencies, so pip keeps Debian's torch and numpy: MONAI (resnet3d's reference,
# tests/integration/test_monai.py; 1.3.2 runs on torch 1.13)
# lifelines (Harrell's C's reference, tests/integration/test_metrics.py and test_val_metrics.py) and the packages its
# import needs that Debian lacks (autograd, autograd-gamma, formulaic and interface-meta; lifelines 0.27.8 and formulaic
# 0.6.6 run on Debian's pandas 1.5)
# accelerate (its real `accelerate launch` CLI, tests/integration/test_launchers.py; 0.21.0 runs on torch 1.13, and
# what it imports: numpy, psutil and pyyaml are Debian's, packaging comes with pytest)
PIP_NODEPS=(monai==1.3.2 lifelines==0.27.8 autograd==1.7.0 autograd-gamma==0.5.0 formulaic==0.6.6 interface-meta==1.3.0
            accelerate==0.21.0)

# DeepSpeed 0.19.8 from its source (pure Python without its ops: DS_BUILD_OPS is 0 by default; its setup.py imports
# Debian's torch, hence --no-build-isolation) and exactly what `import deepspeed` needs, without their dependencies
LAUNCHER_NODEPS=(typing_extensions==4.16.0 hjson==3.1.0 py-cpuinfo==9.0.0 tqdm==4.70.1 pydantic==2.14.4
                 pydantic_core==2.50.5 typing-inspection==0.4.5 annotated-types==0.8.0 einops==0.8.2 msgpack==1.2.4
                 deepspeed==0.19.8)

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing Debian packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=.venv/.voxscale-deps
want="${PIP_PACKAGES[*]} ${PIP_NODEPS[*]}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "deps: creating .venv (system site packages) with: $want"
    /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install -q --disable-pip-version-check "${PIP_PACKAGES[@]}"
    .venv/bin/pip install -q --disable-pip-version-check --no-deps "${PIP_NODEPS[@]}"
    echo "$want" > "$stamp"
fi

stamp=.venv-launchers/.voxscale-deps
want="${LAUNCHER_NODEPS[*]}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "deps: creating .venv-launchers (system site packages) with: $want"
    /usr/bin/python3 -m venv --system-site-packages .venv-launchers
    # --ignore-installed: pip would otherwise keep Debian's older typing_extensions, which pydantic_core cannot import
    .venv-launchers/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation --ignore-installed \
        "${LAUNCHER_NODEPS[@]}"
    echo "$want" > "$stamp"
fi

#!/usr/bin/env bash
# ci/gpu/prepare.sh (ci/gpu.sh --prepare): on a machine with nvcc (no GPU needed), builds what ci/gpu.sh runs on a
# GPU machine and packs it, with the shared libraries such a machine likely lacks, into one archive to carry there:
#   $VX_GPU_DIR/voxscale-gpu.tar.gz (default build/gpu/): stage/voxscale, stage/tests/<the GPU unit tests>,
#     stage/lib/ (libcjson, OpenBLAS with libgfortran and libquadmath, protobuf-c, libpng, cmocka: whatever ldd
#     resolves outside the system set and the CUDA libraries), stage/lib-common/ (zlib, libgomp: used there only
#     when missing), stage/prepare.json (commit, flags, where each CUDA library was found)
#   $VX_GPU_DIR/prepare.json, the same record beside it
# The build: CUDA=1 and ARCH=-march=x86-64-v3 (AVX2/FMA: every H100/H200 host has them; -march=native here may
# emit AVX-512 the GPU machine's CPU lacks), objects in $VX_GPU_OBJ (default build/gpu-obj). CUDA_HOME,
# CUDNN_HOME, CUPTI_HOME, CUBLAS_HOME and NVIDIA_PYTHON pass through to make (mk/detect/cuda.mk). Last, the
# archive is unpacked into a scratch dir and every binary's ldd must resolve through ci/gpu/libpath.sh's library
# path alone: the check the GPU machine repeats first. The NVIDIA libraries themselves (libcuda, cuDNN, CUPTI,
# cuBLAS, NCCL) are not carried: the GPU machine has them, and they are far beyond the carry limit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. ci/gpu/libpath.sh

OBJ=${VX_GPU_OBJ:-build/gpu-obj}
DIR=${VX_GPU_DIR:-build/gpu}
ARCH=${ARCH:--march=x86-64-v3}
GPU_TESTS=(test_backend_ops test_cuda_backend test_trace test_cudnn_descriptors test_comm_nccl test_attention
           test_attention_cudnn test_gemm_lt) # the unit tests with GPU paths (test_attention: --dump for test_attention_cuda.py)

command -v ldd >/dev/null || { echo "gpu.sh --prepare: ldd is needed to gather libraries" >&2; exit 2; }
t0=$EPOCHREALTIME
echo "== build: make CUDA=1 MPI=0 ARCH=$ARCH BUILD=$OBJ"
# relinked every time: make does not track link flags, and the RUNPATH must be this run's library dirs
rm -f "$OBJ/voxscale" "${GPU_TESTS[@]/#/$OBJ/tests/}"
# MPI=0: the GPU machine has no Open MPI (its ranks start with train --gpus, or torchrun), and carrying it with its
# plugins would cost more than the 64 MiB the device tool carries
make --no-print-directory -s -j"$(nproc)" CUDA=1 MPI=0 ARCH="$ARCH" BUILD="$OBJ" all \
    "${GPU_TESTS[@]/#/$OBJ/tests/}"
cuda_info=$(make --no-print-directory -s CUDA=1 MPI=0 BUILD="$OBJ" cuda-info)
printf '%s\n' "$cuda_info"
# the versions the build was compiled against, as the binary says them: what ci/gpu.sh's driver check compares the
# GPU machine's driver and libraries with
built_line=$("$OBJ/voxscale" detect --device cpu --config configs/test/tiny.json 2>&1 | sed -n '/^cuda: built in/p') || true
built=$(python3 ci/gpu/driver_check.py --parse-detect "$built_line")
[ "$built" != null ] || { echo "gpu.sh --prepare: cannot read the build's CUDA versions from: $built_line" >&2; exit 1; }
echo "built with: ${built_line#*built with }"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
stage=$scratch/stage
mkdir -p "$stage/tests" "$stage/lib" "$stage/lib-common"
cp "$OBJ/voxscale" "$stage/"
for t in "${GPU_TESTS[@]}"; do cp "$OBJ/tests/$t" "$stage/tests/"; done
# MONAI (pure Python) for the resnet3d step's baseline: the GPU machine has PyTorch but no package index
monai_dir=$(.venv/bin/python -c 'import monai, os; print(os.path.dirname(monai.__file__))' 2>/dev/null || true)
if [ -n "$monai_dir" ]; then
    mkdir -p "$stage/python" && cp -r "$monai_dir" "$stage/python/"
    find "$stage/python" -name __pycache__ -prune -exec rm -rf {} +
else
    echo "gpu.sh --prepare: no MONAI in .venv (ci/deps.sh installs it); the resnet3d step's MONAI baseline will be owed"
fi

echo "== gathering the shared libraries the GPU machine may lack"
declare -A seen=()
gathered=()
while read -r name path; do
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    [[ $VX_SYSTEM_LIBS == *" $name "* ]] && continue
    [[ $name =~ $VX_CUDA_LIB_RE ]] && continue
    if [ "$path" = "not" ]; then
        echo "gpu.sh --prepare: $name is not found here either; install it (ci/deps.sh) first" >&2
        exit 1
    fi
    dest=lib
    [[ $VX_COMMON_LIBS == *" $name "* ]] && dest=lib-common
    cp -L "$path" "$stage/$dest/$name"
    gathered+=("$dest/$name")
done < <(ldd "$stage/voxscale" "$stage"/tests/* | awk '/=>/ {print $1, $3}' | sort -u)
for g in "${gathered[@]}"; do printf '  %-30s %6.1f MiB\n' "$g" "$(du -bL "$stage/$g" | awk '{print $1 / 1048576}')"; done

commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
changes=$(git status --porcelain 2>/dev/null || true) # whole, not piped into grep -q (pipefail: its SIGPIPE)
dirty=$([ -n "$changes" ] && grep -qv '^??' <<<"$changes" && echo true || echo false)
/usr/bin/env python3 - "$stage/prepare.json" "$commit" "$dirty" "$ARCH" "$cuda_info" "$built" "${gathered[@]}" <<'PY'
import json, platform, socket, sys, time
out, commit, dirty, arch, cuda_info, built, *libs = sys.argv[1:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
json.dump({"commit": commit, "dirty": dirty == "true", "prepared": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "host": socket.gethostname(), "host_cpu": cpu, "machine": platform.machine(), "arch": arch,
           "cuda": cuda_info.splitlines(), "built": json.loads(built), "libs": libs}, open(out, "w"), indent=2)
PY

rm -rf "$DIR"
mkdir -p "$DIR"
tar -C "$scratch" -czf "$DIR/voxscale-gpu.tar.gz" stage
cp "$stage/prepare.json" "$DIR/"

echo "== check: the archive's binaries find every library through the library path the GPU machine will use"
check=$scratch/check
mkdir -p "$check"
tar -C "$check" -xzf "$DIR/voxscale-gpu.tar.gz"
path=$(vx_lib_path "$check/stage")
echo "LD_LIBRARY_PATH=$path"
vx_ldd_check "$path" "$check/stage/voxscale" "$check"/stage/tests/*

carried=$(du -cb "$DIR"/* | tail -1 | cut -f1)
unpacked=$(du -sb "$check/stage" | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | awk '$2 == "total" {t += $1} END {print t + 0}')
awk -v c="$carried" -v u="$unpacked" -v t="$tree" -v d="$DIR" -v s="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {print b - a}')" 'BEGIN {
    printf "prepared in %.0f s: %s holds %.1f MiB (%.1f MiB unpacked); with the tracked tree (%.1f MiB) the device tool carries %.1f of its 64 MiB\n",
           s, d, c / 1048576, u / 1048576, t / 1048576, (c + t) / 1048576 }'
echo "next: with the device tool, run(command=\"VX_CONV_LOG=1 bash ci/gpu.sh --first --only driver,libs,detect\", carry=[\"$DIR\"]), then the calls 'bash ci/gpu.sh --first --plan' prints; on a GPU machine: bash ci/gpu.sh"

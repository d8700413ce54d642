#!/usr/bin/env bash
# tests/tools/gpu/build_not_silent.sh SCRATCH: a CUDA-capable tree never builds CPU-only in silence. With nvcc present
# and cuDNN nowhere to be found (a toolkit without it, no nvidia-* wheels), `make` must stop with exit code 2 and one
# message saying what is missing and what to set (CUDNN_HOME, or CUDA=0); CUDA=0 must build CPU-only quietly; a
# CUDNN_HOME without cuDNN must be named; a CUDA_ARCHS that is not a list of compute capabilities stops the build
# (exit 2, named), and a good one makes one gencode each plus the last one's PTX. Uses `make -n` (nothing is compiled)
# on the toolkit copy tests/tools/pip_layout.py makes (nvcc works there, cuDNN and its friends are moved out).
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
scratch=${1:?usage: build_not_silent.sh SCRATCH_DIR}
rm -rf "$scratch"
mkdir -p "$scratch"
scratch=$(cd "$scratch" && pwd) # absolute: the paths the build records are compared below
fail() { echo "FAIL: $*"; exit 1; }
python3 tests/tools/pip_layout.py "$scratch/layout" >/dev/null || exit 1
tk=$scratch/layout/toolkit

out=$(make -n BUILD="$scratch/b" CUDA_HOME="$tk" NVIDIA_PYTHON=/bin/false all 2>&1)
rc=$?
[ $rc = 2 ] || fail "nvcc without cuDNN: make exited $rc, not 2: $(tail -3 <<<"$out")"
msg=$(grep -- '\*\*\*' <<<"$out")
for want in "nvcc is at $tk/bin/nvcc" "cudnn cupti cublas cannot be found" "CUDNN_HOME" "CUDA=0"; do
    grep -qF -- "$want" <<<"$msg" || fail "the message lacks '$want': $msg"
done
echo "nvcc without cuDNN: exit 2: ${msg:0:160}..."

out=$(make -n BUILD="$scratch/b" CUDA=0 CUDA_HOME="$tk" NVIDIA_PYTHON=/bin/false all 2>&1) || fail "CUDA=0: $out"
grep -q 'nvcc\|DVX_CUDA' <<<"$out" && fail "CUDA=0 still compiles CUDA code"
echo "CUDA=0: a CPU-only build, no message"

out=$(make -n BUILD="$scratch/b" CUDNN_HOME="$scratch/nowhere" all 2>&1)
rc=$?
[ $rc = 2 ] && grep -qF "CUDNN_HOME=$scratch/nowhere has no include/cudnn.h" <<<"$out" ||
    fail "a CUDNN_HOME without cuDNN: exit $rc: $out"
echo "CUDNN_HOME without cuDNN: exit 2, named"

out=$(make -n BUILD="$scratch/b" CUDA=1 CUDA_HOME="$scratch/nowhere" NVIDIA_PYTHON=/bin/false all 2>&1)
[ $? = 2 ] && grep -qF "CUDA=1 was asked for but nvcc (no $scratch/nowhere/bin/nvcc: set CUDA_HOME)" <<<"$out" ||
    fail "CUDA=1 without nvcc: $out"
echo "CUDA=1 without nvcc: exit 2, named"
for bad in "sm_90" "80,90" ""; do
    out=$(make -n BUILD="$scratch/b" CUDA_ARCHS="$bad" all 2>&1)
    [ $? = 2 ] && grep -qF "CUDA_ARCHS=\"$bad\" is not a list of compute capabilities" <<<"$out" ||
        fail "CUDA_ARCHS=\"$bad\": $(tail -3 <<<"$out")"
done
out=$(make -n BUILD="$scratch/b" CUDA_ARCHS="80 86 90" "$scratch/b/kernels/gelu/gelu_cuda.cu.o" 2>&1) ||
    fail "CUDA_ARCHS=\"80 86 90\": $(tail -3 <<<"$out")"
[ "$(grep -o -- '-gencode [^ ]*' <<<"$out" | tr '\n' ' ')" = "-gencode arch=compute_80,code=sm_80 -gencode \
arch=compute_86,code=sm_86 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 " ] ||
    fail "CUDA_ARCHS=\"80 86 90\" compiles with: $(grep -o -- '-gencode [^ ]*' <<<"$out" | tr '\n' ' ')"
echo "CUDA_ARCHS: a bad list stops with exit 2, named; \"80 86 90\" makes sm_80, sm_86, sm_90 and PTX 9.0"
echo "ok: a CUDA-capable tree without cuDNN stops the build and says what to set; CUDA=0 builds CPU-only"

#!/usr/bin/env bash
# tests/tools/gpu/prepare_pip.sh SCRATCH: `ci/gpu.sh --prepare` against a machine laid out like the lent GPU
# device, whose cuDNN, CUPTI, cuBLAS and NCCL come from Python's nvidia-* wheels: this machine's CUDA files arranged
# by tests/tools/pip_layout.py (versioned sonames only, headers outside CUDA_HOME, found through a python's
# `import nvidia`), with CUDA_HOME a toolkit without them. Then, on the archive it made (not on the build tree):
#   - every binary resolves every library through the library path ci/gpu.sh sets there, cuDNN from the wheel
#     layout and the gathered libraries (libcjson, OpenBLAS, ...) from the archive, not from this machine; CUPTI and
#     cuBLAS, loaded with dlopen when first used, are not linked and load from the wheel layout through that path;
#   - the RUNPATH names the directories the libraries were found in, not /usr/local/cuda;
#   - test_cudnn_descriptors from the archive runs against the wheel layout's cuDNN and passes;
#   - its voxscale reports the device code it was built with (CUDA_ARCHS=90 here: "sm_90, PTX");
#   - with libcjson taken out of the archive's lib/, the check fails and names it (the check can fail).
# Prints what it checked; exit 0 when all hold.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
scratch=${1:?usage: prepare_pip.sh SCRATCH_DIR}
# everything but the objects, which a rerun at the same path reuses (their dependencies are the same files)
mkdir -p "$scratch"
scratch=$(cd "$scratch" && pwd) # absolute: the paths the build records are compared below
find "$scratch" -mindepth 1 -maxdepth 1 ! -name obj -exec rm -rf {} +
python3 tests/tools/pip_layout.py "$scratch/layout" || exit 1
site=$scratch/layout/site-packages
export CUDA_HOME=$scratch/layout/toolkit
export NVIDIA_PYTHON="env PYTHONPATH=$site /usr/bin/python3"
# Device code for sm_90 alone (the Makefile's CUDA_ARCHS): this check is about where the libraries are found, which
# no gencode changes, and each .cu then compiles its device code once instead of twice plus PTX. The build must
# report the list it was given (below).
export CUDA_ARCHS=90
fail() { echo "FAIL: $*"; exit 1; }

VX_GPU_OBJ=$scratch/obj VX_GPU_DIR=$scratch/carry bash ci/gpu.sh --prepare >"$scratch/prepare.log" 2>&1 ||
    { tail -30 "$scratch/prepare.log"; fail "ci/gpu.sh --prepare against the wheel layout"; }
grep -E '^(cudnn|cupti|cublas):|^ldd |^prepared in' "$scratch/prepare.log"
grep -q "^cudnn: $site/nvidia/cudnn/lib (-l:libcudnn.so.9)" "$scratch/prepare.log" ||
    fail "cuDNN was not found in the wheel layout, or not linked by its versioned name"

mkdir -p "$scratch/unpacked"
tar -C "$scratch/unpacked" -xzf "$scratch/carry/voxscale-gpu.tar.gz" || fail "cannot unpack the archive"
stage=$scratch/unpacked/stage
. ci/gpu/libpath.sh
path=$(vx_lib_path "$stage")
vx_ldd_check "$path" "$stage/voxscale" "$stage"/tests/* || fail "the archive's binaries do not resolve every library"
LD_LIBRARY_PATH=$path ldd "$stage/voxscale" >"$scratch/ldd.txt"
grep -q "libcudnn.so.9 => $site/nvidia/cudnn/lib/libcudnn.so.9" "$scratch/ldd.txt" || fail "cuDNN not from the wheel layout"
# CUPTI and cuBLAS are loaded when first used (dlopen), not linked: absent from ldd, found through the same path
! grep -q "libcupti\|libcublas" "$scratch/ldd.txt" || fail "the binary links CUPTI or cuBLAS: $(grep 'libcupti\|libcublas' "$scratch/ldd.txt")"
for lib in libcupti.so.13 libcublas.so.13; do
    # the path the loader found it by (the layout's files link this machine's: /proc/self/maps would name those)
    where=$(LD_DEBUG=libs LD_LIBRARY_PATH=$path /usr/bin/python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' \
        "$lib" 2>&1 | sed -n "s|.*calling init: \(.*/$lib\)\$|\1|p" | head -1)
    [ "$where" = "$site/nvidia/cu13/lib/$lib" ] || fail "$lib loads from '$where', not the wheel layout"
done
grep -q "libnccl.so.2 => $site/nvidia/nccl/lib/libnccl.so.2" "$scratch/ldd.txt" || fail "NCCL not from the wheel layout"
grep -q "libcjson.so.1 => $stage/lib/libcjson.so.1" "$scratch/ldd.txt" || fail "libcjson not from the archive"
grep -q "libopenblas.so.0 => $stage/lib/libopenblas.so.0" "$scratch/ldd.txt" || fail "OpenBLAS not from the archive"
runpath=$(readelf -d "$stage/voxscale" | sed -n 's/.*RUNPATH.*\[\(.*\)\]/\1/p')
[ "$runpath" = "$CUDA_HOME/lib64:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$site/nvidia/nccl/lib" ] ||
    fail "RUNPATH is '$runpath', not the toolkit's lib64 and the wheel dirs cuDNN, CUPTI, cuBLAS and NCCL were found in"
echo "RUNPATH: $runpath"

LD_LIBRARY_PATH=$path "$stage/tests/test_cudnn_descriptors" >"$scratch/descriptors.log" 2>&1 ||
    { tail -20 "$scratch/descriptors.log"; fail "test_cudnn_descriptors from the archive, on the wheel layout's cuDNN"; }
echo "test_cudnn_descriptors from the archive: $(grep -h 'PASSED' "$scratch/descriptors.log")"

# the build says which device code it carries: CUDA_ARCHS=90 above, where a default build says (sm_80, sm_90, PTX)
archs=$(LD_LIBRARY_PATH=$path "$stage/voxscale" detect --device cpu --config configs/test/tiny.json 2>&1 |
    sed -n 's/^cuda: built in (\([^)]*\)).*/\1/p')
[ "$archs" = "sm_90, PTX" ] || fail "detect says the build carries '$archs', not CUDA_ARCHS=90's 'sm_90, PTX'"
echo "device code, as detect reports it: $archs"

rm "$stage/lib/libcjson.so.1"
if out=$(vx_ldd_check "$path" "$stage/voxscale"); then fail "the check passed without libcjson in the archive"; fi
grep -q 'libcjson.so.1 from .*, outside the library path' <<<"$out" || fail "the check did not name libcjson: $out"
echo "without libcjson in the archive: $out"
echo "ok: ci/gpu.sh --prepare on a wheel-layout CUDA makes a build whose every library resolves through the carried path"

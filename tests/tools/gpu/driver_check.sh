#!/usr/bin/env bash
# tests/tools/gpu/driver_check.sh SCRATCH: ci/gpu.sh's first step (ci/gpu/driver_check.py) without a GPU. Against
# the versions a build records (prepare.json's "built", read from `voxscale detect` as ci/gpu.sh --prepare does) and
# stand-in probes of a GPU machine, it must pass a machine that can serve the build and fail, in one line that names
# the cause, one whose driver is below the build's CUDA major, whose cuDNN or cuBLAS wheel is for the other CUDA
# major, whose NCCL is too old, whose CUPTI is of a minor this build cannot read, or that lacks a library; on this
# machine (no driver) the real probe must fail in one line too.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
scratch=${1:?usage: driver_check.sh SCRATCH_DIR}
rm -rf "$scratch"
mkdir -p "$scratch"
fail() { echo "FAIL: $*"; exit 1; }
check=ci/gpu/driver_check.py

# the build's versions as prepare.sh records them, from a detect line like this build's
line="cuda: built in (sm_80, sm_90, PTX); built with CUDA runtime 13.0, cuDNN 9.13.0, NCCL 2.28.9, cuBLAS 13.1.0, CUPTI API 130001"
built=$(python3 $check --parse-detect "$line")
[ "$built" = '{"cuda": 13000, "cudnn": 91300, "nccl": 22809, "cublas": 130100, "cupti": 130001}' ] ||
    fail "the detect line parses to $built"
echo "{\"built\": $built}" >"$scratch/prepare.json"
if [ -x build/voxscale ] && grep -q '^cuda: built in' <<<"$(build/voxscale detect --device cpu --config configs/test/tiny.json)"; then
    own=$(python3 $check --parse-detect "$(build/voxscale detect --device cpu --config configs/test/tiny.json | grep '^cuda: built in')")
    [ "$own" != null ] || fail "this build's detect line does not parse"
fi

# case NAME WANT_RC WANT_TEXT PROBE_JSON
case_() {
    local name=$1 want_rc=$2 want=$3 out rc
    printf '%s' "$4" >"$scratch/$name.json"
    out=$(python3 $check "$scratch/prepare.json" --probe "$scratch/$name.json")
    rc=$?
    [ "$rc" = "$want_rc" ] || fail "$name: exit $rc, not $want_rc: $out"
    [ "$(wc -l <<<"$out")" = 1 ] || fail "$name: not one line: $out"
    [[ $out == *"$want"* ]] || fail "$name: '$out' lacks '$want'"
    echo "$name: $out"
}
good='"driver": 13000, "cudnn": [91900, 13000], "nccl": 22809, "cublas": 13000, "cupti": 130001'
case_ ok 0 "driver check: ok: driver CUDA 13.0, cuDNN 9.19.0 (CUDA 13.0), NCCL 2.28.9" "{$good}"
case_ newer-driver-and-cupti 0 "CUPTI API 130202" '{"driver": 13020, "cudnn": [91900, 13000], "nccl": 23000, "cublas": 13020, "cupti": 130202}'
case_ old-driver 1 "the driver supports CUDA 12.8, the build needs CUDA 13.x" "{${good/13000, \"cudnn\"/12080, \"cudnn\"}}"
case_ no-driver 1 "no CUDA driver (libcuda.so.1: cannot open" '{"driver": "no CUDA driver (libcuda.so.1: cannot open shared object file)", "cudnn": [91900, 13000], "nccl": 22809, "cublas": 13000, "cupti": 130001}'
case_ cu12-cudnn 1 "cuDNN 9.10.0 is for CUDA 12.8, the build is for CUDA 13" '{"driver": 13000, "cudnn": [91000, 12080], "nccl": 22809, "cublas": 13000, "cupti": 130001}'
case_ cu12-cublas 1 "cuBLAS is for CUDA 12.9, the build for CUDA 13" '{"driver": 13000, "cudnn": [91900, 13000], "nccl": 22809, "cublas": 12090, "cupti": 130001}'
case_ old-nccl 1 "NCCL 2.18.3 is older than 2.19" '{"driver": 13000, "cudnn": [91900, 13000], "nccl": 21803, "cublas": 13000, "cupti": 130001}'
case_ unread-cupti 1 "CUPTI API 130600 cannot be read by this build" '{"driver": 13000, "cudnn": [91900, 13000], "nccl": 22809, "cublas": 13000, "cupti": 130600}'
case_ two-problems 1 "libcublas.so.13: not found; CUPTI (--profile): libcupti.so.13: not found" '{"driver": 13000, "cudnn": [91900, 13000], "nccl": 22809, "cublas": "not found", "cupti": "not found"}'

# the real probe on this machine, which has no NVIDIA driver: one line, exit 1
out=$(python3 $check "$scratch/prepare.json")
rc=$?
if [ -e /dev/nvidia0 ] || [ -e /proc/driver/nvidia ]; then
    echo "this machine has an NVIDIA driver: $out (exit $rc)"
else
    [ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && [[ $out == "driver check: FAIL: "* ]] || fail "real probe: exit $rc: $out"
    echo "this machine: $out"
fi
# a prepare.json from before the check: one line, exit 1
echo '{"commit": "x"}' >"$scratch/old.json"
out=$(python3 $check "$scratch/old.json" 2>&1)
rc=$?
[ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && [[ $out == *"run bash ci/gpu.sh --prepare again"* ]] || fail "old prepare.json: exit $rc: $out"
echo "ok: the driver check passes a machine that serves the build and names each cause in one line"

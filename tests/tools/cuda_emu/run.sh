#!/usr/bin/env bash
# tests/tools/cuda_emu/run.sh: runs the CUDA backend's own kernels (kernels/<op>/*_cuda.cu, not the cuDNN calls) on
# the CPU under a small host emulation of the CUDA execution model, for machines without a GPU: the op tests' cases
# (tests/unit/op_cases.c) in float32, bfloat16 and float16 against the op table's float64 references (emu_ops.cpp),
# and the convolution's own epilogue kernels against plain loops (bias_test.cpp). Each kernel launch becomes 256 std::threads per block with real barriers for __syncthreads and per-warp
# barriers for __shfl_down_sync; the reduction scratch is poisoned with NaN before every reducing op, so a partial
# sum that is read before it is written shows up. It checks indexing, partitions, reductions, beta handling and
# launch limits (grid.y <= 65535, block <= 1024). The kernels and tests are built with ASan and UBSan: a read or
# write past any buffer (the test buffers have no slack) or a float4 access through a pointer that is not 16-byte
# aligned (the emulated float4 is alignas(16), as CUDA's) aborts the run, standing in for compute-sanitizer
# memcheck and the GPU's misaligned-address fault. It cannot check device math, warp scheduling or timing.
# Usage: bash tests/tools/cuda_emu/run.sh   (needs g++ with C++20 <barrier>, python3, OpenBLAS; 5 to 7 minutes
# in CI on 2 cores, beside the Docker check)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${BUILD:-$root/build}/cuda_emu
mkdir -p "$out"
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# -g1: line tables only, which is all a sanitizer report's file:line needs; full -g made each emulated kernel's compile
# about a half longer (attention_emu.cpp 20.5 against 13.6 s) and the compiles are most of this check's time.
cxx="g++ -std=c++20 -O1 -g1 $san -D__CUDACC__ -I$here/inc -I$root/kernels -I$root/src -pthread -w"
cc="gcc -O2 -fopenmp -std=c11 -D_GNU_SOURCE -I$root/kernels -I$root/src -I$root/tests/unit $(pkg-config --cflags openblas 2>/dev/null)"
# The compiles are independent: they are listed in $jobs, one command a line, and run $(nproc) at a time (one after
# the other they took 330 s of this check's 590 s in CI on 2 cores); xargs fails when any does, and set -e stops.
jobs=$out/jobs.txt
: >"$jobs"
job() { echo "$*" >>"$jobs"; }
run_jobs() { xargs -P "$(nproc)" -d '\n' -I{} bash -c {} <"$jobs"; : >"$jobs"; }
objs=()
# every op folder's CUDA file (an op folder: one with a <op>_spec.c) but the convolution's (cuDNN)
for d in "$root"/kernels/*/; do
    f=$(basename "$d")
    [ -f "$d/${f}_spec.c" ] && [ -f "$d/${f}_cuda.cu" ] && [ "$f" != conv3d ] || continue
    python3 "$here/prep.py" "$d/${f}_cuda.cu" >"$out/${f}_emu.cpp"
    job $cxx -c "$out/${f}_emu.cpp" -o "$out/${f}_emu.o"
    objs+=("$out/${f}_emu.o")
done
# conv3d_cuda.cu: only its bias kernels are ours (the rest is cuDNN)
python3 - "$root/kernels/conv3d/conv3d_cuda.cu" >"$out/bias_src.cu" <<'PY'
import sys
src = open(sys.argv[1]).read()
a, b = src.index('/* ---- bias kernels'), src.index('/* ---- the three directions')
defs = '\n'.join(l for l in src.split('\n') if l.startswith('#define CONV_BIAS'))
print('#include "conv3d/conv3d.h"\n#include "common/cuda_check.h"\n' + defs + '\n' + src[a:b])
print('void emu_add_bias(const Conv3dShape *s, const float *bias, const void *residual, void *y) { add_bias(s, bias, residual, y); }')
print('void emu_bias_grad(const Conv3dShape *s, const void *dy, float *dbias, float beta) { bias_grad(s, dy, dbias, beta); }')
print('void emu_dw_accumulate(const Conv3dShape *s, const void *lp, float *dw, float beta) { dw_accumulate(s, lp, dw, beta); }')
PY
python3 "$here/prep.py" "$out/bias_src.cu" >"$out/bias_emu.cpp"
# cuda_device.cu: only the reductions' second pass is a kernel; the rest is the CUDA runtime
python3 - "$root/kernels/common/cuda_device.cu" >"$out/finalize_src.cu" <<'PY'
import sys
src = open(sys.argv[1]).read()
a, b = src.index('/* ---- reduction second pass'), src.index('/* ---- start and stop')
print('#include "common/cuda_check.h"\n' + src[a:b])
PY
python3 "$here/prep.py" "$out/finalize_src.cu" >"$out/finalize_emu.cpp"
job $cxx -c "$out/finalize_emu.cpp" -o "$out/finalize_emu.o"
job $cxx -c "$out/bias_emu.cpp" -o "$out/bias_emu.o"
job $cxx -c "$here/emu_support.cpp" -o "$out/emu_support.o"
job $cxx -I$root/tests/unit -c "$here/emu_ops.cpp" -o "$out/emu_ops.o"
job $cxx -c "$here/bias_test.cpp" -o "$out/bias_test.o"
cpu=()
for d in "$root"/kernels/*/; do
    f=$(basename "$d")
    [ -f "$d/${f}_spec.c" ] && [ -f "$d/${f}_cpu.c" ] || continue
    job $cc -c "$d/${f}_cpu.c" -o "$out/cpu_$f.o"
    cpu+=("$out/cpu_$f.o")
done
# the CPU backend's other parts its tables call: the ISA it dispatches on (VX_CPU_ISA, issue 41), the GEMM dispatch
# (OpenBLAS or oneDNN's sgemm, and the bf16 matmul), the convolutions' choice between im2col and oneDNN (issue 22),
# and attention's register-tile path with its tile product (issue 38)
for f in kernels/common/cpu_isa kernels/common/cpu_gemm kernels/common/cpu_gemm_bf16 kernels/common/cpu_tile_gemm \
         kernels/conv3d/conv3d_cpu_select \
         kernels/conv3d/conv3d_dnnl kernels/attention/attention_cpu_tile; do
    job $cc -c "$root/$f.c" -o "$out/cpu_$(basename "$f").o"
    cpu+=("$out/cpu_$(basename "$f").o")
done
job $cc -c "$root/src/core/util.c" -o "$out/util.o"
# the op spec table (every op folder's entries), its check and the test cases, as test_backend_ops has them (built
# with the sanitizers too)
specs=()
for f in kernels/common/op kernels/common/op_spec kernels/backend/registry kernels/backend/spec_table \
         kernels/backend/op_check tests/unit/op_cases $(cd "$root" && ls kernels/*/*_spec.c | grep -v '^kernels/common/' | sed 's/\.c$//'); do
    job $cc $san -c "$root/$f.c" -o "$out/$(basename "$f").o"
    specs+=("$out/$(basename "$f").o")
done
run_jobs
blas="$(pkg-config --libs openblas 2>/dev/null || echo -lopenblas) -ldnnl"
job g++ $san -pthread -fopenmp -o "$out/emu_ops" "${objs[@]}" "$out/finalize_emu.o" "$out/emu_support.o" "$out/emu_ops.o" \
    "${specs[@]}" "${cpu[@]}" "$out/util.o" $blas
job g++ $san -pthread -fopenmp -o "$out/bias_test" "$out/bias_emu.o" "$out/finalize_emu.o" "$out/emu_support.o" "$out/bias_test.o" "${cpu[@]}" "$out/op.o" "$out/util.o" $blas
run_jobs
export ASAN_OPTIONS=detect_leaks=0  # the harness never frees its test buffers: leaks are not what is checked
"$out/emu_ops"
"$out/bias_test" | tail -1

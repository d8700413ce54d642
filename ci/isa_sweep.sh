#!/usr/bin/env bash
# ci/isa_sweep.sh: the tests again under the ISA levels this CPU has below its own (issue 41), so that an AVX-512
# machine also proves the paths an AVX2 machine runs. Each level gets a build of its own for that instruction set
# (ARCH -march=x86-64-v3 for avx2, x86-64-v4 for the AVX-512 levels; CPU-only) and runs with the dispatch capped there:
# VX_CPU_ISA=<level> (the GEMM choice, oneDNN's maximum ISA, the bf16 refusal; kernels/common/cpu_isa.h) and, for
# avx2, OPENBLAS_CORETYPE=Haswell (OpenBLAS picks its kernels when it loads; Zen machines run the same sgemm kernels).
# Not ONEDNN_MAX_CPU_ISA: voxscale caps its oneDNN through the API, and the PyTorch the reference tests run would take
# the variable too (its bf16 convolutions refuse AVX2).
#
#   ci/isa_sweep.sh            every unit test and the ISA-sensitive integration files (SUBSET below) at avx2, and
#                              at avx512 too on an AMX CPU (the dispatch's vector tiers below the CPU's own)
#   ci/isa_sweep.sh --full     every unit test and every integration test per level (the whole suite, as a release
#                              check; about the suite's time per level)
#   ci/isa_sweep.sh --levels "avx2 avx512"   these levels (each must be below the CPU's own)
#   ISA_SWEEP_PYTEST="-k predict"     extra pytest arguments
#
# Prints, per level, the device line the level runs with and "isa <level>: N passed, N failed, N skipped"; the last
# line is "isa sweep: ..." over all levels. Exit 0 when nothing failed (also when the CPU has no lower level: it says
# so), 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${PYTHON:-.venv/bin/python}

# The integration files whose claims depend on the kernels' arithmetic: bytes equal across batches, slots, ranks,
# reruns and resumes; agreement with PyTorch, MONAI and float64 within tolerances; tolerances between runs.
SUBSET=(test_predict.py test_predict_diffusion.py test_resnet3d.py test_zero.py test_cpu_backend.py test_cpu_bf16.py
        test_ranks_agree.py test_pytorch.py test_monai.py test_vit3d.py test_vit3d_diffusion.py test_training.py
        test_memory_savers.py)
# ...less test_zero.py's comparisons of every sharded mode with DDP at world sizes 1-4 (332 -> 240 s of the sweep
# on the AVX-512 Xeon): their tolerance is the same build's own float32 noise, measured in the same run (a nudged
# DDP run), so they test the sharding's logic, which no ISA level changes. test_zero.py's bit-for-bit checks (ZeRO-2
# against DDP, consolidation, resumes across rank counts) stay: a vector body and its scalar tail splitting a shard
# differently at another width would show there.
SUBSET_DESELECT="not (sharded_modes_follow_ddp or memory_per_rank_falls or zero2_reports_backwards or parameter_groups_follows_ddp)"

full=0; levels=""
while [ $# -gt 0 ]; do
    case $1 in
        --full) full=1 ;;
        --levels) levels=$2; shift ;;
        *) echo "ci/isa_sweep.sh: unknown argument $1 (--full, --levels \"avx2 avx512\")" >&2; exit 2 ;;
    esac
    shift
done

# the CPU's levels, lowest first (cpu_isa.c reads the same flags, and cpuid)
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
own=()
has avx2 fma && own+=(avx2)
has avx512f avx512bw avx512vl avx512dq && own+=(avx512)
has avx512f avx512bw avx512vl avx512dq avx512_bf16 && own+=(avx512_bf16)
has avx512f amx_bf16 amx_tile && own+=(amx)
top=${own[${#own[@]}-1]:-none}
# By default the dispatch's two vector tiers below the CPU's own: avx2 always, and avx512 where the CPU's own level
# adds AMX (the AMX Xeon's float32 paths then run at AVX-512 too). avx512_bf16 differs from avx512 only in the bf16
# kernels, which the bf16 tests cover at the CPU's own level; --levels names any level below the CPU's.
if [ -z "$levels" ]; then
    [ "$top" != avx2 ] && [ "$top" != none ] && levels="avx2"
    [ "$top" = amx ] && levels="$levels avx512"
fi
if [ -z "${levels// /}" ]; then
    echo "isa sweep: this CPU's own level ($top) is the lowest the dispatch has; the suite's own run covers it"
    exit 0
fi
for l in $levels; do
    [[ " ${own[*]} " == *" $l "* && $l != "$top" ]] || {
        echo "ci/isa_sweep.sh: $l is not a level below this CPU's own ($top; it has: ${own[*]})" >&2; exit 2; }
done

# The subset's files on one pytest-xdist worker per core (at most 8), a file at a time per worker, as ci/test.sh runs
# the untimed tests (none of the subset is timed). --full runs one worker: its timed tests need the cores to
# themselves. Serial too without pytest-xdist (ci/deps.sh installs it).
workers=$(nproc); [ "$workers" -le 8 ] || workers=8
xdist=(); [ $full -eq 0 ] && "$PY" -c 'import xdist' 2>/dev/null && xdist=(-n "$workers" --dist loadfile)
total_p=0; total_f=0; total_s=0; summary=()
for level in $levels; do
    case $level in
        avx2) arch=x86-64-v3; env_level=(VX_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell) ;;
        *) arch=x86-64-v4; env_level=(VX_CPU_ISA=$level) ;;
    esac
    build="$BUILD/isa-$arch"
    echo "=== isa $level: build $build (ARCH=-march=$arch, CPU-only)"
    unit=$(make --no-print-directory -s -p -n CUDA=0 BUILD="$build" all 2>/dev/null | grep -E '^UNIT_TESTS :?=' |
           head -1 | cut -d= -f2-)
    if ! make --no-print-directory -s -j"$(nproc)" CUDA=0 ARCH="-march=$arch" BUILD="$build" all $unit \
            >"$build.log" 2>&1; then
        tail -30 "$build.log"; echo "isa $level: the build failed"
        total_f=$((total_f + 1)); summary+=("$level: build failed")
        continue
    fi
    env "${env_level[@]}" "$build/voxscale" detect --config configs/test/tiny.json 2>&1 | grep '^device:'
    p=0; f=0; s=0
    for t in "$build"/tests/test_*; do
        [ -x "$t" ] || continue
        out=$(env "${env_level[@]}" "$t" 2>&1); rc=$?
        np=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' <<<"$out" | tail -1)
        nf=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' <<<"$out" | tail -1)
        p=$((p + ${np:-0})); f=$((f + ${nf:-0}))
        grep -q '^skipped: ' <<<"$out" && s=$((s + 1))
        if [ $rc -ne 0 ]; then
            [ -n "$nf" ] && [ "$nf" -gt 0 ] || f=$((f + 1))
            echo "--- isa $level: $t failed:"; tail -30 <<<"$out"
        fi
    done
    echo "isa $level: unit tests $p passed, $f failed"
    if [ $full -eq 1 ]; then files=(tests/integration); select=(); else
        files=("${SUBSET[@]/#/tests/integration/}"); select=(-k "$SUBSET_DESELECT"); fi
    report=$(mktemp)
    env "${env_level[@]}" BUILD="$build" "$PY" -m pytest -q -rfE -p no:cacheprovider "${xdist[@]}" "${files[@]}" \
        "${select[@]}" ${ISA_SWEEP_PYTEST:-} --junitxml="$report" >"$build.pytest.log" 2>&1
    grep -E '^(FAILED|ERROR) ' "$build.pytest.log" | sed "s/^/isa $level: /"
    tail -1 "$build.pytest.log"
    if [ -s "$report" ]; then
        read -r pt pf pe ps < <(/usr/bin/python3 ci/junit_summary.py "$report")
        p=$((p + pt - pf - pe - ps)); f=$((f + pf + pe)); s=$((s + ps))
    else
        f=$((f + 1)); echo "isa $level: pytest wrote no report"
    fi
    rm -f "$report"
    echo "isa $level: $p passed, $f failed, $s skipped"
    summary+=("$level: $p passed, $f failed, $s skipped")
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
done
joined=$(printf '%s; ' "${summary[@]}")
echo "isa sweep (this CPU: $top): ${joined%; }; in all $total_p passed, $total_f failed, $total_s skipped"
[ $total_f -eq 0 ]

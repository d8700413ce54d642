#!/usr/bin/env bash
# ci/gpu.sh: every check that needs a GPU, in one command that records its results. Two halves:
#   ci/gpu.sh --prepare   on any machine with nvcc (no GPU needed): builds with CUDA=1 and a portable ARCH and packs
#                         the binaries with the libraries a GPU machine may lack into build/gpu/ (ci/gpu/prepare.sh)
#   ci/gpu.sh [--quick]   on the GPU machine, from the repository root, with build/gpu/ there: unpacks it, sets the
#                         library path (ci/gpu/libpath.sh), records the machine (ci/gpu/env.py), then runs the steps
#                         registered below, each timed, under its time limit, marked pass, fail or timeout, going on
#                         after a failure; writes summary.md, summary.json, logs.tar.gz, the benchmark
#                         tables (amp_*.md/json, side_by_side_*.md), the benchmarks' JSON and the device's charts
#                         and index.html (bench/report/report.py) to results/<gpu>/, or under the device tool
#                         ($OUT set; it brings back at most 8 files) packed into $OUT as summary.md, results.tar.gz
#                         and logs.tar.gz
#   ci/gpu.sh --dry-run   anywhere: the same bookkeeping and reports with each step's command replaced by a
#                         stand-in (VX_GPU_DRY_FAIL=STEP plants a failing one, VX_GPU_DRY_HANG=STEP one that runs
#                         past its limit, VX_GPU_DRY_OWE=STEP an owed one), so CI checks the runner without a GPU
#   ci/gpu.sh --first     the first run on a machine (cold caches: cuDNN loading its engines in every process, the
#                         first torch import, compute-sanitizer's start): every limit x VX_GPU_FIRST_SCALE (3); with
#                         --plan, the calls that fit the device tool's 10 minutes each
# Also: --only STEP[,STEP] runs those steps alone (the on-demand ones run only so), --results DIR writes the reports
# there, --list prints the steps, --plan prints the runs (one `bash ci/gpu.sh ... --only ...` line each) that split
# the selected steps into calls whose limits fit VX_GPU_CALL_S.
# A step ends pass, fail, timeout, or owed (exit 77: what it could run passed, the rest needs what this machine lacks,
# e.g. two ranks on one GPU need NCCL 2.30: never counted a pass), or is not run (--quick, --only, on demand, or no
# time left in the call). Under the device tool ($OUT set) a run stops starting steps that could pass
# VX_GPU_CALL_S (570 s: the tool ends a call at 600 s) and marks the rest "not run: no time left", and the reports
# are rewritten after every step, so a call that is cut short still brings back every finished step's result.
# Environment: VX_GPU_DIR (build/gpu), VX_GPU_WORK (build/gpu-run, emptied first), VX_PYTHON (python3: the one with
# PyTorch and pytest), NVIDIA_PYTHON (VX_PYTHON: whose nvidia-* packages hold cuDNN, CUPTI, NCCL), CUDA_HOME,
# VX_GPU_CALL_S (570 under the device tool, else 0: no limit), VX_GPU_FIRST_SCALE (3).
# Exit code: 0 when every step run passed, 1 when one did not (failed, timed out or owed), 2 for bad usage or a
# missing build.
set -uo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.." || exit 2

# ---- the steps ----------------------------------------------------------------------------------------------
# register NAME LIMIT QUICK_LIMIT FUNCTION WHAT [on-demand]: a step of a full run with a time limit of LIMIT seconds,
# and of a --quick run with QUICK_LIMIT (0: not in --quick). FUNCTION is in ci/gpu/steps.sh. An on-demand step is in
# neither list and runs only when --only names it, under LIMIT. A later GPU check is one more function and one more
# line here.
# Nothing here has run on a GPU yet, so the limits are guesses with room for a cold machine (issue 20: the first
# estimates left no room for cuDNN loading its engines in each of ~33 op-test processes, compute-sanitizer's start,
# or ~25 integration runs); a full run's limits add up to more than one device call (10 minutes), which the call's
# own deadline handles (the steps that no longer fit are "not run: no time left", the reports are written after every
# step) and --plan splits into calls. --first multiplies them by 3 for the very first run. summary.md gives each
# step's measured time and a limit suggested from it (1.5 x the time + 5 s): tighten these from those.
# Expected on an H100 (estimates): driver 1 s, libs 1 s, detect 5-15 s (cuDNN's plans for every convolution of the
# shipped configs in three types), unit 5 s, ops 33 x ~1.5 s + attention's paths ~45 s (4 op-check processes, the
# cuDNN engines' runtime compilation per shape, 2 pytest dumps, 2 bench runs), integration ~60 s, memcheck ~40 s, racecheck ~20 s,
# amp-64 ~50 s, amp-128 ~65 s (torch.compile 30-60 s), bench-kernels ~30 s, profile ~10 s, nccl ~30 s (its runs,
# and two ranks on the GPU where NCCL >= 2.30), nccl-unit ~15 s (its watchdog cases end within seconds of their 1 s
# deadline since the abort path exits at once), ~10 s more with two ranks. amp-* and bench-* give PyTorch what is
# left of their limit and keep the runs that finished.
STEP_NAMES=()
declare -A STEP_LIMIT STEP_QUICK STEP_FN STEP_WHAT STEP_DEMAND
register() {
    STEP_NAMES+=("$1")
    STEP_LIMIT[$1]=$2 STEP_QUICK[$1]=$3 STEP_FN[$1]=$4 STEP_WHAT[$1]=$5 STEP_DEMAND[$1]=${6:-}
}
register driver      10  5 step_driver      "the driver and the NVIDIA libraries can serve the build (CUDA major, cuDNN/cuBLAS of its CUDA, NCCL, CUPTI)"
register libs         5  5 step_libs        "every binary's libraries resolve through the carried library path (ldd)"
register detect      45 15 step_detect      "detect --device cuda chooses the GPU; cuDNN has an algorithm for every conv of the shipped configs in f32/bf16/fp16"
register unit        30  0 step_unit        "cuDNN descriptors (convolutions, attention's graphs) against this cuDNN; live CUPTI records; cuBLASLt alignments"
register ops        150 35 step_ops         "the op table in f32/bf16/fp16 against float64, the CUDA backend's tests, one per process; attention with cuDNN and own kernel forced"
register integration 120 40 step_integration "tests/integration/test_cuda.py: fp32 against the CPU, bf16/fp16, graphs"
register memcheck    60  0 step_memcheck    "compute-sanitizer memcheck: the op tests and 3 training steps"
register racecheck   40  0 step_racecheck   "compute-sanitizer racecheck: the kernels that reduce in shared memory"
register amp-64      65 35 step_amp_64      "ae3d-64 bf16: voxscale --compile and eager vs PyTorch autocast eager and torch.compile (issue 12)"
register amp-128     85  0 step_amp_128     "ae3d-128 bf16: voxscale --compile and eager vs PyTorch autocast eager and torch.compile (issue 12)"
register bench-64    65  0 step_bench_64    "bench step ae3d-64 fp32, TF32 on and off, vs PyTorch eager and torch.compile" on-demand
register bench-128   45  0 step_bench_128   "bench step ae3d-128 fp32, TF32 on and off, vs PyTorch eager and torch.compile" on-demand
register pad-64      30  0 step_pad_64      "ae3d-64 bf16: model.pad_input_channels off vs auto, the step and conv_in's time" on-demand
register resnet3d    60  0 step_resnet3d    "resnet3d-50 survival: voxscale bench step fp32 and bf16 vs MONAI's ResNet-50 eager fp32 and bf16 autocast"
register diffusion   60  0 step_diffusion   "vit3d_diffusion: one CUDA step vs PyTorch float64; bench step fp32/bf16 vs the same network in PyTorch"
register bench-kernels 40 0 step_bench_kernels "bench kernels: every op checked, then timed against cuBLAS and copy ceilings; ci/regress"
register bench-allreduce 20 0 step_bench_allreduce "bench allreduce: NCCL on 1 rank, and 2 ranks sharing the GPU where NCCL >= 2.30 (else owed)"
register bench-scaling 50 0 step_bench_scaling "bench scaling: ae3d-64 and vit3d-diffusion-64 measured on this GPU, 2/4/8 x H100 NVLink projected"
register profile     20 15 step_profile     "a profiled ae3d-64 run: GPU-busy time vs the CUDA-event step time"
register nccl        45  0 step_nccl        "NCCL: 1 rank vs none; 2 ranks on the GPU vs 1 and their bucket overlap (NCCL >= 2.30, else owed)"
register zero        60  0 step_zero        "ZeRO-1/2 and ZeRO-2 + offload (pinned host, AdamW on the CPU) on 1 GPU vs DDP; ZeRO-2 on 2 NCCL ranks vs DDP (NCCL >= 2.30, else owed)"
register nccl-unit   45  0 step_nccl_unit   "test_comm_nccl: the NCCL communicator's collectives, stream order, watchdog; 2 ranks where they fit (else owed)"
# Every step runs with VX_REQUIRE_GPU=1 where a test could skip: on a GPU machine a skip is a failure.

usage() {
    sed -n '2,/^set -uo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'
    exit "${1:-0}"
}
die() { echo "gpu.sh: $*" >&2; exit 2; }

# ---- internal: one step, in a process of its own (the runner below starts it under `timeout`) ---------------
if [ "${1:-}" = "--step" ]; then
    . ci/gpu/libpath.sh
    . ci/gpu/steps.sh
    "${STEP_FN[$2]}"
    exit $?
fi

QUICK=0 DRY=0 FIRST=0 PLAN=0 ONLY="" RESULTS=""
while [ $# -gt 0 ]; do
    case $1 in
    --prepare) [ $# -eq 1 ] || die "--prepare takes no other option"; exec bash ci/gpu/prepare.sh ;;
    --quick) QUICK=1 ;;
    --first) FIRST=1 ;;
    --plan) PLAN=1 ;;
    --dry-run) DRY=1 ;;
    --only) [ $# -ge 2 ] || die "--only needs a comma-separated list of steps (--list names them)"; ONLY=$2; shift ;;
    --results) [ $# -ge 2 ] || die "--results needs a directory"; RESULTS=$2; shift ;;
    --list)
        for n in "${STEP_NAMES[@]}"; do
            if [ -n "${STEP_DEMAND[$n]}" ]; then kind="on demand"
            elif [ "${STEP_QUICK[$n]}" = 0 ]; then kind=""
            else kind="quick ${STEP_QUICK[$n]} s"; fi
            printf '%-12s %4s s  %-9s %s\n' "$n" "${STEP_LIMIT[$n]}" "$kind" "${STEP_WHAT[$n]}"
        done
        exit 0 ;;
    -h | --help) usage 0 ;;
    *) die "unknown option '$1'; see ci/gpu.sh --help" ;;
    esac
    shift
done
[ $QUICK = 1 ] && [ $FIRST = 1 ] && die "--quick and --first do not go together: --first is the full run with room"
MODE=$([ $QUICK = 1 ] && echo quick || { [ $FIRST = 1 ] && echo first || echo full; })$([ $DRY = 1 ] && echo " dry-run")
if [ -n "$ONLY" ]; then
    for n in ${ONLY//,/ }; do [ -n "${STEP_FN[$n]:-}" ] || die "--only: no step '$n'; ci/gpu.sh --list names them"; done
fi
FIRST_SCALE=${VX_GPU_FIRST_SCALE:-3}
# the device tool ($OUT set) ends a call at 600 s: stop starting steps that could run past 570 s
CALL_S=${VX_GPU_CALL_S:-$([ -n "${OUT:-}" ] && echo 570 || echo 0)}
CALL_OVERHEAD_S=35 # the environment probe (up to 25 s) and the reports, outside the steps' limits

# limit_of NAME: the step's limit in this mode (0: not in --quick)
limit_of() {
    if [ "$QUICK" = 1 ]; then echo "${STEP_QUICK[$1]}"
    elif [ "$FIRST" = 1 ]; then echo $((STEP_LIMIT[$1] * FIRST_SCALE))
    else echo "${STEP_LIMIT[$1]}"; fi
}
# why_not_run NAME: why this run leaves the step out ("" when it runs it)
why_not_run() {
    local name=$1
    if [ "$(limit_of "$name")" = 0 ]; then echo "not in --quick"
    elif [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then echo "not in --only"
    elif [ -n "${STEP_DEMAND[$name]}" ] && [[ ",$ONLY," != *",$name,"* ]]; then echo "on demand: ci/gpu.sh --only $name"
    fi
}

if [ $PLAN = 1 ]; then
    # the selected steps in order, in calls whose limits fit VX_GPU_CALL_S (570 s when unset here too)
    budget=$(( ${VX_GPU_CALL_S:-570} - CALL_OVERHEAD_S ))
    flags=$([ $QUICK = 1 ] && echo " --quick")$([ $FIRST = 1 ] && echo " --first")
    group=() sum=0 calls=0
    flush() {
        [ ${#group[@]} -gt 0 ] || return 0
        calls=$((calls + 1))
        printf 'bash ci/gpu.sh%s --only %s   # call %d: limits %d s\n' "$flags" "$(IFS=,; echo "${group[*]}")" "$calls" "$sum"
        group=() sum=0
    }
    for n in "${STEP_NAMES[@]}"; do
        [ -z "$(why_not_run "$n")" ] || continue
        l=$(limit_of "$n")
        [ "$l" -le "$budget" ] || die "--plan: step $n's limit ($l s) alone is beyond a call's $budget s"
        [ $((sum + l)) -le "$budget" ] || flush
        group+=("$n") sum=$((sum + l))
    done
    flush
    exit 0
fi

export VX_PYTHON=${VX_PYTHON:-python3}
export NVIDIA_PYTHON=${NVIDIA_PYTHON:-$VX_PYTHON}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
. ci/gpu/libpath.sh
DIR=${VX_GPU_DIR:-build/gpu}
WORK=${VX_GPU_WORK:-build/gpu-run}
rm -rf "$WORK"
mkdir -p "$WORK/logs" "$WORK/steps" "$WORK/figures"
WORK=$(cd "$WORK" && pwd)
: >"$WORK/steps.tsv"
T_START=$EPOCHREALTIME

# ---- the carried build and its library path ------------------------------------------------------------------
VX_ORIG_LD_SET=0
[ -n "${LD_LIBRARY_PATH+set}" ] && VX_ORIG_LD_SET=1
export VX_ORIG_LD_SET
export VX_ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
if [ $DRY = 0 ]; then
    [ -f "$DIR/voxscale-gpu.tar.gz" ] ||
        die "no $DIR/voxscale-gpu.tar.gz: run 'bash ci/gpu.sh --prepare' on a machine with nvcc and bring $DIR here (the device tool: carry=[\"$DIR\"])"
    tar -C "$WORK" -xzf "$DIR/voxscale-gpu.tar.gz" || die "cannot unpack $DIR/voxscale-gpu.tar.gz"
    export VX_STAGE=$WORK/stage VX_BIN=$WORK/stage/voxscale VX_TESTS=$WORK/stage/tests
    libpath=$(vx_lib_path "$VX_STAGE")
    # zlib and libgomp are carried as a fallback only: used when this machine lacks them
    # ldd's output whole, then grep: piped, grep -q quits at the first match and, under pipefail, ldd's SIGPIPE
    # would make the test false exactly when a library is missing
    if grep -q 'not found' <<<"$(LD_LIBRARY_PATH=$libpath ldd "$VX_BIN" "$VX_TESTS"/* 2>/dev/null)"; then
        libpath=$libpath:$VX_STAGE/lib-common
    fi
    export LD_LIBRARY_PATH=$libpath
    echo "gpu.sh: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    # CUPTI is loaded by the binary (dlopen) when a profile starts: the toolkit's first, the CUPTI it was built with
    VX_CUPTI_LIB=${VX_CUPTI_LIB:-$(vx_cupti_lib)}
    export VX_CUPTI_LIB
    [ -n "$VX_CUPTI_LIB" ] && echo "gpu.sh: VX_CUPTI_LIB=$VX_CUPTI_LIB"
    # the commit the build was made from, for bench step's results (the tree here may have no .git)
    VX_COMMIT=$(/usr/bin/env python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))
print(p["commit"][:7] + ("-dirty" if p.get("dirty") else ""))' "$VX_STAGE/prepare.json" 2>/dev/null)
    export VX_COMMIT
fi

# ---- the machine -------------------------------------------------------------------------------------------------
echo "== environment"
timeout -k 2 25 /usr/bin/env python3 ci/gpu/env.py "$WORK/env.json" "${VX_STAGE:-/nonexistent}/prepare.json" ||
    echo "gpu.sh: the environment probe failed or ran past 25 s; what it had is in env.json"

# ---- the reports ---------------------------------------------------------------------------------------------
# Under the device tool ($OUT set) the reports go to $WORK/results and pack_out copies them to $OUT as three files
# (summary.md, results.tar.gz, logs.tar.gz): the tool brings back at most 8 files, and a run writes more than that
# (summary.json, amp and side-by-side tables, the benchmarks' JSON, charts, index.html).
PACK_OUT=0
if [ -n "$RESULTS" ]; then outdir=$RESULTS
elif [ -n "${OUT:-}" ]; then outdir=$WORK/results PACK_OUT=1
elif [ $DRY = 1 ]; then outdir=$WORK/results
else
    slug=$(/usr/bin/env python3 -c 'import json, re, sys
g = json.load(open(sys.argv[1])).get("gpu", "")
print(re.sub(r"[^a-z0-9]+", "-", g.lower()).strip("-") if g and not g.startswith("unavailable") else "unknown-gpu")' \
        "$WORK/env.json" 2>/dev/null || echo unknown-gpu)
    outdir=results/$slug
fi
mkdir -p "$outdir"
# summary.md and summary.json from what has run so far: after every step, so a call cut short keeps its results
write_reports() {
    /usr/bin/env python3 ci/gpu/report.py "$WORK" "$outdir" "$MODE" "$DRY"
    local rc=$?
    pack_out
    return $rc
}
# pack_out: $outdir into $OUT as summary.md, results.tar.gz (everything but the log archive) and logs.tar.gz
pack_out() {
    [ $PACK_OUT = 1 ] || return 0
    [ -f "$outdir/summary.md" ] && cp "$outdir/summary.md" "$OUT/"
    [ -f "$outdir/logs.tar.gz" ] && cp "$outdir/logs.tar.gz" "$OUT/"
    tar -C "$(dirname "$outdir")" -czf "$OUT/results.tar.gz" --exclude=logs.tar.gz "$(basename "$outdir")"
}

# ---- the runner --------------------------------------------------------------------------------------------------
export VX_QUICK=$QUICK
DRY_LIMIT=${VX_GPU_DRY_LIMIT:-5}
any_failed=0
total_limits=0
for n in "${STEP_NAMES[@]}"; do [ -z "$(why_not_run "$n")" ] && total_limits=$((total_limits + $(limit_of "$n"))); done
printf '== %s run: %s(limits %d s in all)\n' "$MODE" "$(for n in "${STEP_NAMES[@]}"; do [ -z "$(why_not_run "$n")" ] && printf '%s ' "$n"; done)" \
    "$total_limits"
[ "$CALL_S" -gt 0 ] && [ $((total_limits + CALL_OVERHEAD_S)) -gt "$CALL_S" ] &&
    echo "gpu.sh: the limits add up to more than this call's ${CALL_S} s: steps that no longer fit are left for later (ci/gpu.sh --plan$([ $FIRST = 1 ] && echo " --first") splits the run into calls)"
for name in "${STEP_NAMES[@]}"; do
    limit=$(limit_of "$name")
    why_not=$(why_not_run "$name")
    elapsed=$(awk -v a="$T_START" -v b="$EPOCHREALTIME" 'BEGIN {printf "%d", b - a}')
    if [ -z "$why_not" ] && [ "$CALL_S" -gt 0 ] && [ $((elapsed + limit + 10)) -gt "$CALL_S" ]; then
        why_not="no time left in this call (${elapsed} s of ${CALL_S} s gone): ci/gpu.sh --only $name"
    fi
    if [ -n "$why_not" ]; then
        printf '%s\tnot run\t0\t%s\t\t%s\t%s\n' "$name" "$limit" "${STEP_WHAT[$name]}" "$why_not" >>"$WORK/steps.tsv"
        continue
    fi
    log=$WORK/logs/$name.log
    export VX_STEP_DIR=$WORK/steps/$name VX_STEP_FIGURE=$WORK/figures/$name
    mkdir -p "$VX_STEP_DIR"
    : >"$VX_STEP_FIGURE"
    t0=$EPOCHREALTIME
    if [ $DRY = 1 ]; then
        action=pass
        [ "${VX_GPU_DRY_FAIL:-}" = "$name" ] && action=fail
        [ "${VX_GPU_DRY_HANG:-}" = "$name" ] && action=hang
        [ "${VX_GPU_DRY_OWE:-}" = "$name" ] && action=owe
        run_limit=$((limit < DRY_LIMIT ? limit : DRY_LIMIT))
        timeout -k 1 "$run_limit" bash -c '
            echo "dry run: a stand-in for $1 (step $2)"
            echo "stand-in for $1" >>"$VX_STEP_FIGURE"
            case $3 in fail) echo "planted failure"; exit 1 ;; hang) sleep 600 ;;
                owe) echo "planted: owed to a machine with what this one lacks" >>"$VX_STEP_FIGURE"; exit 77 ;; esac' \
            _ "${STEP_FN[$name]}" "$name" "$action" >"$log" 2>&1
    else
        VX_STEP_DEADLINE=$((EPOCHSECONDS + limit)) timeout -k 3 "$limit" bash "$SELF" --step "$name" >"$log" 2>&1
    fi
    rc=$?
    secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
    case $rc in 0) result=pass ;; 77) result=owed ;; 124 | 137) result=timeout ;; *) result=fail ;; esac
    [ $rc = 0 ] || any_failed=1
    # the figure: the step's own lines joined; for a failed step without one, the last line of its log
    fig=$(tr '\t' ' ' <"$VX_STEP_FIGURE" | awk 'NF {printf "%s%s", (n++ ? "; " : ""), $0}')
    [ -z "$fig" ] && [ $rc != 0 ] && fig=$(awk 'NF {l = $0} END {print l}' "$log" | tr '\t' ' ' | cut -c1-300)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$result" "$secs" "$limit" "$rc" "${STEP_WHAT[$name]}" \
        "$fig" >>"$WORK/steps.tsv"
    printf '[%-7s] %-12s %6s s  %s\n' "$result" "$name" "$secs" "$fig"
    write_reports >/dev/null 2>&1
done

# ---- the final reports -------------------------------------------------------------------------------------------
write_reports || { echo "gpu.sh: writing the reports failed"; any_failed=1; }
# the logs and the steps' own files (traces, bench results), without checkpoints; the device tool brings back files
# of at most 16 MiB, so the traces go first when the archive would be larger
tar -C "$WORK" -czf "$outdir/logs.tar.gz" --exclude='*.ckpt' --exclude=stage logs steps env.json steps.tsv 2>/dev/null
if [ "$(du -b "$outdir/logs.tar.gz" | cut -f1)" -gt $((15 << 20)) ]; then
    tar -C "$WORK" -czf "$outdir/logs.tar.gz" --exclude='*.ckpt' --exclude=stage --exclude='*.trace.json.gz' \
        logs steps env.json steps.tsv 2>/dev/null
    echo "gpu.sh: the traces were left out of logs.tar.gz to keep it under 15 MiB"
fi
for f in "$WORK"/steps/*/side_by_side_*.md "$WORK"/steps/*/amp_*.md "$WORK"/steps/*/amp_*.json; do
    [ -f "$f" ] && cp "$f" "$outdir/"
done
# the benchmarks' own results (bench kernels and step of the default config, allreduce, scaling) beside the summary,
# then this device's charts and index.html (bench/report/report.py, with the first Python that has matplotlib; where
# none has, the page is drawn later, where one does). results/index.html is rewritten only when the reports went to
# results/<gpu>/ itself; a copy brought back from $OUT is drawn into results/ with `python3 bench/report/report.py`.
for f in "$WORK"/steps/bench-{kernels,allreduce,scaling}/*/{kernels,step,allreduce,scaling}_*.{json,md}; do
    [ -f "$f" ] && cp "$f" "$outdir/"
done
index=--no-index
[ -z "$RESULTS" ] && [ -z "${OUT:-}" ] && [ $DRY = 0 ] && index=""
report_rc=3
for py in python3 /usr/bin/python3 "$VX_PYTHON"; do
    "$py" bench/report/report.py --device "$outdir" $index
    report_rc=$?
    [ $report_rc = 3 ] || [ $report_rc = 127 ] || break
done
case $report_rc in
0) ;;
3 | 127) echo "gpu.sh: no Python with matplotlib here: draw the charts and index.html where there is one:" \
    "python3 bench/report/report.py --device <this device's results folder>" ;;
*) echo "gpu.sh: drawing the charts failed (exit $report_rc)"; any_failed=1 ;;
esac
pack_out
total=$(awk -v a="$T_START" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.0f", b - a}')
where=$outdir
[ $PACK_OUT = 1 ] && where="$OUT (summary.md, results.tar.gz: unpack into results/<gpu>/, logs.tar.gz)"
echo "== $(head -1 "$outdir/summary.md" 2>/dev/null | sed 's/^# //'); ${total} s in all; reports in $where"
exit $any_failed

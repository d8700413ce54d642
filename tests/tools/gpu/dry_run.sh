#!/usr/bin/env bash
# tests/tools/gpu/dry_run.sh SCRATCH: ci/gpu.sh's bookkeeping without a GPU (--dry-run: every step's command is a
# stand-in). Checks that:
#   - a planted failing step (ops) shows as FAIL and a planted hanging one (memcheck) as TIMEOUT, stopped at its
#     limit, in summary.md and summary.json, while every other step still runs and passes; exit code 1;
#   - the reports and the log archive (one log per step) are written, and the device's page (bench/report, where
#     matplotlib is); exit code 0 when nothing is planted;
#   - --quick runs the quick steps only and marks the others "not run"; --only likewise;
#   - on-demand steps (the fp32 comparisons) run only when --only names them: "not run" in full and --quick runs;
#   - the limits keep the bounds ci/gpu.sh's comment states: full run 510 s of steps (540 s with the environment
#     probe and the reports), --quick 150 s (180 s), both inside the device tool's 10 minutes a call;
#   - bad usage is one line and exit code 2.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
scratch=${1:?usage: dry_run.sh SCRATCH_DIR}
rm -rf "$scratch"
mkdir -p "$scratch"
scratch=$(cd "$scratch" && pwd) # absolute: the paths the build records are compared below
fail() { echo "FAIL: $*"; exit 1; }
export VX_GPU_DRY_LIMIT=2
steps=$(bash ci/gpu.sh --list | awk '{print $1}')
n=$(wc -w <<<"$steps")
demand=$(bash ci/gpu.sh --list | awk '/ on demand / {print $1}')
nd=$(wc -w <<<"$demand")
[ "$nd" -ge 1 ] || fail "no on-demand step in ci/gpu.sh --list"
# the bounds: full = the limits of every step not on demand, quick = the quick limits
read -r full quick < <(bash ci/gpu.sh --list | awk '
    / on demand / {next}
    {full += $2; if ($4 == "quick") quick += $5}
    END {print full, quick}')
{ [ "$full" -le 510 ] && [ "$quick" -le 150 ]; } ||
    fail "the step limits add up to $full s (full) and $quick s (--quick), beyond the 510 s and 150 s ci/gpu.sh states"
is_demand() { [[ " ${demand//$'\n'/ } " == *" $1 "* ]]; }

# results NAME: "step=result ..." from NAME/summary.json
results() {
    /usr/bin/python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(d["verdict"], " ".join("%s=%s" % (s["step"], s["result"].replace(" ", "-")) for s in d["steps"]))' "$scratch/$1/summary.json"
}

t0=$EPOCHSECONDS
VX_GPU_DRY_FAIL=ops VX_GPU_DRY_HANG=memcheck VX_GPU_WORK=$scratch/w1 bash ci/gpu.sh --dry-run --results "$scratch/planted" \
    >"$scratch/planted.log" 2>&1
rc=$?
took=$((EPOCHSECONDS - t0))
[ $rc = 1 ] || { cat "$scratch/planted.log"; fail "exit code $rc with a failing step, not 1"; }
[ $took -lt 30 ] || fail "the hanging stand-in was not stopped at its limit ($took s)"
got=$(results planted)
want="FAIL $(for s in $steps; do
    case $s in ops) r=fail ;; memcheck) r=timeout ;; *) if is_demand "$s"; then r=not-run; else r=pass; fi ;; esac
    printf '%s=%s ' "$s" "$r"
done)"
[ "$got" = "${want% }" ] || fail "summary.json says '$got', expected '${want% }'"
grep -q '^| ops | \*\*FAIL\*\* |' "$scratch/planted/summary.md" || fail "summary.md does not show ops as FAIL"
grep -q '^| memcheck | \*\*TIMEOUT\*\* |' "$scratch/planted/summary.md" || fail "summary.md does not show memcheck as TIMEOUT"
grep -q '^planted failure$' "$scratch/planted/summary.md" || fail "summary.md lacks the failed step's log tail"
[ "$(grep -c '^| [a-z0-9-]* | pass |' "$scratch/planted/summary.md")" = $((n - 2 - nd)) ] || fail "not every other step passed"
for s in $demand; do
    grep -q "^| $s | not run | .* | on demand: ci/gpu.sh --only $s |" "$scratch/planted/summary.md" ||
        fail "summary.md does not say how to run the on-demand step $s"
done
logs=$(tar -tzf "$scratch/planted/logs.tar.gz" | grep -c '^logs/.*\.log$')
[ "$logs" = $((n - nd)) ] || fail "logs.tar.gz holds $logs step logs, not $((n - nd))"
echo "planted: $got (exit 1, $took s)"

VX_GPU_WORK=$scratch/w2 bash ci/gpu.sh --dry-run --results "$scratch/clean" >"$scratch/clean.log" 2>&1 ||
    { cat "$scratch/clean.log"; fail "a dry run with nothing planted failed"; }
got=$(results clean)
[[ $got == PASS* ]] && [[ $got != *=fail* ]] && [[ $got != *=timeout* ]] || fail "clean dry run: $got"
# the device's page (bench/report/report.py) beside the summary, with the run's environment and no chart (no
# benchmark ran); the results index is not written outside results/
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    grep -q '<h1>voxscale results: clean</h1>' "$scratch/clean/index.html" &&
        grep -q 'summary.json (ci/gpu.sh)' "$scratch/clean/index.html" || fail "the dry run wrote no index.html page"
    [ ! -e "$scratch/index.html" ] || fail "the dry run wrote an index.html outside results/"
fi
echo "clean: exit 0, $got"

VX_GPU_WORK=$scratch/w3 bash ci/gpu.sh --dry-run --quick --results "$scratch/quick" >/dev/null 2>&1 || fail "--quick dry run failed"
got=$(results quick)
for s in unit memcheck racecheck amp-128 bench-64 bench-128; do [[ $got == *" $s=not-run"* ]] || fail "--quick ran $s: $got"; done
for s in libs ops amp-64 profile; do [[ $got == *" $s=pass"* || $got == *"PASS $s=pass"* ]] || fail "--quick did not run $s: $got"; done
echo "quick: $got"

VX_GPU_WORK=$scratch/w4 bash ci/gpu.sh --dry-run --only libs,profile --results "$scratch/only" >/dev/null 2>&1 || fail "--only dry run failed"
[ "$(results only | grep -o '=pass' | wc -l)" = 2 ] || fail "--only libs,profile: $(results only)"
# an on-demand step runs when --only names it, beside a regular one
VX_GPU_WORK=$scratch/w5 bash ci/gpu.sh --dry-run --only bench-64,amp-128 --results "$scratch/demand" >/dev/null 2>&1 ||
    fail "--only bench-64,amp-128 dry run failed"
got=$(results demand)
[[ $got == *" bench-64=pass"* && $got == *" amp-128=pass"* && $(grep -o '=pass' <<<"$got" | wc -l) = 2 ]] ||
    fail "--only bench-64,amp-128: $got"
echo "on demand (${demand//$'\n'/ }): run only by --only; limits: full $full s, --quick $quick s"

for bad in "--only nosuchstep" "--frobnicate" "--results"; do
    # shellcheck disable=SC2086
    out=$(bash ci/gpu.sh $bad 2>&1)
    rc=$?
    [ $rc = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] || fail "ci/gpu.sh $bad: exit $rc, '$out'"
done
echo "ok: ci/gpu.sh --dry-run marks a failing step FAIL and a hanging one TIMEOUT while the other steps run"

#!/usr/bin/env bash
# tests/tools/gpu/dry_run.sh SCRATCH: ci/gpu.sh's bookkeeping without a GPU (--dry-run: every step's command is a
# stand-in). Checks that:
#   - a planted failing step (ops) shows as FAIL and a planted hanging one (memcheck) as TIMEOUT, stopped at its
#     limit, in summary.md and summary.json, while every other step still runs and passes; exit code 1;
#   - the reports and the log archive (one log per step) are written, and the device's page (bench/report, where
#     matplotlib is); exit code 0 when nothing is planted;
#   - --quick runs the quick steps only and marks the others "not run"; --only likewise;
#   - on-demand steps (the fp32 comparisons) run only when --only names them: "not run" in full and --quick runs;
#   - the limits fit the device tool's 10 minutes a call where ci/gpu.sh says: --quick 150 s of steps (180 s with the
#     environment probe and the reports), and --plan (also with --first, every limit x 3) splits the full run into
#     calls of at most 535 s of limits that hold every step of the run once, in order;
#   - --first runs with the limits x 3 and says so in the reports; each step's measured time and a suggested limit
#     are in summary.md and summary.json;
#   - an owed step (exit 77) is never a pass: OWED in the reports, the verdict OWED, exit code 1;
#   - under a call budget (VX_GPU_CALL_S, 570 s under the device tool) the steps that no longer fit are "not run: no
#     time left", and the reports written after every step survive a run killed part way;
#   - under the device tool ($OUT set) the reports come back as at most 8 files (its limit): summary.md,
#     results.tar.gz holding summary.json, and logs.tar.gz;
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
# the bounds: quick = the quick limits, one call; the full run (and --first) in the calls --plan prints
read -r full quick < <(bash ci/gpu.sh --list | awk '
    / on demand / {next}
    {full += $2; if ($4 == "quick") quick += $5}
    END {print full, quick}')
[ "$quick" -le 150 ] || fail "the --quick limits add up to $quick s, beyond the 150 s ci/gpu.sh states"
regular=$(bash ci/gpu.sh --list | awk '!/ on demand / {printf "%s,", $1}')
for flag in "" --first; do
    plan=$(bash ci/gpu.sh --plan $flag) || fail "ci/gpu.sh --plan $flag failed"
    covered=$(sed -n 's/.* --only \([^ ]*\) .*/\1/p' <<<"$plan" | tr '\n' ',')
    [ "$covered" = "$regular" ] || fail "--plan $flag covers '$covered', not every regular step once in order ('$regular')"
    sed -n 's/.*limits \([0-9]*\) s$/\1/p' <<<"$plan" | while read -r l; do [ "$l" -le 535 ] || exit 1; done ||
        fail "--plan $flag has a call beyond 535 s of limits: $plan"
    [ -z "$flag" ] || [[ $(head -1 <<<"$plan") == "bash ci/gpu.sh --first --only "* ]] || fail "--plan --first: $plan"
    echo "plan${flag:+ $flag}: $(wc -l <<<"$plan") call(s)"
done
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

# --first: every limit x 3, the mode in the reports, each step's time and a suggested limit from it
VX_GPU_WORK=$scratch/w6 bash ci/gpu.sh --dry-run --first --only libs,ops --results "$scratch/first" >/dev/null 2>&1 ||
    fail "--first dry run failed"
/usr/bin/python3 - "$scratch/first/summary.json" "$(bash ci/gpu.sh --list | awk '$1 == "ops" {print $2}')" <<'PY' ||
import json, sys
d = json.load(open(sys.argv[1]))
ops = next(s for s in d["steps"] if s["step"] == "ops")
assert d["mode"] == "first dry-run", d["mode"]
assert ops["limit_s"] == 3 * int(sys.argv[2]), ops
assert ops["result"] == "pass" and ops["suggested_limit_s"] >= 5, ops
PY
    fail "--first: the limits are not x 3, or no suggested limit: $(cat "$scratch/first/summary.json")"
grep -q '^| ops | pass | .* s | .* s | [0-9]* s |' "$scratch/first/summary.md" || fail "summary.md lacks the suggested limit"
echo "first: limits x 3, suggested limits in the reports"

# an owed step is never a pass
VX_GPU_DRY_OWE=nccl VX_GPU_WORK=$scratch/w7 bash ci/gpu.sh --dry-run --only libs,nccl --results "$scratch/owed" \
    >"$scratch/owed.log" 2>&1
rc=$?
[ $rc = 1 ] || fail "an owed step: exit code $rc, not 1"
got=$(results owed)
[[ $got == OWED* && $got == *" libs=pass "* && $got == *" nccl=owed "* && $got != *=fail* ]] ||
    fail "an owed step: summary.json says '$got'"
grep -q '^| nccl | \*\*OWED\*\* |' "$scratch/owed/summary.md" || fail "summary.md does not show nccl as OWED"
echo "owed: nccl=owed, verdict OWED (exit 1)"

# a call budget: steps that would run past it are left for later, with the way to run them; and the reports written
# after every step are there when the run is killed part way
VX_GPU_CALL_S=30 VX_GPU_WORK=$scratch/w8 bash ci/gpu.sh --dry-run --only driver,libs,detect,unit,ops \
    --results "$scratch/budget" >/dev/null 2>&1 || fail "a dry run under a call budget failed"
got=$(results budget)
[[ $got == "PASS driver=pass libs=pass detect=not-run unit=not-run ops=not-run"* ]] || fail "call budget: $got"
grep -q '^| detect | not run | .* | no time left in this call .*: ci/gpu.sh --only detect |' "$scratch/budget/summary.md" ||
    fail "summary.md does not say how to run the step left for later"
VX_GPU_DRY_HANG=unit VX_GPU_WORK=$scratch/w9 bash ci/gpu.sh --dry-run --only driver,libs,unit --results "$scratch/cut" \
    >/dev/null 2>&1 &
cut=$!
for _ in $(seq 50); do grep -q '"step": "libs"' "$scratch/cut/summary.json" 2>/dev/null && break; sleep 0.2; done
kill -- "$cut" 2>/dev/null
wait "$cut" 2>/dev/null
[[ $(results cut) == "PASS driver=pass libs=pass"* ]] || fail "the reports of a run killed part way: $(results cut)"
echo "call budget: $got; a run killed part way keeps the finished steps' reports"

mkdir -p "$scratch/out"
OUT=$scratch/out VX_GPU_WORK=$scratch/w10 bash ci/gpu.sh --dry-run --only libs,profile >/dev/null 2>&1 ||
    fail "a dry run under the device tool (\$OUT set) failed"
[ "$(find "$scratch/out" -type f | wc -l)" -le 8 ] || fail "more than 8 files in \$OUT: $(ls "$scratch/out")"
for f in summary.md results.tar.gz logs.tar.gz; do [ -f "$scratch/out/$f" ] || fail "no $f in \$OUT"; done
# the listing whole before grep -q reads it: tar writes a line at a time, and under pipefail the SIGPIPE it got when
# grep -q had found the line and quit failed this check in 10 runs of 200
grep -q 'results/summary.json$' <<<"$(tar -tzf "$scratch/out/results.tar.gz")" || fail "results.tar.gz has no summary.json"
for bad in "--only nosuchstep" "--frobnicate" "--results"; do
    # shellcheck disable=SC2086
    out=$(bash ci/gpu.sh $bad 2>&1)
    rc=$?
    [ $rc = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] || fail "ci/gpu.sh $bad: exit $rc, '$out'"
done
echo "ok: ci/gpu.sh --dry-run marks a failing step FAIL and a hanging one TIMEOUT while the other steps run"

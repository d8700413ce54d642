#!/usr/bin/env bash
# ci/fuzz.sh [SECONDS] [TARGET...]: builds the libFuzzer targets (make fuzz: clang, ASan + UBSan) and runs each for
# SECONDS (default 10) on its committed seed corpus (tests/fuzz/corpus/<name>) plus a working corpus in
# build/fuzz/corpus/<name> that keeps what earlier runs found. Prints one line per target with its executions,
# executions per second and new inputs; a crash, sanitizer report, hang (-timeout) or abort fails the run, and the
# input that did it is kept under build/fuzz/findings/<name>/ (add it to the seed corpus once fixed).
# Run from anywhere; CI runs `ci/fuzz.sh 8` inside `make test`, and longer runs are `ci/fuzz.sh 600`.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
shift || true
BUILD=${BUILD:-build}
make --no-print-directory -s fuzz BUILD="$BUILD" || { echo "fuzz: build failed"; exit 1; }
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config checkpoint cli tfrecord manifest volume safetensors)

failed=0
for name in "${targets[@]}"; do
    bin="$BUILD/fuzz/fuzz_$name"
    work="$BUILD/fuzz/corpus/$name" findings="$BUILD/fuzz/findings/$name"
    mkdir -p "$work" "$findings"
    # Refused configs and command lines end through a longjmp that skips the frees of a process about to exit
    # (cJSON trees, the file buffer): leak detection would report those, so it is on only for the other targets.
    leaks=1
    case $name in config|cli|manifest|safetensors) leaks=0 ;; esac
    log="$BUILD/fuzz/$name.log"
    ASAN_OPTIONS="detect_leaks=$leaks${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
        "$bin" "$work" "tests/fuzz/corpus/$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -detect_leaks=$leaks -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$findings/" > "$log" 2>&1
    rc=$?
    stat() { sed -n "s/^stat::$1: *\([0-9]*\).*/\1/p" "$log" | tail -1; }
    execs=$(stat number_of_executed_units) rate=$(stat average_exec_per_sec) new=$(stat new_units_added)
    if [ $rc -eq 0 ]; then
        echo "fuzz_$name: ${secs} s, ${execs:-?} executions (${rate:-?}/s), ${new:-?} new inputs, no findings"
    else
        failed=1
        echo "fuzz_$name: FAILED (exit $rc) after ${execs:-?} executions; the input is in $findings/:"
        grep -E "ERROR|SUMMARY|runtime error|Test unit written|deadly signal|timeout" "$log" | head -12
    fi
done
exit $failed

#!/usr/bin/env bash
# ci/test.sh: runs every test: the C unit tests (cmocka binaries in build/tests/), the integration tests
# (pytest over tests/integration, which drive build/voxscale and compare with PyTorch and TensorBoard) and the
# Docker check (ci/docker.sh; VX_SKIP_DOCKER=1 skips it, counted as skipped).
# Ends with one "N passed, N failed" line over all of them.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
passed=0; failed=0; skipped=0; failed_names=(); skipped_names=(); why=()

# Each part's wall time, printed as it ends and once more in a table at the end: where CI's minutes go, so the suite
# can be kept inside its budget on the slowest machine type (about 45 minutes).
stage_name=""; stage_start=$SECONDS; stage_times=()
stage() {
    if [ -n "$stage_name" ]; then
        local took=$((SECONDS - stage_start))
        echo "--- $stage_name: ${took} s"; stage_times+=("$(printf '%5d s  %s' "$took" "$stage_name")")
    fi
    stage_name=$1; stage_start=$SECONDS
    [ -n "$stage_name" ] && echo "=== $stage_name"
}

# The instruction set everything below runs on (issue 41: results that depend on the kernels' arithmetic are read
# against it); ci/isa_sweep.sh, near the end, runs the ISA-sensitive tests again under each lower level.
echo "=== ISA: $("$BUILD/voxscale" detect --config configs/test/tiny.json --device cpu 2>&1 | grep -m1 '^device:' ||
               echo "voxscale detect printed no device line")"

# The Docker check (ci/docker.sh) starts first and runs beside the parts up to pytest: on a fresh machine much of its
# 8 minutes waits on debootstrap, apt and pip in its image builds rather than on the CPU, so those parts absorb it
# (2-core Xeon, fresh data root: 498 s alone after 926 s of the other parts; beside them all of it took 1242 s,
# the check itself 747 s). It is collected before pytest, so the timed gates (bench kernels' tests, the regression
# gate) run with the cores to themselves. Its own "docker check:" lines are printed when it is collected.
docker_pid=""; docker_rc=""; docker_logs=""; docker_t0=$SECONDS
case "${VX_SKIP_DOCKER:-0}" in
    0) docker_logs=$(mkdir -p "$BUILD/docker-check" && cd "$BUILD/docker-check" && pwd)
       VX_DOCKER_LOGS="$docker_logs" VX_DOCKER_BESIDE="the parts of ci/test.sh up to pytest" bash ci/docker.sh \
           > "$docker_logs/output.txt" 2>&1 &
       docker_pid=$!
       trap '[ -z "$docker_pid" ] || kill -TERM "$docker_pid" 2>/dev/null' EXIT ;;
esac

stage "unit tests (build/tests/test_*)"
# Each cmocka binary prints "[  PASSED  ] N test(s)." and, on failure, "[  FAILED  ] N test(s)..."; count the
# test cases, and count a binary that dies before its summary as one failure.
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    echo "=== $t"
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    # A binary that cannot run here, whole or in part (the CUDA tests without a GPU; test_backend_ops's CUDA half),
    # prints "skipped: <why>" and exits 0; the tests it did run count as usual.
    if grep -q '^skipped: ' <<<"$out"; then # not printf | grep -q: under pipefail printf's SIGPIPE reads as no match
        skipped=$((skipped + 1)); skipped_names+=("$(basename "$t")")
    fi
    if [ $rc -ne 0 ]; then
        failed_names+=("$t")
        [ -n "$f" ] && [ "$f" -gt 0 ] || failed=$((failed + 1))
    fi
done

# The layout's house rules (tests/tools/check_layers.py): includes and (from the objects' symbols) calls point down,
# no circles between folders, files or source files, no file over 600 lines. One test.
stage "layers (tests/tools/check_layers.py: includes and calls down, no circles, no file over 600 lines)"
if python3 tests/tools/check_layers.py --report --objects "$BUILD"; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names+=("layers"); fi

# The CUDA backend's own kernels, run on the CPU under a host emulation of the execution model against the CPU
# ops: checks their indexing, partitions and reductions on machines without a GPU (the real GPU tests are
# the CUDA halves of test_backend_ops, test_cuda_backend and tests/integration/test_cuda.py, which skip here). One
# test, 5 to 7 minutes in CI on 2 cores beside the Docker check (the sanitizer builds, then some 2000 op cases in three
# storage types).
stage "tests/tools/cuda_emu (CUDA kernels under host emulation)"
if emu_out=$(bash tests/tools/cuda_emu/run.sh 2>&1); then
    printf '%s\n' "$emu_out"; passed=$((passed + 1))
else
    printf '%s\n' "$emu_out"; failed=$((failed + 1)); failed_names+=("cuda_emu")
fi

# The CPU-only build (make CUDA=0: no nvcc, no cuDNN) must still compile and train: its CUDA entry points are the
# stubs, the CUDA tests say why they skip. One test, about 30 s on 2 cores. It is the x86-64-v3 (AVX2) build that
# test_regress_gate.py, the ISA sweep's avx2 level and the regression gate run too (same flags, same folder): built
# once here, not three times (each build about 26 s on 2 cores).
stage "CPU-only build (make CUDA=0)"
cpu_build="$BUILD/isa-x86-64-v3"
rm -rf "$cpu_build/run" # a fresh run directory each time: a used one is refused
if cpu_out=$( { make --no-print-directory -s -j"$(nproc)" CUDA=0 ARCH=-march=x86-64-v3 BUILD="$cpu_build" all \
                    "$cpu_build/tests/test_cuda_backend" &&
                "$cpu_build/voxscale" detect --config configs/default.json &&
                "$cpu_build/tests/test_cuda_backend" &&
                "$cpu_build/voxscale" train --config configs/default.json --set train.steps=2 --set train.val_every=0 \
                    --set output.dir="$cpu_build/run" --set output.tensorboard=0; } 2>&1 ) &&
   grep -q '^cuda: not built in' <<<"$cpu_out" && grep -q '^skipped: no CUDA device (this build has no CUDA' <<<"$cpu_out"; then
    echo "ok: the CPU-only build compiles, detects no CUDA, skips the CUDA tests and trains"; passed=$((passed + 1))
else
    printf '%s\n' "$cpu_out" | tail -30; failed=$((failed + 1)); failed_names+=("cpu-only build")
fi

# The fuzz targets (tests/fuzz: config reader, checkpoint loader, command line, TensorBoard records) under ASan and
# UBSan, a few seconds each on the committed seed corpus: every input that once failed still passes, and a
# regression in the parsers' hardening is likely found. One test per target; `ci/fuzz.sh 600` runs them longer.
stage "fuzz targets (ci/fuzz.sh ${VX_FUZZ_SECONDS:=8})"
fuzz_out=$(bash ci/fuzz.sh "$VX_FUZZ_SECONDS" 2>&1); printf '%s\n' "$fuzz_out"
fuzz_ok=$(grep -c ', no findings$' <<<"$fuzz_out"); fuzz_bad=$(grep -c ': FAILED' <<<"$fuzz_out")
passed=$((passed + fuzz_ok)); failed=$((failed + fuzz_bad))
if [ "$fuzz_ok" -eq 0 ] && [ "$fuzz_bad" -eq 0 ]; then failed=$((failed + 1)); failed_names+=("fuzz build"); fi
[ "$fuzz_bad" -eq 0 ] || failed_names+=("fuzz")

# The hostile-data, data and rank-agreement tests once more on a sanitizer build (make asan: ASan and UBSan, every
# report fatal, CPU-only, -O1): the readers, the manifest, the run directory and the ranks' rendezvous under input
# meant to break them (issue 24). One test, about a minute on 2 cores (the build, then some 80 tests).
stage "sanitizer build: data and rank tests (make asan)"
if asan_out=$( { make --no-print-directory -s asan BUILD="$BUILD" &&
                 ASAN_OPTIONS=detect_leaks=0 VOXSCALE="$BUILD/asan/voxscale" \
                 VX_DATA_PROBE="$BUILD/asan/tests/tools/data_probe" .venv/bin/python -m pytest -q -p no:cacheprovider \
                     tests/integration/test_data_hostile.py tests/integration/test_data.py \
                     tests/integration/test_ranks_agree.py; } 2>&1 ); then
    printf '%s\n' "$asan_out" | tail -3; passed=$((passed + 1))
else
    printf '%s\n' "$asan_out" | tail -40; failed=$((failed + 1)); failed_names+=("asan data and rank tests")
fi

# Every family's commands whole on the same sanitizer build (ci/sanitize_sweep.py): ae3d, resnet3d with each task,
# vit3d and vit3d_diffusion through train with validation, resume, export, --init-from, predict, ZeRO and ckpt
# consolidate, bench step; two TCP ranks; a SIGINT'd run. Any sanitizer report or unexpected exit fails it (issue 34:
# an out-of-bounds read on every resnet3d run went unseen while the sanitizers covered only the op table). One test,
# its last line the case count; about 20-60 s on 2 cores after the build above.
stage "sanitizer build: every family's commands (ci/sanitize_sweep.py)"
sweep_out=$(BUILD="$BUILD" python3 ci/sanitize_sweep.py 2>&1); sweep_rc=$?
printf '%s\n' "$sweep_out" | tail -60
if [ $sweep_rc -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names+=("sanitizer sweep")
    while IFS= read -r l; do why+=("sanitizer sweep: $l"); done < <(printf '%s\n' "$sweep_out" | grep -E '^FAILED ' |
        head -6); fi

# ci/gpu.sh without a GPU (tests/tools/gpu/*.sh say what each checks): the build stops, and says what to set, where
# nvcc exists but cuDNN does not; the runner's bookkeeping and reports in a dry run with a planted failure and a
# planted hang; the driver check (ci/gpu.sh's first step) against stand-in probes of a GPU machine; --prepare against
# CUDA laid out as on the GPU device (cuDNN, CUPTI, cuBLAS from Python's nvidia-* wheels), whose archive must resolve
# every library through the carried path. Four tests; the last builds everything with nvcc once more (about a
# minute on 2 cores, incremental after that).
for check in build_not_silent dry_run driver_check prepare_pip; do
    stage "tests/tools/gpu/$check.sh"
    if gpu_out=$(bash "tests/tools/gpu/$check.sh" "$BUILD/ci-gpu/$check" 2>&1); then
        printf '%s\n' "$gpu_out"; passed=$((passed + 1))
    else
        printf '%s\n' "$gpu_out" | tail -40; failed=$((failed + 1)); failed_names+=("gpu/$check")
    fi
done

# The Docker check started at the top: wait for it here (its time beside the other parts is in its own last line).
stage "Docker image and compose.yaml (ci/docker.sh, started at the top; this is the wait for it)"
case "${VX_SKIP_DOCKER:-0}" in
    1) echo "skipped: VX_SKIP_DOCKER=1"; skipped=$((skipped + 1)) ;;
    0) wait "$docker_pid"; docker_rc=$?; docker_pid=""
       grep '^docker check: ' "$docker_logs/output.txt"
       echo "docker check: ran beside the parts above, $((SECONDS - docker_t0)) s from start to collection"
       if [ "$docker_rc" -eq 0 ]; then
           passed=$((passed + 1))
       else
           echo "--- the end of its output ($docker_logs/output.txt):"; tail -40 "$docker_logs/output.txt"
           failed=$((failed + 1)); failed_names+=("docker")
       fi ;;
    *) echo "VX_SKIP_DOCKER must be 0 or 1, not \"$VX_SKIP_DOCKER\""; failed=$((failed + 1)); failed_names+=("docker") ;;
esac

# (tests/integration/test_docs.py is among them: the doc-tests, each runnable block of README.md and docs/*.md one case)
# In two runs. First every test but the timed ones, on one pytest-xdist worker per core (at most 8), a file at a time
# per worker (--dist loadfile: a file's module fixtures are made once, its tests run in order): the tests use 1.2
# cores on average, waiting on process starts, MPI and TCP rendezvous and file I/O, so two workers on 2 cores took the
# untimed files from 669 to 547 s, and with the slowest files started first (conftest.py) further. Then the timed
# tests (marker `timed`: bench kernels' gates, the regression gate) alone, as before, with the cores to themselves.
# Without pytest-xdist (ci/deps.sh installs Debian's) the first run is serial, and says so.
pytest_run() { # REPORT ARGS...: one pytest run into a JUnit report; returns pytest's exit code
    local report=$1; shift
    .venv/bin/python -m pytest -q -rsfE --durations=25 -p no:cacheprovider --junitxml="$report" "$@"
}
stage "pytest tests/integration (all but the timed tests, on xdist workers)"
workers=$(nproc); [ "$workers" -le 8 ] || workers=8
if .venv/bin/python -c 'import xdist' 2>/dev/null; then xdist=(-n "$workers" --dist loadfile)
else xdist=(); echo "pytest-xdist is not installed (ci/deps.sh installs python3-pytest-xdist): one worker"; fi
report=$(mktemp); report_timed=$(mktemp)
pytest_run "$report" "${xdist[@]}" -m "not timed" tests/integration; rc=$?
stage "pytest tests/integration (the timed tests, alone)"
pytest_run "$report_timed" -m timed tests/integration; rc_timed=$?
reports=(); for r in "$report" "$report_timed"; do [ -s "$r" ] && reports+=("$r"); done
if [ ${#reports[@]} -gt 0 ]; then # a run that wrote no report fails below by its exit code
    # one parse of the reports (ci/junit_summary.py): the counts, the doc-tests' own line, the failing cases
    { read -r ptests pfail perr pskip; read -r doc_line; echo "$doc_line"
      while IFS= read -r l; do why+=("pytest: $l"); done; } < <(/usr/bin/python3 ci/junit_summary.py "${reports[@]}")
    passed=$((passed + ptests - pfail - perr - pskip)); failed=$((failed + pfail + perr)); skipped=$((skipped + pskip))
fi
for r in "$rc" "$rc_timed"; do # 5: nothing collected
    [ "$r" -eq 0 ] || [ "$r" -eq 5 ] || { [ $failed -gt 0 ] || { failed=$((failed + 1)); failed_names+=("pytest rc=$r"); }; }
done
rm -f "$report" "$report_timed"

# The unit tests and the ISA-sensitive integration files again under each ISA level this CPU has below its own
# (ci/isa_sweep.sh: a build per level, VX_CPU_ISA and OPENBLAS_CORETYPE capping the dispatch), so an AVX-512 machine
# also proves the AVX2 paths. One test; on an AVX2 machine there is no lower level and it says so.
stage "ISA sweep (ci/isa_sweep.sh: the ISA-sensitive tests under each lower ISA level)"
isa_out=$(bash ci/isa_sweep.sh 2>&1); isa_rc=$?
printf '%s\n' "$isa_out" | grep -E '^(device:|isa |--- isa|FAILED|ERROR)'
if [ $isa_rc -eq 0 ]; then passed=$((passed + 1)); else
    printf '%s\n' "$isa_out" | tail -60; failed=$((failed + 1)); failed_names+=("isa sweep")
    while IFS= read -r l; do why+=("isa sweep: $l"); done < <(printf '%s\n' "$isa_out" |
        grep -E '^(isa [a-z0-9_]+: (FAILED|ERROR)|--- isa|isa [a-z0-9_]+: the build failed)' | head -6); fi

# The regression gate (ci/regress): this tree against its parent commit, both built here (x86-64-v3, CPU-only; the
# parent cached by commit in /var/tmp/voxscale-regress), bench kernels and bench step of the default config timed in
# 3 alternating pairs (an op regresses when slower in every pair) and each op's instructions counted under callgrind
# (tiny and resnet-tiny configs; no load moves them); then the committed baseline of this device, where there is one,
# as a second opinion (fractions of the ceilings measured in the same run; a failure runs once more, and each figure
# counts at the better of its two runs). A CPU with no baseline is gated by the parent comparison alone; "skipped"
# only where there is neither (not a git checkout). About 5 minutes on 2 quiet cores (two builds, valgrind).
stage "regression gate (ci/regress: against the parent commit, then results/<device>/baseline*.json)"
# The ISA sweep's avx2 build is the gate's build of this tree (CPU-only, -march=x86-64-v3, the same make line):
# reused where the sweep built it and passed, one build fewer (about 3 minutes on 2 cores).
regress_args=(--device cpu --attempts 2)
[ "$isa_rc" -eq 0 ] && [ -x "$BUILD/isa-x86-64-v3/voxscale" ] && regress_args+=(--new-bin "$BUILD/isa-x86-64-v3/voxscale")
regress_out=$(python3 ci/regress "${regress_args[@]}" 2>&1); regress_rc=$?
printf '%s\n' "$regress_out"
case $regress_rc in
    0) passed=$((passed + 1)) ;;
    77) skipped=$((skipped + 1)); skipped_names+=("regress") ;;
    *) failed=$((failed + 1)); failed_names+=("regress")
       while IFS= read -r l; do why+=("regress: $l"); done < <(printf '%s\n' "$regress_out" |
           grep -E 'REGRESSED|MISSING|FAILED|exited|failed' | head -6) ;;
esac

stage ""
echo "=== wall time per part ($((SECONDS / 60)) min in all)"; printf '%s\n' "${stage_times[@]}"

# CI shows only the end of this output: the failures' own lines come last, a few per failing part
for l in "${why[@]}"; do echo "why: ${l:0:300}"; done
[ ${#failed_names[@]} -eq 0 ] || echo "failed: ${failed_names[*]}"
[ ${#skipped_names[@]} -eq 0 ] || echo "skipped (unit binaries, gate): ${skipped_names[*]}"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]

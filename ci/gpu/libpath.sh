# shellcheck shell=bash
# ci/gpu/libpath.sh (sourced by ci/gpu.sh and ci/gpu/prepare.sh): where the carried GPU build finds its shared
# libraries, and the check that it finds every one of them there.
#   vx_lib_path STAGE   the LD_LIBRARY_PATH for a carried build: STAGE/lib (what ci/gpu.sh --prepare gathered),
#                       then the lib dirs of $NVIDIA_PYTHON's nvidia-* pip packages (cuDNN, CUPTI, cuBLAS, NCCL:
#                       the same files PyTorch loads), then the toolkit's ($CUDA_HOME/lib64, extras/CUPTI/lib64)
#   vx_cupti_lib        the toolkit's libcupti ($CUDA_HOME's, where the build found its own: what the binary is built
#                       to read), for VX_CUPTI_LIB: the binary loads CUPTI with dlopen and takes that one first, ahead
#                       of a pip wheel's of another minor version on the library path; empty when the toolkit has none
#   vx_ldd_check PATH BINARY...
#                       ldd each binary with LD_LIBRARY_PATH=PATH; fails when a library is not found, or is found
#                       outside PATH while it is not one every Linux system has (glibc's, libstdc++, libgcc_s, and
#                       the two of STAGE/lib-common: zlib and libgomp): such a library came from this machine's
#                       /usr/lib and would be missing on another. Prints one line per binary.

# Libraries taken from the machine itself: the C runtime, and the C++ runtime (a newer one on the GPU machine is
# backward compatible; an older one carried there would break its PyTorch).
VX_SYSTEM_LIBS=" linux-vdso.so.1 libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 libutil.so.1 "
VX_SYSTEM_LIBS+=" ld-linux-x86-64.so.2 libstdc++.so.6 libgcc_s.so.1 "
# Present on practically every system, so carried only as a fallback (STAGE/lib-common), used when missing there:
# an older zlib or libgomp ahead of the machine's own could break the machine's Python.
VX_COMMON_LIBS=" libz.so.1 libgomp.so.1 "
# Provided by the GPU machine (driver, toolkit, pip wheels); never carried.
# shellcheck disable=SC2034  # used by prepare.sh
VX_CUDA_LIB_RE='^lib(cuda|cudnn|cupti|cublas|cublasLt|nccl|cudart|nvrtc|nvJitLink|nvperf_host|nvperf_target|checkpoint|pcsamplingutil)[._]'

NVIDIA_PYTHON=${NVIDIA_PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

vx_nvidia_libdirs() {
    # shellcheck disable=SC2086  # NVIDIA_PYTHON may be "env PYTHONPATH=... python3"
    $NVIDIA_PYTHON - <<'PY' 2>/dev/null
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
for root in nvidia.__path__:
    for sub in ("cudnn", "cu13", "cuda_cupti", "cublas", "nccl", "cuda_runtime"):
        d = os.path.join(root, sub, "lib")
        if os.path.isdir(d):
            print(d)
PY
}

vx_lib_path() {
    local stage=$1 dirs=() d
    dirs+=("$stage/lib")
    while read -r d; do dirs+=("$d"); done < <(vx_nvidia_libdirs)
    for d in "$CUDA_HOME/lib64" "$CUDA_HOME/extras/CUPTI/lib64"; do [ -d "$d" ] && dirs+=("$d"); done
    local IFS=:
    echo "${dirs[*]}"
}

vx_cupti_lib() {
    local f
    for f in "$CUDA_HOME/extras/CUPTI/lib64/libcupti.so.${VX_CUDA_MAJOR:-13}" "$CUDA_HOME/lib64/libcupti.so.${VX_CUDA_MAJOR:-13}" \
        "$CUDA_HOME/targets/x86_64-linux/lib/libcupti.so.${VX_CUDA_MAJOR:-13}"; do
        [ -e "$f" ] && { echo "$f"; return 0; }
    done
    return 0
}

vx_ldd_check() {
    local path=$1 bad=0 b line name where dir ok d pdirs
    shift
    IFS=: read -r -a pdirs <<<"$path"
    for b in "$@"; do
        local out problems=() cudnn=""
        if ! out=$(LD_LIBRARY_PATH=$path ldd "$b" 2>&1) || ! grep -q '=>' <<<"$out"; then
            echo "ldd $b: $out"
            bad=1
            continue
        fi
        while read -r line; do
            case $line in *"=>"*) ;; *) continue ;; esac
            name=${line%% *}
            where=$(sed -n 's/.*=> \(.*\) (0x.*/\1/p' <<<"$line")
            if [[ $line == *"not found"* ]]; then problems+=("$name not found"); continue; fi
            [[ $name == libcudnn.so* ]] && cudnn=$where
            [[ $VX_SYSTEM_LIBS == *" $name "* || $VX_COMMON_LIBS == *" $name "* ]] && continue
            dir=${where%/*}
            ok=0
            for d in "${pdirs[@]}"; do [ "$d" = "$dir" ] && ok=1; done
            [ $ok = 1 ] || problems+=("$name from $where, outside the library path")
        done <<<"$out"
        if [ ${#problems[@]} -gt 0 ]; then
            echo "ldd $(basename "$b"): ${problems[*]}"
            bad=1
        else
            echo "ldd $(basename "$b"): $(grep -c '=>' <<<"$out") libraries, all found${cudnn:+; cuDNN from $cudnn}"
        fi
    done
    return $bad
}

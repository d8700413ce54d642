#!/usr/bin/env bash
# docker/standin-images.sh: builds local stand-ins for NVIDIA's cuDNN devel and runtime images, for CI machines
# that reach Debian's packages but no image registry (ci/docker.sh calls it).
#   usage: docker/standin-images.sh ROOTFS_DIR DEVEL_TAG RUNTIME_TAG
#          docker/standin-images.sh --id    prints the identity the images are labelled with (voxscale.standin):
#                                           this script's own hash and the CUDA files it copies, so that a caller
#                                           holding older stand-ins knows to rebuild them
# Each stand-in is ROOTFS_DIR (a debootstrapped Debian 12) plus this machine's CUDA toolkit and cuDNN, laid out as
# NVIDIA's Ubuntu images lay them out, so that the project's Dockerfile builds against them unchanged:
#   /usr/local/cuda-13.0 (symlink /usr/local/cuda), files in targets/x86_64-linux/{include,lib}, include and lib64
#   symlinks to them; cuDNN's headers in /usr/include (through x86_64-linux-gnu/, as its packages install them) and
#   its libraries in /usr/lib/x86_64-linux-gnu; NCCL beside cuDNN; NVIDIA's environment variables.
#   devel:   nvcc (bin, nvvm), every header, static cudart and the device runtime, cuBLAS, CUPTI, NVRTC, nvJitLink
#   runtime: the shared libraries only (cudart, cuBLAS, NVRTC, nvJitLink, cuDNN, NCCL): no CUPTI, as in NVIDIA's
# What they leave out: cuFFT, cuRAND, cuSOLVER, cuSPARSE and NPP (voxscale links none of them) and, of course,
# Ubuntu: the base is Debian 12, so package names that differ (libpng16-16t64) are passed as build arguments.
set -euo pipefail

die() { echo "standin-images: $*" >&2; exit 2; }
CUDA_SRC=${CUDA_SRC:-/usr/local/cuda}
DOCKER=${DOCKER:-/usr/bin/docker}
[ -x "$CUDA_SRC/bin/nvcc" ] || die "no CUDA toolkit at $CUDA_SRC (no bin/nvcc)"
cuda_dir=$(readlink -f "$CUDA_SRC")
id=$( { sha256sum "$0" | cut -d' ' -f1; cd "$cuda_dir" && ls -lLR --time-style=+%s bin include lib64; } |
      sha256sum | cut -c1-16)
if [ "${1:-}" = --id ]; then echo "$id"; exit 0; fi
[ $# -eq 3 ] || die "usage: $0 ROOTFS_DIR DEVEL_TAG RUNTIME_TAG (or --id)"
rootfs=$1 devel_tag=$2 runtime_tag=$3
[ -x "$rootfs/usr/bin/apt-get" ] || die "$rootfs is not a Debian root file system (no usr/bin/apt-get)"
src_lib=$cuda_dir/lib64
src_inc=$cuda_dir/include
[ -e "$src_inc/cudnn.h" ] || src_inc=$cuda_dir/targets/x86_64-linux/include
[ -e "$src_inc/cudnn.h" ] || die "no cudnn.h in $cuda_dir/include: cuDNN must be installed with the toolkit"
ver=$("$CUDA_SRC/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
[ -n "$ver" ] || die "cannot read the CUDA release from nvcc --version"

work=$(mktemp -d "${TMPDIR:-/var/tmp}/vx-standin.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Files are hard-linked into the staging trees where the file system allows it (nothing here writes to them), so
# staging 2 GB of libraries costs no copy; elsewhere they are copied.
put() {  # put SRC... DESTDIR
    local dest=${*: -1}
    mkdir -p "$dest"
    cp -a --link "${@:1:$#-1}" "$dest/" 2>/dev/null || cp -a "${@:1:$#-1}" "$dest/"
}

stage() {  # stage DIR devel|runtime
    local d=$1 kind=$2
    local cuda=$d/usr/local/cuda-$ver tl=$d/usr/local/cuda-$ver/targets/x86_64-linux/lib
    local ti=$d/usr/local/cuda-$ver/targets/x86_64-linux/include
    local ml=$d/usr/lib/x86_64-linux-gnu mi=$d/usr/include/x86_64-linux-gnu
    cp -a --link "$rootfs" "$d" 2>/dev/null || cp -a "$rootfs" "$d"
    mkdir -p "$tl" "$ml"
    ln -s "cuda-$ver" "$d/usr/local/cuda"
    ln -s targets/x86_64-linux/lib "$cuda/lib64"
    (cd "$src_lib" && put libcudart.so.* libcublas.so.* libcublasLt.so.* libnvrtc.so.* libnvrtc-builtins.so.* \
                          libnvJitLink.so.* "$tl")
    (cd "$src_lib" && put libcudnn*.so.* libnccl.so.* "$ml")
    if [ "$kind" = devel ]; then
        mkdir -p "$ti" "$mi"
        ln -s targets/x86_64-linux/include "$cuda/include"
        put "$cuda_dir/bin" "$cuda_dir/nvvm" "$cuda"
        # every header but cuDNN's and NCCL's, which NVIDIA's images install with their own packages
        (cd "$src_inc" && put $(ls | grep -v -e '^cudnn' -e '^nccl') "$ti")
        (cd "$src_lib" && put libcudart.so libcudart_static.a libcudadevrt.a libculibos.a libcublas.so \
                              libcublasLt.so libcupti.so libcupti.so.* libnvperf_host.so libnvperf_target.so \
                              libpcsamplingutil.so libcheckpoint.so libnvrtc.so libnvJitLink.so stubs "$tl")
        (cd "$src_lib" && put libcudnn*.so libnccl.so "$ml")
        (cd "$src_inc" && put cudnn*.h "$mi")
        (cd "$src_inc" && put nccl.h "$d/usr/include")
        local h
        for h in "$mi"/cudnn*.h; do ln -s "x86_64-linux-gnu/${h##*/}" "$d/usr/include/${h##*/}"; done
    fi
    echo "/usr/local/cuda/targets/x86_64-linux/lib" > "$d/etc/ld.so.conf.d/000_cuda.conf"
    ldconfig -r "$d"
}

import() {  # import DIR TAG
    tar -C "$1" -c . | "$DOCKER" import \
        --change "ENV PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --change "ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64" \
        --change "ENV NVIDIA_VISIBLE_DEVICES=all" \
        --change "ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility" \
        --change "ENV CUDA_VERSION=$ver" \
        --change 'CMD ["/bin/bash"]' \
        --change "LABEL voxscale.standin=$id" \
        --message "voxscale CI stand-in: Debian 12 + the host's CUDA $ver and cuDNN" \
        - "$2" >/dev/null
    echo "standin-images: $2 ($(du -sh --apparent-size "$1" | cut -f1))"
}

stage "$work/runtime" runtime
import "$work/runtime" "$runtime_tag"
rm -rf "$work/runtime"
stage "$work/devel" devel
import "$work/devel" "$devel_tag"

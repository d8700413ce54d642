# Dockerfile: the voxscale images, one multi-stage file (docs/training-and-configs.md "Docker"; compose.yaml runs them).
#   docker build -t voxscale .                          the trainer (stage runtime, the last one)
#   docker build --target tensorboard -t voxscale-tensorboard .
#   docker build --target test -t voxscale-test .       the test suite, GPU tests included when GPUs are given
#   docker build --target report -t voxscale-report .   the benchmark reports (charts, one page per device)
# The base images are build arguments so that CI builds this same file against local stand-ins of NVIDIA's
# images (ci/docker.sh), since image registries cannot be reached from our machines.
# There is deliberately no "# syntax=" line: it makes BuildKit fetch a frontend image, which fails offline.

ARG BUILDER_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
ARG RUNTIME_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04

# ---- build: voxscale with the CUDA backend ----------------------------------------------------------------------
FROM ${BUILDER_IMAGE} AS build
# An explicit instruction set, not the Makefile's -march=native, which would tie the image to the build machine's
# CPU. x86-64-v3 (AVX2, FMA) is what every current GPU host has.
ARG ARCH=-march=x86-64-v3
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# These names are the same on Ubuntu 24.04 and Debian 12 (CI's stand-in base). Open MPI is built in (mk/mpi.mk), so
# the image's trainer runs as ranks under mpirun or srun, and so that the test stage, whose packages include Open
# MPI, finds the same build mode and rebuilds nothing.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential pkg-config libcjson-dev libopenblas-dev protobuf-c-compiler libprotobuf-c-dev \
        libpng-dev zlib1g-dev libnifti2-dev libdnnl-dev libturbojpeg0-dev libopenmpi-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY mk/ mk/
COPY src/ src/
COPY kernels/ kernels/
# CUDA=1 explicitly: NVIDIA's cuDNN images keep cudnn.h in /usr/include and libcudnn in /usr/lib/x86_64-linux-gnu,
# not under CUDA_HOME where the Makefile's auto-detection looks, so detection would silently build CPU-only. The
# compiler and linker find cuDNN in those system directories by themselves; nothing else needs passing.
# The copy has no .git, so `voxscale --version` says "unknown" unless given: --build-arg VX_VERSION=$(git describe ...)
ARG VX_VERSION=
RUN make -j"$(nproc)" CUDA=1 ARCH="${ARCH}" all
# The binary links CUPTI (profiler traces), which NVIDIA's runtime images do not ship: collect it for the runtime
# stage. Its packages put it in CUDA_HOME/lib64 (the .run installer used extras/CUPTI/lib64). libnifti (NIfTI
# volumes) and its libznz are collected too: their runtime packages' names differ between Ubuntu releases
# (64-bit time_t renames), the files do not. So is oneDNN (the CPU convolutions), whose runtime package is named for
# its soname (libdnnl2 on Debian 12), with the OpenCL loader it links, and libjpeg-turbo's TurboJPEG (libturbojpeg0
# on Debian 12, libturbojpeg on Ubuntu 24.04).
RUN mkdir -p /out/lib \
 && cp -a /usr/local/cuda/lib64/libcupti.so.* /out/lib/ \
 && cp -a /usr/lib/x86_64-linux-gnu/libnifti2.so.* /usr/lib/x86_64-linux-gnu/libznz.so.* /out/lib/ \
 && cp -a /usr/lib/x86_64-linux-gnu/libdnnl.so.* /usr/lib/x86_64-linux-gnu/libOpenCL.so.1* /out/lib/ \
 && cp -a /usr/lib/x86_64-linux-gnu/libturbojpeg.so.* /out/lib/

# ---- test: the test suite in the build environment -------------------------------------------------------------
# `docker compose run --rm test` runs `make test` on the GPUs it is given (the CUDA tests skip without one).
# Its packages come first, in a stage of their own on the builder base: ci/deps.sh (cmocka, PyTorch, .venv with
# pytest and tensorboard, ...; several minutes) then stays a cached layer while the sources change, and only the
# built tree is copied in. pip trusts the build secret ca-bundle as in the tensorboard stage.
FROM ${BUILDER_IMAGE} AS testdeps
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
COPY ci/deps.sh ci/
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
 && bash ci/deps.sh && rm -rf /var/lib/apt/lists/*

FROM testdeps AS test
ARG ARCH=-march=x86-64-v3
# The Makefile takes ARCH and CUDA from the environment (?= and auto-detection), and both stages have Open MPI, so
# `make test` in the container rebuilds nothing of the copied tree (ci/docker.sh times it). There is no Docker inside
# the container, so the suite's Docker check says it skips.
ENV ARCH=${ARCH} CUDA=1 VX_SKIP_DOCKER=1
COPY --from=build /src/ /src/
COPY ci/ ci/
COPY configs/ configs/
COPY bench/ bench/
COPY tests/ tests/
CMD ["make", "test"]

# ---- tensorboard: TensorBoard on the mounted runs/ -------------------------------------------------------------
# On the runtime base so that it shares its layers with the trainer image rather than pulling another base.
FROM ${RUNTIME_IMAGE} AS tensorboard
ARG TENSORBOARD_VERSION=2.21.0
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# pip trusts an extra CA bundle when one is given as the build secret ca-bundle (`--secret id=ca-bundle,src=FILE`),
# for networks that intercept TLS, as CI's does; a secret is not stored in the image.
RUN --mount=type=secret,id=ca-bundle \
    apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/tensorboard \
 && if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
 && /opt/tensorboard/bin/pip install --no-cache-dir --disable-pip-version-check "tensorboard==${TENSORBOARD_VERSION}"
# It only reads runs/ (mounted read-only), so it runs as nobody (numeric: resolvable without the image's passwd).
USER 65534:65534
EXPOSE 6006
ENTRYPOINT ["/opt/tensorboard/bin/tensorboard"]
CMD ["--logdir", "/runs", "--bind_all", "--port", "6006"]

# ---- report: the benchmark reports on the mounted results/ ----------------------------------------------------
# `docker compose run --rm report` after a bench service: bench/report/report.py draws results/<device>/charts/
# (matplotlib) and index.html, and results/index.html. An image of its own so that the trainer's carries no Python;
# on the runtime base, whose layers it shares. It writes as the owner of results/ (the trainer's entrypoint, with
# VOXSCALE_PROGRAM naming the program to run).
FROM ${RUNTIME_IMAGE} AS report
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-matplotlib \
 && rm -rf /var/lib/apt/lists/*
COPY bench/report/ /usr/local/lib/voxscale/report/
COPY docker/entrypoint.sh /usr/local/bin/voxscale-entrypoint
RUN printf '#!/bin/sh\nexec python3 /usr/local/lib/voxscale/report/report.py "$@"\n' > /usr/local/bin/voxscale-report \
 && chmod 755 /usr/local/bin/voxscale-report
# matplotlib's font cache goes to /tmp: the owner of results/ may have no home in the image
ENV VOXSCALE_PROGRAM=voxscale-report VOXSCALE_OUTPUT=/work/results MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /work
ENTRYPOINT ["voxscale-entrypoint"]
CMD ["/work/results"]

# ---- runtime: the trainer (the default target) -----------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
# The shared libraries the binary links besides CUDA's. The defaults are Ubuntu 24.04's names (its 64-bit time_t
# transition renamed libpng16-16 to libpng16-16t64); CI's Debian 12 stand-in passes Debian's names.
ARG RUNTIME_PACKAGES="libcjson1 libopenblas0-pthread libprotobuf-c1 libpng16-16t64 zlib1g libgomp1 libopenmpi3t64 openmpi-bin"
# Multi-GPU (the data-parallel issue): NCCL's runtime library, libnccl2, is part of NVIDIA's cudnn-runtime images
# already; the trainer links Open MPI (ranks under mpirun or srun), whose runtime and mpirun are libopenmpi3t64 and
# openmpi-bin (Debian 12: libopenmpi3). Any further library only in the devel image is collected into /out/lib.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${RUNTIME_PACKAGES} \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/lib/ /usr/local/lib/voxscale/
RUN echo /usr/local/lib/voxscale > /etc/ld.so.conf.d/voxscale.conf && ldconfig
COPY --from=build /src/build/voxscale /usr/local/bin/voxscale
COPY docker/entrypoint.sh /usr/local/bin/voxscale-entrypoint
WORKDIR /work
COPY configs/ configs/
# A non-root account owns the image's own runs/ and results/ (used when nothing is mounted there); the entrypoint
# runs voxscale as the owner of whatever is mounted (docker/entrypoint.sh says why).
RUN useradd --system --user-group --home-dir /work --no-create-home voxscale \
 && mkdir -p runs results && chown voxscale:voxscale runs results
# Every library the binary links must resolve here, so a wrong package name or a missing CUPTI fails the build,
# not the first run; then the binary must start and report the device it would use.
RUN if ldd /usr/local/bin/voxscale | grep 'not found'; then \
        echo "runtime image: the libraries above are missing" >&2; exit 1; \
    fi \
 && voxscale detect --config configs/default.json
ENTRYPOINT ["voxscale-entrypoint"]
CMD ["train", "--gpus", "all", "--config", "configs/default.json"]

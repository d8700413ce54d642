"""test_build.py: what the binary needs at run time. A CUDA build links cudart statically and needs, of NVIDIA's
libraries, only cuDNN and NCCL to start (and the driver, which cudart opens): cuBLAS (bench's GEMM ceiling) and CUPTI
(--profile) are loaded with dlopen when first used, so a machine that lacks them, or has them for another CUDA
major, still trains, detects and runs the op tests (issue 20). detect says which versions the build was compiled
against: what ci/gpu.sh --prepare records and its driver check compares the GPU machine's libraries with."""
import re
import shutil
import subprocess

import pytest

from conftest import VOXSCALE, run


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


@pytest.mark.skipif(not shutil.which("readelf"), reason="no readelf (binutils) on this machine")
def test_a_cuda_build_needs_neither_cublas_nor_cupti_to_start():
    libs = needed(VOXSCALE)
    if not any(lib.startswith("libcudnn") for lib in libs):
        pytest.skip("a CPU-only build: it needs no CUDA library at all (%s)" % ", ".join(libs))
    assert not [lib for lib in libs if lib.startswith(("libcublas", "libcupti"))], libs
    assert any(lib.startswith("libnccl") for lib in libs) or "NCCL none" in run("detect", "--device", "cpu").stdout
    line = next(l for l in run("detect", "--device", "cpu").stdout.splitlines() if l.startswith("cuda: "))
    assert re.search(r"built with CUDA runtime \d+\.\d+, cuDNN \d+\.\d+\.\d+, NCCL (\d+\.\d+\.\d+|none), "
                     r"cuBLAS \d+\.\d+\.\d+, CUPTI API \d+$", line), line

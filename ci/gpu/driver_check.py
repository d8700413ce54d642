#!/usr/bin/env python3
"""ci/gpu/driver_check.py PREPARE.json [--probe FILE.json]: can this machine's driver and NVIDIA libraries serve the
carried build? ci/gpu.sh's first step: one line, "driver check: ok: ..." (exit 0) or "driver check: FAIL: ..." naming
every problem (exit 1), before any step spends minutes failing on the same cause.

The build's versions come from PREPARE.json's "built" (ci/gpu.sh --prepare records what `voxscale detect` says it was
compiled against: CUDA runtime, cuDNN, NCCL, cuBLAS, CUPTI). This machine's are asked of the libraries the voxscale
binaries load (this process's LD_LIBRARY_PATH, which ci/gpu.sh sets to the carried build's; CUPTI from VX_CUPTI_LIB
first, as the binary loads it):
  driver  libcuda.so.1's cuDriverGetVersion: the CUDA version the driver supports must be at least the build's
          runtime major (cudart is linked statically; CUDA's minor-version compatibility covers the minor). Below it
          every CUDA call fails with cudaErrorInsufficientDriver and --device auto trains on the CPU.
  cuDNN   libcudnn.so.9 (the build's major, the soname it is linked by): cudnnGetCudartVersion must be of the build's
          CUDA major (a wheel for CUDA 12 under a CUDA 13 build: every convolution fails)
  NCCL    libnccl.so.2: ncclGetVersion of major 2 and at least 2.19 (the non-blocking communicator's config)
  cuBLAS  libcublas.so.<major> (bench's GEMM ceiling, loaded when bench first measures): cublasGetCudartVersion of
          the build's CUDA major
  CUPTI   libcupti.so.<major> (--profile, loaded when a profile starts): the build's major and a minor from the
          build's to 13.5 (src/trace/cupti_load.c: newer records only append fields up to there)
--probe FILE.json replaces the probing with given values (tests/tools/gpu/driver_check.sh):
  {"driver": 13000 | "error text", "cudnn": [91900, 13000] | "error text", "nccl": 22809 | "...",
   "cublas": 13000 | "...", "cupti": 130001 | "..."}"""
import ctypes
import json
import os
import re
import sys

CUPTI_MINOR_CHECKED = 5  # src/trace/cupti_load.c
NCCL_LEAST = 21900


def dotted(v):
    return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)


def cuda(v):  # 13000 -> "13.0"
    return "%d.%d" % (v // 1000, v % 1000 // 10)


def load(name):
    try:
        return ctypes.CDLL(name), None
    except OSError as e:
        return None, str(e)


def call_int(lib, func, by_ref=True):
    if by_ref:
        v = ctypes.c_int(0)
        rc = getattr(lib, func)(ctypes.byref(v))
        return v.value if rc == 0 else "%s returned %d" % (func, rc)
    getattr(lib, func).restype = ctypes.c_size_t
    return int(getattr(lib, func)())


def probe(major):
    """What this machine's libraries say; a string where a library could not be loaded or asked."""
    out = {}
    lib, err = load("libcuda.so.1")
    out["driver"] = call_int(lib, "cuDriverGetVersion") if lib else "no CUDA driver (%s)" % err
    lib, err = load("libcudnn.so.9")
    out["cudnn"] = [call_int(lib, "cudnnGetVersion", False), call_int(lib, "cudnnGetCudartVersion", False)] \
        if lib else err
    lib, err = load("libnccl.so.2")
    out["nccl"] = call_int(lib, "ncclGetVersion") if lib else err
    lib, err = load("libcublas.so.%d" % major)
    out["cublas"] = call_int(lib, "cublasGetCudartVersion", False) if lib else err
    cupti = os.environ.get("VX_CUPTI_LIB") or "libcupti.so.%d" % major
    lib, err = load(cupti)
    if not lib and cupti != "libcupti.so.%d" % major:
        lib, err = load("libcupti.so.%d" % major)
    out["cupti"] = call_int(lib, "cuptiGetVersion") if lib else err
    return out


def built_versions(prepare):
    """{"cuda": 13000, "cudnn": 91900, "nccl": 22809, "cublas": 130100, "cupti": 130001} from PREPARE.json"""
    b = prepare.get("built")
    if not b:
        raise SystemExit("driver check: FAIL: %s has no \"built\" record (prepared by an older ci/gpu.sh --prepare?): "
                         "run bash ci/gpu.sh --prepare again" % sys.argv[1])
    return b


def check(b, got):
    major = b["cuda"] // 1000
    problems, fine = [], []
    d = got["driver"]
    if isinstance(d, str):
        problems.append("%s: an NVIDIA driver that supports CUDA %d is needed%s" % (d, major,
                                                                                     " (R580 or newer)" if major == 13 else ""))
    elif d // 1000 < major:
        problems.append("the driver supports CUDA %s, the build needs CUDA %d.x (its runtime is %s): a driver of "
                        "CUDA %d or newer (R580+ for 13), or a build for CUDA %d (ci/gpu.sh --prepare with that "
                        "toolkit)" % (cuda(d), major, cuda(b["cuda"]), major, d // 1000))
    else:
        fine.append("driver CUDA %s" % cuda(d))
    c = got["cudnn"]
    if isinstance(c, str):
        problems.append("cuDNN: libcudnn.so.9: %s" % c)
    elif c[0] // 10000 != b["cudnn"] // 10000 or c[1] // 1000 != major:
        problems.append("cuDNN %s is for CUDA %s, the build is for CUDA %d with cuDNN %d (a wheel of the other CUDA "
                        "major: nvidia-cudnn-cu%d is needed)" % (dotted(c[0]), cuda(c[1]), major, b["cudnn"] // 10000,
                                                                  major))
    else:
        fine.append("cuDNN %s (CUDA %s)" % (dotted(c[0]), cuda(c[1])))
    n = got["nccl"]
    if isinstance(n, str):
        problems.append("NCCL: libnccl.so.2: %s" % n)
    elif n < NCCL_LEAST:
        problems.append("NCCL %s is older than 2.19, which the non-blocking communicator needs" % dotted(n))
    else:
        fine.append("NCCL %s" % dotted(n))
    cb = got["cublas"]
    if isinstance(cb, str):
        problems.append("cuBLAS (bench's GEMM ceiling): libcublas.so.%d: %s" % (major, cb))
    elif cb // 1000 != major:
        problems.append("cuBLAS is for CUDA %s, the build for CUDA %d" % (cuda(cb), major))
    else:
        fine.append("cuBLAS (CUDA %s)" % cuda(cb))
    cp = got["cupti"]
    if isinstance(cp, str):
        problems.append("CUPTI (--profile): libcupti.so.%d: %s" % (major, cp))
    else:
        lmaj, lmin, bmin = cp // 10000, cp // 100 % 100, b["cupti"] // 100 % 100
        if lmaj != major or lmin < bmin or lmin > CUPTI_MINOR_CHECKED:
            problems.append("CUPTI API %d cannot be read by this build (records of %d, newer minors up to %d.%d): "
                            "VX_CUPTI_LIB=the toolkit's libcupti" % (cp, b["cupti"], major, CUPTI_MINOR_CHECKED))
        else:
            fine.append("CUPTI API %d" % cp)
    return problems, fine


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        raise SystemExit("usage: driver_check.py PREPARE.json [--probe FILE.json]")
    try:
        prepare = json.load(open(args[0]))
    except (OSError, ValueError) as e:
        print("driver check: FAIL: cannot read %s (%s)" % (args[0], e))
        return 1
    b = built_versions(prepare)
    got = json.load(open(args[2])) if len(args) > 2 and args[1] == "--probe" else probe(b["cuda"] // 1000)
    problems, fine = check(b, got)
    build = "the build's CUDA %s, cuDNN %s, NCCL %s" % (cuda(b["cuda"]), dotted(b["cudnn"]), dotted(b["nccl"]))
    if problems:
        print("driver check: FAIL: %s (%s)" % ("; ".join(problems), build))
        return 1
    print("driver check: ok: %s serve %s" % (", ".join(fine), build))
    return 0


def parse_detect_line(line):
    """"cuda: built in (...); built with CUDA runtime 13.0, cuDNN 9.19.0, NCCL 2.28.9, cuBLAS 13.1.0, CUPTI API 130001"
    -> {"cuda": 13000, "cudnn": 91900, "nccl": 22809, "cublas": 130100, "cupti": 130001} (ci/gpu/prepare.sh)"""
    m = re.search(r"CUDA runtime (\d+)\.(\d+), cuDNN (\d+)\.(\d+)\.(\d+), NCCL (?:(\d+)\.(\d+)\.(\d+)|none), "
                  r"cuBLAS (\d+)\.(\d+)\.(\d+), CUPTI API (\d+)", line)
    if not m:
        return None
    g = [int(x) if x is not None else 0 for x in m.groups()]
    return {"cuda": g[0] * 1000 + g[1] * 10, "cudnn": g[2] * 10000 + g[3] * 100 + g[4],
            "nccl": g[5] * 10000 + g[6] * 100 + g[7], "cublas": g[8] * 10000 + g[9] * 100 + g[10], "cupti": g[11]}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--parse-detect":
        print(json.dumps(parse_detect_line(sys.argv[2])))
        sys.exit(0)
    sys.exit(main())

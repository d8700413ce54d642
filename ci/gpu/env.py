#!/usr/bin/env python3
"""ci/gpu/env.py OUT.json [PREPARE.json]: what ci/gpu.sh ran on, as JSON, and one line per item on stdout.

GPU, driver, clocks, power and persistence from nvidia-smi; the CUDA toolkit from nvcc; the versions of the cuDNN,
CUPTI, NCCL and cuBLAS that the voxscale binaries load (asked of the very libraries the loader finds with this
process's LD_LIBRARY_PATH, which ci/gpu.sh sets to the carried build's); PyTorch, its CUDA and cuDNN (in a child
process with the machine's original library path, VX_ORIG_LD_LIBRARY_PATH, as the PyTorch benchmarks run); the
commit the carried build was made from (PREPARE.json, written by ci/gpu.sh --prepare) and the host CPU.
Whatever cannot be read is recorded as "unavailable: <why>", never guessed."""
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys


def sh(args, timeout=20):
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def smi():
    fields = ["name", "driver_version", "memory.total", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "power.draw", "power.limit", "temperature.gpu", "persistence_mode", "pci.bus_id"]
    if not shutil.which("nvidia-smi"):
        return {"gpu": "unavailable: no nvidia-smi on this machine"}
    out = sh(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader"])
    if not out:
        return {"gpu": "unavailable: nvidia-smi failed"}
    gpus = [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.splitlines()]
    g = gpus[0]
    head = sh(["nvidia-smi"]) or ""
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", head)
    return {"gpu": g["name"], "gpus": len(gpus), "driver": g["driver_version"],
            "driver_cuda": cuda.group(1) if cuda else "unavailable", "memory": g["memory.total"],
            "clocks": "SM %s (max %s), memory %s (max %s)" % (g["clocks.sm"], g["clocks.max.sm"], g["clocks.mem"],
                                                            g["clocks.max.mem"]),
            "power": "%s of %s" % (g["power.draw"], g["power.limit"]), "temperature": g["temperature.gpu"] + " C",
            "persistence": g["persistence_mode"]}


def nvcc():
    for cand in ("nvcc", os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if shutil.which(cand) or os.path.exists(cand):
            out = sh([cand, "--version"])
            if out:  # "Cuda compilation tools, release 13.0, V13.0.88"
                return next((l for l in out.splitlines() if "release" in l), out.splitlines()[-1])
    return "unavailable: no nvcc"


def lib_version(soname, func, decode, by_ref):
    """Loads soname as the voxscale binaries would (this process's LD_LIBRARY_PATH) and asks it its version."""
    try:
        lib = ctypes.CDLL(soname)
    except OSError as e:
        return "unavailable: %s" % e
    path = "?"
    try:  # where the loader found it: the first mapping of the library in this process
        with open("/proc/self/maps") as f:
            path = next(l.split()[-1] for l in f if l.rstrip().endswith(soname) or ("/" + soname) in l)
    except (OSError, StopIteration):
        pass
    try:
        if by_ref:
            v = ctypes.c_int(0)
            rc = getattr(lib, func)(ctypes.byref(v))
            if rc != 0:
                return "unavailable: %s returned %d (%s)" % (func, rc, path)
            v = v.value
        else:
            getattr(lib, func).restype = ctypes.c_size_t
            v = getattr(lib, func)()
    except AttributeError:
        return "unavailable: %s has no %s" % (soname, func)
    return "%s (%s)" % (decode(v), path)


def torch_info():
    env = dict(os.environ)
    orig = os.environ.get("VX_ORIG_LD_LIBRARY_PATH")
    if orig is not None:
        if orig:
            env["LD_LIBRARY_PATH"] = orig
        else:
            env.pop("LD_LIBRARY_PATH", None)
    code = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'torch_cuda': torch.version.cuda, "
            "'torch_cudnn': torch.backends.cudnn.version(), 'torch_sees_gpu': torch.cuda.is_available()}))")
    py = os.environ.get("VX_PYTHON", sys.executable)
    try:
        p = subprocess.run(py.split() + ["-c", code], capture_output=True, text=True, timeout=18, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"torch": "unavailable: %s" % e}
    if p.returncode != 0:
        return {"torch": "unavailable: " + (p.stderr.strip().splitlines() or ["import failed"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    out = sys.argv[1]
    info = {}
    info.update(smi())
    info["nvcc"] = nvcc()
    dotted = lambda v: "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)  # noqa: E731  cuDNN 9: 91900 = 9.19.0
    info["cudnn"] = lib_version("libcudnn.so.9", "cudnnGetVersion", dotted, False)
    info["cupti"] = lib_version("libcupti.so.13", "cuptiGetVersion", lambda v: "API %d" % v, True)
    info["nccl"] = lib_version("libnccl.so.2", "ncclGetVersion", dotted, True)  # NCCL 2: 22809 = 2.28.9
    info["cublas"] = lib_version("libcublas.so.13", "cublasGetCudartVersion", lambda v: "built for CUDA runtime %d" % v,
                                 False)
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        prep = json.load(open(sys.argv[2]))
        info["commit"] = prep.get("commit", "unknown") + (" (with uncommitted changes)" if prep.get("dirty") else "")
        info["prepared"] = "%s on %s (%s), %s" % (prep.get("prepared"), prep.get("host"), prep.get("host_cpu"),
                                                  prep.get("arch"))
    else:
        info["commit"] = sh(["git", "rev-parse", "HEAD"]) or "unknown"
    info["host_cpu"] = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
                            "unknown")
    info["cores"] = os.cpu_count()
    json.dump(info, open(out, "w"), indent=2)  # kept should the slow part below be stopped
    info.update(torch_info())  # a first torch import on a cold machine can take 10 s or more
    json.dump(info, open(out, "w"), indent=2)
    for k, v in info.items():
        print("%-12s %s" % (k + ":", v))


if __name__ == "__main__":
    main()

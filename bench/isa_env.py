"""bench/isa_env.py: the environment variables that hold PyTorch's kernels (ATen, oneDNN, MKL) below the CPU's own
ISA, as the benchmarks record them beside a reference's runs (the AVX2 type approximated on an AVX-512 CPU: nothing
in torch's own output says so), and the one way they are written out. Used by bench/side_by_side.sh,
bench/alternate.py and bench/report/measured.py; `python3 bench/isa_env.py --inductor-cache` prints the folder below
for bash.

Why a compile cache of its own under a cap: torch.compile's on-disk cache (/tmp/torchinductor_<user>) hands kernels
compiled without the cap to a capped run, whose key does not tell them apart, and that run then crashes (PyTorch
2.15, ae3d's default config with ATEN_CPU_CAPABILITY=avx2: a segmentation fault in a compiled kernel after an uncapped
run had filled the cache; the same capped run with an empty cache, or again with its own, runs)."""
import getpass
import os
import sys
import tempfile

VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def current(environ=os.environ):
    """{variable: value} for those of VARS set (non-empty) in environ"""
    return {k: environ[k] for k in VARS if environ.get(k)}


def describe(caps, sep=" "):
    """"ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2": the variables sorted, K=V, sep between"""
    return sep.join("%s=%s" % kv for kv in sorted(caps.items()))


def inductor_cache(environ=os.environ):
    """TORCHINDUCTOR_CACHE_DIR for a run under the caps in environ: a folder named for them, or None where nothing is
    capped or the variable is already set (a user's choice stands)"""
    caps = current(environ)
    if not caps or environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return None
    name = "torchinductor_%s_%s" % (getpass.getuser(), describe(caps, "_").replace("=", "-").lower())
    return os.path.join(tempfile.gettempdir(), name)


def with_inductor_cache(environ=os.environ):
    """a copy of environ with TORCHINDUCTOR_CACHE_DIR set where inductor_cache gives a folder"""
    env = dict(environ)
    folder = inductor_cache(environ)
    if folder:
        env["TORCHINDUCTOR_CACHE_DIR"] = folder
    return env


if __name__ == "__main__":
    if sys.argv[1:] != ["--inductor-cache"]:
        print("usage: bench/isa_env.py --inductor-cache", file=sys.stderr)
        sys.exit(2)
    print(inductor_cache() or "")

"""bench/isa_env.py: the environment variables that hold PyTorch's kernels (ATen, oneDNN, MKL) below the CPU's own
ISA, as the benchmarks record them beside a reference's runs (the AVX2 type approximated on an AVX-512 CPU: nothing
in torch's own output says so), and the one way they are written out. Used by bench/side_by_side.sh,
bench/alternate.py and bench/report/measured.py."""
import os

VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def current(environ=os.environ):
    """{variable: value} for those of VARS set (non-empty) in environ"""
    return {k: environ[k] for k in VARS if environ.get(k)}


def describe(caps, sep=" "):
    """"ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2": the variables sorted, K=V, sep between"""
    return sep.join("%s=%s" % kv for kv in sorted(caps.items()))

#!/usr/bin/env python3
"""pip_layout.py OUT [CUDA_HOME]: lays out this machine's CUDA files the way a GPU machine whose cuDNN, CUPTI,
cuBLAS and NCCL come from Python's nvidia-* wheels has them, for the CI test of `ci/gpu.sh --prepare`:

  OUT/site-packages/nvidia/cudnn/{include,lib}   cudnn*.h, libcudnn*.so.9 only (no unversioned names)
  OUT/site-packages/nvidia/cu13/{include,lib}    CUPTI and cuBLAS, as the CUDA 13 wheels install them
  OUT/site-packages/nvidia/nccl/{include,lib}    nccl.h, libnccl.so.2
  OUT/toolkit/                                   CUDA_HOME without any of those headers or libraries

Which file goes where is read from the wheels' own RECORD files, which this machine's toolkit keeps in
CUDA_HOME/dist-info (it was assembled from the same wheels), so the layout is the wheels' and not a guess. Every
entry is a symbolic link to the file in CUDA_HOME. The toolkit copy keeps nvcc working: nvcc finds its headers and
tools relative to the path it was started by (bin/nvcc.profile's $(_HERE_)), a symlink included.
PYTHONPATH=OUT/site-packages makes `import nvidia` find the packages, as on such a machine."""
import os
import sys

WHEELS = {  # dist-info name prefix -> why it is moved out of the toolkit
    "nvidia_cudnn_cu13": "cuDNN",
    "nvidia_cuda_cupti": "CUPTI",
    "nvidia_cublas": "cuBLAS",
    "nvidia_nccl_cu13": "NCCL",
}


def wheel_files(cuda_home):
    """(path under site-packages, path in the toolkit) for every include/ and lib/ file of the wheels above."""
    dist = os.path.join(cuda_home, "dist-info")
    found, pairs = set(), []
    for entry in sorted(os.listdir(dist)):
        prefix = next((w for w in WHEELS if entry.startswith(w + "-")), None)
        if not prefix:
            continue
        found.add(prefix)
        with open(os.path.join(dist, entry, "RECORD")) as f:
            for line in f:
                rel = line.split(",")[0]
                parts = rel.split("/")  # nvidia/<pkg>/{include,lib}/...
                if len(parts) >= 4 and parts[0] == "nvidia" and parts[2] in ("include", "lib"):
                    pairs.append((rel, os.path.join(cuda_home, parts[2], *parts[3:])))
    missing = [WHEELS[w] for w in WHEELS if w not in found]
    if missing:
        sys.exit("pip_layout.py: %s/dist-info has no RECORD for %s: cannot tell the wheels' layout" %
                 (cuda_home, ", ".join(missing)))
    return pairs


def link(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.symlink(src, dst)


def mirror(src_dir, dst_dir, skip):
    """dst_dir gets a symlink per entry of src_dir, except the paths in skip; directories holding a skipped path
    are mirrored entry by entry instead of linked whole."""
    os.makedirs(dst_dir, exist_ok=True)
    for name in sorted(os.listdir(src_dir)):
        src = os.path.join(src_dir, name)
        real = os.path.realpath(src)
        if real in skip:
            continue
        if os.path.isdir(real) and any(s.startswith(real + os.sep) for s in skip):
            mirror(real, os.path.join(dst_dir, name), skip)
        else:
            os.symlink(src, os.path.join(dst_dir, name))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: pip_layout.py OUT [CUDA_HOME]")
    out, cuda_home = sys.argv[1], os.path.realpath(sys.argv[2] if len(sys.argv) == 3 else "/usr/local/cuda")
    if os.path.exists(out):
        sys.exit("pip_layout.py: %s exists; give a new directory" % out)
    pairs = wheel_files(cuda_home)
    moved = set()
    for rel, src in pairs:
        if not os.path.exists(src):
            sys.exit("pip_layout.py: the wheel file %s is not in the toolkit (%s missing)" % (rel, src))
        link(src, os.path.join(out, "site-packages", rel))
        moved.add(os.path.realpath(src))
    tk = os.path.join(out, "toolkit")
    os.makedirs(tk)
    for name in ("bin", "nvvm"):
        mirror(os.path.join(cuda_home, name), os.path.join(tk, name), set())
    mirror(os.path.join(cuda_home, "include"), os.path.join(tk, "include"), moved)
    mirror(os.path.join(cuda_home, "lib"), os.path.join(tk, "lib"), moved)
    os.symlink("lib", os.path.join(tk, "lib64"))
    os.makedirs(os.path.join(tk, "targets", "x86_64-linux"))
    os.symlink("../../include", os.path.join(tk, "targets", "x86_64-linux", "include"))
    os.symlink("../../lib", os.path.join(tk, "targets", "x86_64-linux", "lib"))
    print("pip_layout: %d wheel files under %s/site-packages/nvidia, toolkit without them in %s" %
          (len(pairs), out, tk))


if __name__ == "__main__":
    main()

# mk/bench.mk: `bench step` on a GPU measures its ceiling with cuBLAS SGEMM (src/bench/bench_cuda.cu), which loads
# cuBLAS with dlopen when it first measures (libcublas.so.<major> through the RUNPATH, where mk/detect/cuda.mk found
# it, or the library path), not at start-up: training, detect and the op tests need no cuBLAS. Nothing to link.

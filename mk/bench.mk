# mk/bench.mk: `bench step` on a GPU measures its ceiling with cuBLAS SGEMM (src/bench/bench_cuda.cu), so CUDA builds
# link cuBLAS (found by mk/detect/cuda.mk; -l:libcublas.so.13 where only the versioned soname exists).
ifeq ($(CUDA),1)
  LDLIBS += $(CUBLAS_LINK)
endif

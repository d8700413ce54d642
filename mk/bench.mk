# mk/bench.mk: `bench step` on a GPU measures its ceiling with cuBLAS SGEMM (src/bench/bench_cuda.cu), so CUDA builds
# link cuBLAS.
ifeq ($(CUDA),1)
  LDLIBS += -lcublas
endif

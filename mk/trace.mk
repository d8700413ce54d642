# mk/trace.mk: build steps of the profiler trace (src/trace).
# CUDA builds record GPU activity through CUPTI (src/trace/gpu_activity.c), which is loaded with dlopen when a
# profile starts (src/trace/cupti_load.c), not linked: a run without --profile needs no libcupti. It is looked for
# first where mk/detect/cuda.mk found it (VX_CUPTI_LIBDIR; that directory is on the RUNPATH too), and kernel names
# are demangled with libstdc++'s __cxa_demangle. CPU builds get stubs and need neither. This fragment is included
# after the Makefile's CUDA section, so $(CUDA) is already decided here.

ifeq ($(CUDA),1)
  $(BUILD)/src/trace/cupti_load.o: CFLAGS += -DVX_CUPTI_LIBDIR='"$(CUPTI_LIBDIR)"'
  ifeq ($(findstring -lstdc++,$(LDLIBS)),)
    LDLIBS += -lstdc++
  endif
endif

# trace.h is included from .cu files too: test_trace_cxx.c is compiled as C++ (by nvcc as CUDA C++ in CUDA builds,
# where trace.h also includes NVTX; by the host C++ compiler otherwise), so a C-only construct in the header
# breaks the build rather than the first kernel file that includes it. This explicit rule wins over the
# Makefile's pattern rule for tests/unit/test_*.c; ci/test.sh runs the binary with the other unit tests.
# nvcc gets no -gencode: the file has no device code.
TRACE_CXX_TEST := $(BUILD)/tests/test_trace_cxx
ifeq ($(CUDA),1)
$(TRACE_CXX_TEST): tests/unit/test_trace_cxx.c $(BUILD)/libvoxscale.a
	@mkdir -p $(BUILD)/tests/cxx
	$(NVCC) $(filter-out -gencode arch=%,$(NVCCFLAGS)) -x cu -D_GNU_SOURCE \
		-Itests/unit -c $< -o $(BUILD)/tests/cxx/test_trace_cxx.o
	$(CC) $(LDFLAGS) -o $@ $(BUILD)/tests/cxx/test_trace_cxx.o $(BUILD)/libvoxscale.a $(LDLIBS) -lcmocka
else
$(TRACE_CXX_TEST): tests/unit/test_trace_cxx.c $(BUILD)/libvoxscale.a
	@mkdir -p $(dir $@)
	$(CXX) -x c++ -std=c++17 $(filter-out -std=%,$(CFLAGS)) -Itests/unit $(LDFLAGS) -o $@ $< -x none \
		$(BUILD)/libvoxscale.a $(LDLIBS) -lcmocka
endif

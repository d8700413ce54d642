# voxscale build. `make` builds build/voxscale; `make run` trains the default config; `make test` runs every test.
# The CUDA objects (*.cu) are compiled for CUDA_ARCHS (sm_80 and sm_90, plus PTX for newer GPUs) whenever nvcc is found
# (and then cuDNN, CUPTI and cuBLAS must be found too, see below); `make CUDA=0` forces a CPU-only build. ARCH sets the
# host code's target (-march=x86-64-v3 for a binary that runs on other x86-64 machines). Fragments in mk/*.mk add modules with build steps of their own.

BUILD    ?= build
CC       ?= gcc
ARCH     ?= -march=native
PYTHON   ?= $(CURDIR)/.venv/bin/python
CUDA_HOME ?= /usr/local/cuda
comma    := ,
space    := $(subst ,, )
NVCC     ?= $(CUDA_HOME)/bin/nvcc
# The compute capabilities the CUDA objects carry machine code for, ascending (80: A100; 90: H100, H200), and PTX of
# the last, which newer GPUs compile when the binary loads. `make CUDA_ARCHS=90` builds for Hopper alone: nvcc then
# compiles each file's device code once, not twice (plus the PTX). The binary reports the list (--version, detect).
CUDA_ARCHS ?= 80 90

PKGS     := libcjson zlib libpng libturbojpeg
# -fno-trapping-math: nothing here reads the floating-point exception flags, and without it gcc 12 will not
# if-convert the float clamps of the inline exp (kernels/common/exp_cpu.h), so the SiLU loops stayed scalar. It changes
# no result (unlike -ffast-math). -fno-math-errno: nothing reads errno after a math call either; with it sqrtf is one
# instruction, not a call that may set errno, and loops around it vectorise (AdamW's ran scalar: 34 ms a step at 17
# GB/s for vit3d-diffusion-64's 20.8 M parameters, 2-core AVX-512 Xeon). The same bits: sqrt is correctly rounded.
CFLAGS   := -std=c11 -O3 $(ARCH) -fopenmp -fno-trapping-math -fno-math-errno -g -Wall -Wextra -Werror -Wno-unused-parameter \
            -MMD -MP -D_GNU_SOURCE -Isrc -Ikernels -I$(BUILD)/gen \
            $(shell pkg-config --cflags $(PKGS) openblas 2>/dev/null)
LDLIBS   := $(shell pkg-config --libs $(PKGS) openblas 2>/dev/null) -ldnnl -lm -lpthread
LDFLAGS  := -fopenmp
# Test builds only: VX_TEST_SLOW=P makes upconv_phase_shuffle do P% more work (ci/regress must catch it).
ifneq ($(VX_TEST_SLOW),)
  CFLAGS += -DVX_TEST_SLOW_PERCENT=$(VX_TEST_SLOW)
endif

# ---- CUDA: auto-detected unless CUDA=0/1 is given ------------------------------------------------------------
# Auto (no CUDA=): a CUDA build wherever nvcc exists, a CPU-only one where it does not. Where nvcc exists but
# cuDNN, CUPTI or cuBLAS cannot be found (mk/detect/cuda.mk says where it looks), the build stops and says what to
# set: a silent CPU-only build there would let the GPU tests skip and pass having tested nothing. CUDA=0 builds
# CPU-only on purpose, quietly. `make cuda-info` prints what was found.
ifneq ($(CUDA),0)
  ifneq ($(or $(filter 1,$(CUDA)),$(wildcard $(NVCC))),)
    include mk/detect/cuda.mk
    VX_CUDA_ABSENT := $(strip $(foreach X,CUDNN CUPTI CUBLAS,$(if $($X_ROOT),,$X)))
    VX_NO_NVCC := $(if $(wildcard $(NVCC)),,nvcc (no $(NVCC): set CUDA_HOME))
    ifneq ($(VX_CUDA_ABSENT)$(VX_NO_NVCC),)
      ifneq ($(filter-out clean cuda-info,$(or $(MAKECMDGOALS),all)),)
        $(error $(if $(CUDA),CUDA=1 was asked for,nvcc is at $(NVCC)) but $(strip $(VX_NO_NVCC) $(foreach X,$(VX_CUDA_ABSENT),$(VXF_$X_LIB))) cannot be found [$(call vx_report,$(VX_CUDA_ABSENT))]; set CUDNN_HOME / CUPTI_HOME / CUBLAS_HOME to the directory holding include/ and lib/ (a pip package's site-packages/nvidia/cudnn, say), NVIDIA_PYTHON to the python whose nvidia-* packages to use, or build CPU-only on purpose with CUDA=0)
      endif
    endif
    CUDA := 1
  else
    CUDA := 0
  endif
endif
ifeq ($(CUDA),1)
  ifneq ($(shell printf '%s' '$(strip $(CUDA_ARCHS))' | grep -Exq '[0-9]{2,3}( [0-9]{2,3})*' || echo bad),)
    $(error CUDA_ARCHS="$(CUDA_ARCHS)" is not a list of compute capabilities: give numbers, ascending, as CUDA_ARCHS="80 90" (or CUDA_ARCHS=90 for H100/H200 alone))
  endif
  CUDA_GENCODE := $(foreach A,$(CUDA_ARCHS),-gencode arch=compute_$A$(comma)code=sm_$A) \
                  -gencode arch=compute_$(lastword $(CUDA_ARCHS))$(comma)code=compute_$(lastword $(CUDA_ARCHS))
  CUDA_INCS := $(call vx_uniq,$(CUDA_HOME)/include $(CUDNN_INC) $(CUPTI_INC) $(CUBLAS_INC))
  NVCCFLAGS := -O3 -std=c++17 -Isrc -Ikernels -I$(BUILD)/gen $(addprefix -I,$(CUDA_INCS)) -DVX_CUDA=1 \
               -Xcompiler -Wall,-Werror,-fopenmp \
               $(CUDA_GENCODE) -MMD -MP
  CFLAGS    += -DVX_CUDA=1 $(addprefix -I,$(CUDA_INCS))
  # cudart is linked statically so the binary needs only the driver, cuDNN and NCCL at run time (cuBLAS for bench's
  # ceiling and CUPTI for --profile are loaded with dlopen when first used), found through LD_LIBRARY_PATH or the
  # RUNPATH: every directory they were found in at build time.
  LDLIBS    += $(addprefix -L,$(CUDA_LIB_DIRS)) $(addprefix -Wl$(comma)-rpath$(comma),$(CUDA_LIB_DIRS)) \
               $(CUDNN_LINK) -lcudart_static -ldl -lrt -lstdc++
  CU_SRCS   := $(shell find src kernels -name '*.cu')
endif

# every folder of src/ at any depth (src/app, core, model, train, parallel, data, bench, tb, trace) and kernels/
C_SRCS   := $(shell find src kernels -name '*.c')
LIB_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(filter-out src/app/main.c,$(C_SRCS))) \
            $(patsubst %.cu,$(BUILD)/%.cu.o,$(CU_SRCS))
MAIN_OBJ := $(BUILD)/src/app/main.o
UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))

# Objects depend on the CUDA and MPI settings they were built with: switching between CUDA=0 and CUDA=1 (or MPI) in
# the same BUILD rebuilds them (C files compile differently with VX_CUDA, and the archive's member list changes).
.DEFAULT_GOAL := all
-include mk/*.mk

# (after the fragments: mk/mpi.mk decides MPI)
BUILD_MODE := $(BUILD)/.build-mode
VX_BUILD_MODE := CUDA=$(CUDA) MPI=$(MPI) NCCL=$(if $(NCCL_ROOT),1,0)
$(shell mkdir -p $(BUILD) && echo "$(VX_BUILD_MODE)" | cmp -s - $(BUILD_MODE) || echo "$(VX_BUILD_MODE)" > $(BUILD_MODE))

# What `voxscale --version` and `voxscale env` say of the build, written into $(BUILD)/gen/vx_build_info.h only when
# it changes (so a new commit relinks, and nothing else rebuilds): VX_VERSION from the environment or the command
# line, else `git describe` of this tree, else "unknown" (a copy without .git: the Docker build, ci/gpu.sh's);
# the build mode and flags; where the CUDA libraries were found (make cuda-info).
VX_GIT_DESCRIBE = $(if $(wildcard .git),$(shell git describe --always --dirty 2>/dev/null))
VX_VERSION := $(or $(strip $(VX_VERSION)),$(VX_GIT_DESCRIBE),unknown)
vx_c_string = $(subst ",\",$(subst \,\\,$(strip $(1))))
VX_BUILD_INFO := \#define VX_VERSION "$(call vx_c_string,$(VX_VERSION))"\n\#define VX_BUILD_FLAGS \
  "$(call vx_c_string,$(VX_BUILD_MODE) ARCH=$(ARCH) CC=$(CC))"\n\#define VX_CUDA_FOUND \
  "$(call vx_c_string,$(subst ;,; ,$(CUDA_FIND_REPORT)))"\n
VX_BUILD_INFO_H := $(BUILD)/gen/vx_build_info.h
$(shell mkdir -p $(BUILD)/gen && printf '$(VX_BUILD_INFO)' | cmp -s - $(VX_BUILD_INFO_H) || \
        printf '$(VX_BUILD_INFO)' > $(VX_BUILD_INFO_H))
# The CUDA_ARCHS the objects were compiled for, as the binary reports them: a header of its own (vx_build_info.h
# changes with every commit, and the files that say the list, cuda_device.cu among them, would recompile each time),
# rewritten only when the list changes; the CUDA objects depend on it, so a new list recompiles them all.
VX_CUDA_ARCHS_H := $(BUILD)/gen/vx_cuda_archs.h
VX_CUDA_ARCHS_INFO := \#define VX_CUDA_ARCHS "$(subst $(space),$(comma)$(space),$(addprefix sm_,$(strip $(CUDA_ARCHS)))), PTX"\n
$(shell printf '$(VX_CUDA_ARCHS_INFO)' | cmp -s - $(VX_CUDA_ARCHS_H) || printf '$(VX_CUDA_ARCHS_INFO)' > $(VX_CUDA_ARCHS_H))

.PHONY: all deps run test unit-test integration-test bench bench-venv clean venv cuda-info
all: $(BUILD)/voxscale

$(BUILD)/voxscale: $(MAIN_OBJ) $(BUILD)/libvoxscale.a
	$(CC) $(LDFLAGS) -o $@ $(MAIN_OBJ) $(BUILD)/libvoxscale.a $(LDLIBS)

$(BUILD)/libvoxscale.a: $(LIB_OBJS) $(BUILD_MODE)
	@rm -f $@
	ar rcs $@ $(filter %.o,$^)

$(BUILD)/%.o: %.c $(BUILD_MODE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(BUILD_MODE) $(VX_CUDA_ARCHS_H)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libvoxscale.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit $(LDFLAGS) -o $@ $< $(BUILD)/libvoxscale.a $(LDLIBS) -lcmocka

# the op tests share their list of cases with the host emulation (tests/tools/cuda_emu)
$(BUILD)/tests/test_backend_ops: tests/unit/test_backend_ops.c tests/unit/op_cases.c tests/unit/op_cases.h $(BUILD)/libvoxscale.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit $(LDFLAGS) -o $@ tests/unit/test_backend_ops.c tests/unit/op_cases.c \
		$(BUILD)/libvoxscale.a $(LDLIBS) -lcmocka

# ---- the two README commands ---------------------------------------------------------------------------------
deps:
	@bash ci/deps.sh

run: deps
	$(MAKE) all
	./$(BUILD)/voxscale train --config configs/default.json

test: deps
	$(MAKE) all $(UNIT_TESTS)
	@bash ci/test.sh

bench: all
	./$(BUILD)/voxscale bench step --config configs/default.json

# PyTorch 2.x from PyPI in .venv-bench, the baseline bench/side_by_side.sh compares with (not used by the tests)
bench-venv:
	@bash bench/venv.sh

clean:
	rm -rf $(BUILD)

# Where the CUDA libraries were found, one per line, after the CUDA_ARCHS compiled for (ci/gpu.sh --prepare records it).
cuda-info:
	@echo "CUDA=$(CUDA) CUDA_HOME=$(CUDA_HOME) NVCC=$(NVCC)$(if $(filter 1,$(CUDA)), CUDA_ARCHS=$(strip $(CUDA_ARCHS)))"
	@printf '%s\n' "$(CUDA_FIND_REPORT)" | tr ';' '\n' | sed 's/^ *//; /^$$/d'

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

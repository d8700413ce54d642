# voxscale build. `make` builds build/voxscale; `make run` trains the default config; `make test` runs every test.
# The CUDA objects (*.cu) are compiled for sm_80 and sm_90 (plus PTX for newer GPUs) whenever nvcc and cuDNN are
# found; `make CUDA=0` forces a CPU-only build. Fragments in mk/*.mk add modules with build steps of their own.

BUILD    ?= build
CC       ?= gcc
ARCH     ?= -march=native
PYTHON   ?= $(CURDIR)/.venv/bin/python
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(CUDA_HOME)/bin/nvcc

PKGS     := libcjson zlib libpng
CFLAGS   := -std=c11 -O3 $(ARCH) -fopenmp -g -Wall -Wextra -Werror -Wno-unused-parameter -MMD -MP \
            -D_GNU_SOURCE -Isrc -Ikernels -I$(BUILD)/gen \
            $(shell pkg-config --cflags $(PKGS) openblas 2>/dev/null)
LDLIBS   := $(shell pkg-config --libs $(PKGS) openblas 2>/dev/null) -lm -lpthread
LDFLAGS  := -fopenmp

# ---- CUDA: auto-detected unless CUDA=0/1 is given ------------------------------------------------------------
ifeq ($(CUDA),)
  CUDA := $(if $(and $(wildcard $(NVCC)),$(wildcard $(CUDA_HOME)/include/cudnn.h)),1,0)
endif
ifeq ($(CUDA),1)
  NVCCFLAGS := -O3 -std=c++17 -Isrc -Ikernels -I$(BUILD)/gen -DVX_CUDA=1 -Xcompiler -Wall,-Werror,-fopenmp \
               -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90 -MMD -MP
  CFLAGS    += -DVX_CUDA=1 -I$(CUDA_HOME)/include
  # cudart is linked statically so the binary needs only the driver and cuDNN (libcudnn.so.9, found through the
  # rpath) at run time.
  LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcudart_static -ldl -lrt -lstdc++
  CU_SRCS   := $(shell find src kernels -name '*.cu')
endif

# every folder of src/ at any depth (src/app, core, model, train, dist, data, bench, tb, trace) and kernels/
C_SRCS   := $(shell find src kernels -name '*.c')
LIB_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(filter-out src/app/main.c,$(C_SRCS))) \
            $(patsubst %.cu,$(BUILD)/%.cu.o,$(CU_SRCS))
MAIN_OBJ := $(BUILD)/src/app/main.o
UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))

# Objects depend on the CUDA setting they were built with: switching between CUDA=0 and CUDA=1 in the same BUILD
# rebuilds them (C files compile differently with VX_CUDA, and the archive's member list changes).
BUILD_MODE := $(BUILD)/.build-mode
$(shell mkdir -p $(BUILD) && echo "CUDA=$(CUDA)" | cmp -s - $(BUILD_MODE) || echo "CUDA=$(CUDA)" > $(BUILD_MODE))

.DEFAULT_GOAL := all
-include mk/*.mk

.PHONY: all deps run test unit-test integration-test bench clean venv
all: $(BUILD)/voxscale

$(BUILD)/voxscale: $(MAIN_OBJ) $(BUILD)/libvoxscale.a
	$(CC) $(LDFLAGS) -o $@ $(MAIN_OBJ) $(BUILD)/libvoxscale.a $(LDLIBS)

$(BUILD)/libvoxscale.a: $(LIB_OBJS) $(BUILD_MODE)
	@rm -f $@
	ar rcs $@ $(filter %.o,$^)

$(BUILD)/%.o: %.c $(BUILD_MODE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(BUILD_MODE)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libvoxscale.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit $(LDFLAGS) -o $@ $< $(BUILD)/libvoxscale.a $(LDLIBS) -lcmocka

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

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# mk/fuzz.mk: the libFuzzer targets of tests/fuzz (the config reader, the checkpoint loader, the command line, the
# TensorBoard record reader, the CSV manifest reader, the volume readers), built with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer into $(BUILD)/fuzz. The library is compiled again there, CPU-only, by a sub-make with
# clang (-fsanitize=fuzzer-no-link instruments it for coverage); the targets link it with libFuzzer's main.
# `ci/fuzz.sh SECONDS` builds and runs them; `make test` runs each for a few seconds.

FUZZ_CC      ?= clang
FUZZ_BUILD   := $(BUILD)/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_LIBS    := $(shell pkg-config --libs $(PKGS) openblas libprotobuf-c 2>/dev/null) -ldnnl -lnifti2 -lznz -lz -lm -lpthread

.PHONY: fuzz fuzz-lib
fuzz: $(FUZZ_TARGETS)

# -O1 keeps the sanitizers' reports readable; clang cannot vectorize every `omp simd` loop at -O1 and would say so.
fuzz-lib:
	@$(MAKE) --no-print-directory CUDA=0 CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) \
		ARCH="-march=x86-64-v2 -O1 -fsanitize=fuzzer-no-link $(FUZZ_SAN) -Wno-pass-failed" $(FUZZ_BUILD)/libvoxscale.a

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_harness.h fuzz-lib
	$(FUZZ_CC) -std=gnu11 -g -O1 -fsanitize=fuzzer $(FUZZ_SAN) -fopenmp -D_GNU_SOURCE -Wall -Wextra -Werror \
		-Wno-unused-parameter -Isrc -Ikernels -I$(FUZZ_BUILD)/gen $(shell pkg-config --cflags $(PKGS) 2>/dev/null) \
		-o $@ $< $(FUZZ_BUILD)/libvoxscale.a $(FUZZ_LIBS)

# mk/asan.mk: `make asan` builds voxscale and the data probe with AddressSanitizer and UndefinedBehaviorSanitizer
# (every report fatal) into $(BUILD)/asan, CPU-only, -O1. ci/test.sh runs the hostile-data and rank-agreement tests
# with them (VOXSCALE=$(BUILD)/asan/voxscale VX_DATA_PROBE=$(BUILD)/asan/tests/tools/data_probe; the tests read
# both variables). Leak detection stays off there: a refused run exits through vx_exit without freeing.
ASAN_BUILD := $(BUILD)/asan
ASAN_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

.PHONY: asan
asan:
	@$(MAKE) --no-print-directory CUDA=0 BUILD=$(ASAN_BUILD) ARCH="-march=native -O1 $(ASAN_SAN)" \
		LDFLAGS="-fopenmp $(ASAN_SAN)" $(ASAN_BUILD)/voxscale $(ASAN_BUILD)/tests/tools/data_probe

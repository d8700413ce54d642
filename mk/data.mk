# mk/data.mk: the readers of real data (src/data): NIfTI-1/2 through libnifti (Debian's libnifti2-dev, which has no
# pkg-config file: its headers include each other from /usr/include/nifti) and PNG slices through libpng (already
# in PKGS).
NIFTI_INC ?= /usr/include/nifti
CFLAGS    += -I$(NIFTI_INC)
LDLIBS    += -lnifti2 -lznz

# The data pipeline's pieces one at a time, for tests/integration/test_data.py (built by `make test`, named outside
# tests/ test_* so ci/test.sh does not run it as a unit test).
DATA_PROBE := $(BUILD)/tests/tools/data_probe
UNIT_TESTS += $(DATA_PROBE)
$(DATA_PROBE): tests/tools/data_probe.c $(BUILD)/libvoxscale.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libvoxscale.a $(LDLIBS)

# The validation metrics (src/train/metrics.c) on numbers from stdin, for tests/integration/test_metrics.py.
METRICS_CHECK := $(BUILD)/tests/tools/metrics_check
UNIT_TESTS += $(METRICS_CHECK)
$(METRICS_CHECK): tests/tools/metrics_check.c $(BUILD)/libvoxscale.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libvoxscale.a $(LDLIBS)

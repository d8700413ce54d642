# mk/comm.mk: the communicators' test program (tests/tools/comm_check.c), which tests/integration/test_comm.py
# runs under mpirun and as tcp ranks. Listed in UNIT_TESTS so `make test` builds it; it lives outside the test_*
# names, so ci/test.sh does not run it as a unit test.
COMM_CHECK := $(BUILD)/tests/tools/comm_check
UNIT_TESTS += $(COMM_CHECK)
$(COMM_CHECK): tests/tools/comm_check.c $(BUILD)/libvoxscale.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libvoxscale.a $(LDLIBS)

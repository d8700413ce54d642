# mk/tb.mk: build steps of the TensorBoard event writer (src/tb) and its sample tool.
# The .proto files in src/tb/proto are compiled by protoc-c into $(BUILD)/gen/tb/proto at build time (generated
# code is never committed); their objects join libvoxscale.a. Imports are written as "tb/proto/x.proto" with
# --proto_path=src so the generated headers include each other as "tb/proto/x.pb-c.h", found through the
# -I$(BUILD)/gen that CFLAGS already has.

PROTOC_C     ?= protoc-c
TB_PROTOS    := $(wildcard src/tb/proto/*.proto)
TB_GEN_DIR   := $(BUILD)/gen/tb/proto
TB_GEN_SRCS  := $(patsubst src/tb/proto/%.proto,$(TB_GEN_DIR)/%.pb-c.c,$(TB_PROTOS))
TB_GEN_HDRS  := $(TB_GEN_SRCS:.c=.h)
TB_GEN_OBJS  := $(TB_GEN_SRCS:.c=.o)

LIB_OBJS += $(TB_GEN_OBJS)
ifeq ($(findstring -lprotobuf-c,$(LDLIBS)),)
  LDLIBS += $(or $(shell pkg-config --libs libprotobuf-c 2>/dev/null),-lprotobuf-c)
endif

# One protoc-c run writes every .pb-c.c/.h pair; a stamp file stands for the whole set so that protoc-c runs
# once, also under make -j (grouped targets would need GNU make 4.3). The stamp takes the time from before the run
# (touched first, renamed into place after): stamped after, it would be newer than the files it stands for, and
# `make -q all` would call a finished tree out of date (ci/docker.sh asks it of the test image).
$(TB_GEN_DIR)/.stamp: $(TB_PROTOS)
	@mkdir -p $(TB_GEN_DIR)
	@touch $@.tmp
	$(PROTOC_C) --proto_path=src --c_out=$(BUILD)/gen $(TB_PROTOS)
	@mv $@.tmp $@
$(TB_GEN_SRCS) $(TB_GEN_HDRS): $(TB_GEN_DIR)/.stamp ;

# Generated code follows protoc-c's style, not ours: compile it without -Werror so a newer protoc-c cannot break
# the build with a warning in code we do not own.
$(TB_GEN_DIR)/%.pb-c.o: $(TB_GEN_DIR)/%.pb-c.c $(TB_GEN_HDRS)
	$(CC) $(filter-out -Werror,$(CFLAGS)) -c $< -o $@

# Everything that includes a generated header must wait for protoc-c; -MMD dependency files cover later builds.
TB_USERS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard src/tb/*.c)) $(BUILD)/tests/test_tb
$(TB_USERS): $(TB_GEN_HDRS)

# The sample tool writes a run the integration tests read back with TensorBoard. It is listed in UNIT_TESTS so
# `make test` builds it, but lives outside tests/ test_* names so ci/test.sh does not run it as a unit test.
TB_SAMPLE := $(BUILD)/tests/tools/tb_sample
UNIT_TESTS += $(TB_SAMPLE)
$(TB_SAMPLE): tests/tools/tb_sample.c $(BUILD)/libvoxscale.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libvoxscale.a $(LDLIBS)

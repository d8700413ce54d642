# mk/ops.mk: the header that includes every registered op's header, generated from the registry
# (kernels/backend/ops.def: VX_OP(name, Type) -> #include "name/name.h"), for code that touches every op's table
# (the tests' backend doubles): so a new op stays its folder plus one line in ops.def.
OPS_ALL_H := $(BUILD)/gen/backend/ops_all.h
$(OPS_ALL_H): kernels/backend/ops.def mk/ops.mk
	@mkdir -p $(dir $@)
	@{ echo '/* ops_all.h: every registered op'"'"'s header, generated from kernels/backend/ops.def by mk/ops.mk */'; \
	   echo '#pragma once'; \
	   sed -n 's/^VX_OP(\([a-z0-9_]*\),.*/#include "\1\/\1.h"/p' $<; } > $@
$(UNIT_TESTS): | $(OPS_ALL_H)

# mk/nccl.mk: NCCL for GPU ranks (src/parallel/comm_nccl.cu) and the unique id of `train --gpus` (src/parallel/nccl_id.c),
# in CUDA builds where mk/detect/cuda.mk found it (CUDA_HOME, NCCL_HOME, /usr or Python's nvidia-nccl wheel).
# Without it the build still works: VX_NCCL stays unset and a multi-GPU run says NCCL is missing
# (src/parallel/comm_stubs.c). NCCL is initialised only by a run of several GPU ranks.
ifeq ($(CUDA),1)
  ifneq ($(NCCL_ROOT),)
    CFLAGS    += -DVX_NCCL=1 $(addprefix -I,$(NCCL_INC))
    NVCCFLAGS += -DVX_NCCL=1 $(addprefix -I,$(NCCL_INC))
    LDLIBS    += -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) $(NCCL_LINK)
  endif
endif

# mk/detect/cuda.mk: where cuDNN, CUPTI, cuBLAS and NCCL are, for the Makefile's CUDA section (included before it,
# so it lives outside the mk/*.mk module fragments). A library is found in the first of these places that has
# include/<header> and, in lib64/ or lib/, lib<name>.so or only its versioned soname lib<name>.so.N:
#   1. <NAME>_HOME when given (CUDNN_HOME, CUPTI_HOME, CUBLAS_HOME, NCCL_HOME): then only there, and its absence
#      is an error, since it was asked for;
#   2. CUDA_HOME, and CUDA_HOME/extras/CUPTI for CUPTI (NVIDIA's toolkit layout), then the system's own /usr
#      (NVIDIA's cuDNN images and Debian/Ubuntu packages: headers in /usr/include, libraries in
#      /usr/lib/<multiarch>; no -I/usr/include is ever added, the compilers search it anyway);
#   3. the nvidia-* pip packages of $(NVIDIA_PYTHON) (default python3): <site-packages>/nvidia/cudnn,
#      nvidia/cu13 (CUDA 13 wheels: CUPTI, cuBLAS), nvidia/cuda_cupti and nvidia/cublas (CUDA 12 wheels),
#      nvidia/nccl. Python is asked only when step 2 lacks one of them, so a merged toolkit costs no process.
# The pip wheels ship only versioned sonames (libcudnn.so.9): such a library is linked as -l:libcudnn.so.9.
# Sets, for X in CUDNN CUPTI CUBLAS NCCL: X_ROOT (empty when not found), X_INC, X_LIBDIR, X_LINK; CUDA_LIB_DIRS
# (the toolkit's lib64 and every found library dir, each once: the -L and RUNPATH list) and CUDA_FIND_REPORT
# (where each was looked for and found, for `make cuda-info`; $(call vx_report,CUDNN ...) for some of them). NCCL is only found here; the
# data-parallel code links it.

NVIDIA_PYTHON ?= python3

VX_MULTIARCH := $(or $(shell $(CC) -print-multiarch 2>/dev/null),x86_64-linux-gnu)
# $(call vx_libdir,ROOT,NAME): ROOT/lib64, ROOT/lib or ROOT/lib/<multiarch>, whichever holds libNAME.so(.N)
vx_libdir = $(firstword $(foreach d,$1/lib64 $1/lib $1/lib/$(VX_MULTIARCH),$(if $(wildcard $d/lib$2.so $d/lib$2.so.[0-9] $d/lib$2.so.[0-9][0-9]),$d)))
# $(call vx_root,HEADER,NAME,ROOTS): the first of ROOTS with include/HEADER and a library dir for NAME
vx_root = $(firstword $(foreach r,$3,$(if $(and $(wildcard $r/include/$1),$(call vx_libdir,$r,$2)),$r)))
# $(call vx_link,LIBDIR,NAME): -lNAME when the unversioned name exists, else -l:libNAME.so.N (its soname)
vx_link = $(if $(wildcard $1/lib$2.so),-l$2,-l:$(notdir $(firstword $(wildcard $1/lib$2.so.[0-9] $1/lib$2.so.[0-9][0-9]))))

# For each: its header, its library name, its places in a toolkit, its dirs under site-packages/nvidia.
VX_CUDA_LIBS     := CUDNN CUPTI CUBLAS NCCL
VXF_CUDNN_HDR    := cudnn.h
VXF_CUDNN_LIB    := cudnn
VXF_CUDNN_LOCAL  := $(CUDA_HOME) /usr
VXF_CUDNN_PIP    := cudnn
VXF_CUPTI_HDR    := cupti.h
VXF_CUPTI_LIB    := cupti
VXF_CUPTI_LOCAL  := $(CUDA_HOME) $(CUDA_HOME)/extras/CUPTI /usr
VXF_CUPTI_PIP    := cu13 cuda_cupti
VXF_CUBLAS_HDR   := cublas_v2.h
VXF_CUBLAS_LIB   := cublas
VXF_CUBLAS_LOCAL := $(CUDA_HOME) /usr
VXF_CUBLAS_PIP   := cu13 cublas
VXF_NCCL_HDR     := nccl.h
VXF_NCCL_LIB     := nccl
VXF_NCCL_LOCAL   := $(CUDA_HOME) /usr
VXF_NCCL_PIP     := nccl

# Step 1 and 2.
$(foreach X,$(VX_CUDA_LIBS),$(eval $X_ROOT := $(call vx_root,$(VXF_$X_HDR),$(VXF_$X_LIB),$(or $($X_HOME),$(VXF_$X_LOCAL)))))
$(foreach X,$(VX_CUDA_LIBS),$(if $(and $($X_HOME),$(if $($X_ROOT),,1)),\
    $(error $X_HOME=$($X_HOME) has no include/$(VXF_$X_HDR) with lib64/ or lib/ holding lib$(VXF_$X_LIB).so*; point $X_HOME at the directory that has both)))

# Step 3, only for what is still missing.
VX_MISSING := $(foreach X,$(VX_CUDA_LIBS),$(if $($X_ROOT),,$X))
ifneq ($(VX_MISSING),)
  ifeq ($(origin NVIDIA_PIP),undefined)
    NVIDIA_PIP := $(shell $(NVIDIA_PYTHON) -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null)
  endif
  $(foreach X,$(VX_MISSING),$(eval $X_ROOT := $(call vx_root,$(VXF_$X_HDR),$(VXF_$X_LIB),$(foreach p,$(NVIDIA_PIP),$(addprefix $p/,$(VXF_$X_PIP))))))
endif

$(foreach X,$(VX_CUDA_LIBS),$(eval $X_INC := $(if $($X_ROOT),$(filter-out /usr/include,$($X_ROOT)/include))))
$(foreach X,$(VX_CUDA_LIBS),$(eval $X_LIBDIR := $(if $($X_ROOT),$(call vx_libdir,$($X_ROOT),$(VXF_$X_LIB)))))
$(foreach X,$(VX_CUDA_LIBS),$(eval $X_LINK := $(if $($X_ROOT),$(call vx_link,$($X_LIBDIR),$(VXF_$X_LIB)))))

# -L and RUNPATH: the toolkit's lib64 (cudart_static) first, then each found dir once, in the order above.
vx_uniq = $(if $1,$(firstword $1) $(call vx_uniq,$(filter-out $(firstword $1),$1)))
CUDA_LIB_DIRS := $(strip $(call vx_uniq,$(CUDA_HOME)/lib64 $(CUDNN_LIBDIR) $(CUPTI_LIBDIR) $(CUBLAS_LIBDIR)))

vx_where = $(or $($1_HOME),$(VXF_$1_LOCAL) and $(NVIDIA_PYTHON)'s nvidia packages [$(or $(NVIDIA_PIP),none)])
vx_report = $(foreach X,$1,$(VXF_$X_LIB): $(if $($X_ROOT),$($X_LIBDIR) ($($X_LINK)),not found in $(call vx_where,$X));)
CUDA_FIND_REPORT = $(call vx_report,$(VX_CUDA_LIBS))

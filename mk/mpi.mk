# mk/mpi.mk: MPI for CPU ranks under mpirun/srun (src/parallel/comm_mpi.c) and the NCCL id's bootstrap there.
# MPI=1 builds it in, MPI=0 leaves it out (src/parallel/comm_stubs.c then says to rebuild), unset: in wherever
# pkg-config finds Open MPI (Debian's libopenmpi-dev). MPI is linked but initialised only by a run of several ranks
# under mpirun or srun: a single-process run never touches it.
ifeq ($(MPI),)
  MPI := $(if $(shell pkg-config --exists ompi-c 2>/dev/null && echo yes),1,0)
endif
ifeq ($(MPI),1)
  CFLAGS += -DVX_MPI=1 $(shell pkg-config --cflags ompi-c 2>/dev/null)
  LDLIBS += $(or $(shell pkg-config --libs ompi-c 2>/dev/null),-lmpi)
  NVCCFLAGS += -DVX_MPI=1
endif

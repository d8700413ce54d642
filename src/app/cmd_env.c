/* cmd_env.c: `voxscale env`, as `accelerate env` and `ds_report`: the build and its libraries (built against and
 * loaded), the operating system, the hardware as detect sees it, the environment variables that change what runs,
 * and the device and plan train would choose for a config, in one block to paste into a bug report. */
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

#include "app/cli.h"
#include "app/commands.h"
#include "app/version.h"
#include "core/util.h"
#include "hw/hw.h"
#include "train/runtime.h"

extern char **environ;

static const char *HELP =
    "usage: voxscale env [--config FILE] [--device D] [--batch-size N] [--amp P] [--threads N] [--set K=V]\n"
    "  prints, to paste into a bug report: the version and build, the CUDA, cuDNN, NCCL, oneDNN, OpenBLAS and MPI\n"
    "  versions (built against and loaded), the OS, CPUs, RAM and GPUs, the environment variables that change what\n"
    "  runs (VX_*, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, ...), and the device and plan `train` would choose for the\n"
    "  config (default " DEFAULT_CONFIG ")\n";

/* The variables that change what voxscale runs: its own (VX_*), CUDA's, NCCL's, OpenMP's and the launchers' rank
 * variables; nothing else (a bug report should not carry the rest of an environment). */
static int relevant(const char *kv) {
    static const char *const PREFIX[] = {"VX_", "CUDA_", "NVIDIA_", "NCCL_", "OMP_", "OPENBLAS_", "DNNL_", "ONEDNN_",
                                         "OMPI_COMM_WORLD_", "SLURM_PROCID", "SLURM_NTASKS", "RANK=", "WORLD_SIZE=",
                                         "LOCAL_RANK="};
    for (size_t i = 0; i < sizeof PREFIX / sizeof *PREFIX; i++)
        if (strncmp(kv, PREFIX[i], strlen(PREFIX[i])) == 0) return 1;
    return 0;
}

int cmd_env(int argc, char **argv) {
    CliArgs a;
    cli_parse(argc, argv, &a, HELP, ",config,device,batch-size,threads,amp,set,checkpoint-activations,");
    printf("Copy-and-paste the text below into a bug report.\n\n");
    version_print(stdout, "");
    struct utsname u;
    if (uname(&u) == 0) printf("os: %s %s %s (%s)\n", u.sysname, u.release, u.machine, u.version);
    HwInfo hw;
    hw_detect(&hw);
    hw_print(&hw);
    printf("nvidia device files in /dev: %d\n", hw.gpu_device_files);
    int shown = 0;
    char safe[600];
    for (char **e = environ; e && *e; e++)
        if (relevant(*e)) printf("%s%s", shown++ ? ", " : "environment: ", vx_escape(*e, safe, sizeof safe));
    printf("%s\n", shown ? "" : "environment: no VX_*, CUDA_*, NCCL_*, OMP_* or launcher variables set");
    printf("the plan train would choose for %s%s:\n", a.config_path, a.config_given ? "" : " (the default config)");
    fflush(stdout);
    vx_verbose = 1; /* every line of the plan, not the run header's few */
    Runtime rt;
    runtime_open(&rt, &a.cfg.model, &a.cfg.train, 1);
    runtime_close(&rt);
    return 0;
}

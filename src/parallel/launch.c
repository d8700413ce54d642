/* launch.c: reading the launch environment (dist_detect) and `train --gpus N`'s launcher (dist_spawn); see
 * launch.h. */
#include "parallel/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/stop_signal.h"
#include "core/util.h"

#define SPAWN_GRACE_S 10 /* after a rank failed: how long the others get to end on SIGTERM before SIGKILL */
#define SRUN_STOP_GRACE_S 20 /* srun's SIGTERM: how long a rank's stop with a checkpoint may take (under Slurm's
                              * default KillWait, 30 s, after which it SIGKILLs the tasks) */

/* The integer in variable `name`, or -1 when it is not set; exit 2 when it is set but not a whole number. */
static int env_int(const char *name) {
    const char *s = getenv(name);
    if (!s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0 || errno || v < 0 || v > 1000000)
        vx_usage_error("environment variable %s=\"%s\" is not a whole number 0..1000000; check the launcher's "
                       "settings", name, s);
    return (int)v;
}

/* An integer variable the launcher must have set alongside the others. */
static int env_required(const char *name, const char *launcher) {
    int v = env_int(name);
    if (v < 0) vx_usage_error("%s launch: environment variable %s is not set; start the ranks with %s", launcher, name,
                              launcher);
    return v;
}

/* "4(x2),3" -> 4: Slurm's tasks per node, of this node when they are all alike. */
static int leading_int(const char *s) { return s && *s >= '0' && *s <= '9' ? atoi(s) : -1; }

static void set_ranks(DistEnv *e, const char *launcher, int rank, int world, int local_rank, int local_world) {
    snprintf(e->launcher, sizeof e->launcher, "%s", launcher);
    e->rank = rank;
    e->world = world;
    e->local_rank = local_rank >= 0 ? local_rank : 0;
    e->local_world = local_world > 0 ? local_world : (world > 0 ? world : 1);
}

static void read_master(DistEnv *e, const char *addr_var, const char *port_var, int port_offset) {
    const char *addr = getenv(addr_var);
    if (!addr || !*addr) vx_usage_error("%s launch: %s is not set; it names the host of rank 0", e->launcher, addr_var);
    if (strlen(addr) >= sizeof e->master_addr) vx_usage_error("%s=\"%.40s...\" is too long", addr_var, addr);
    snprintf(e->master_addr, sizeof e->master_addr, "%s", addr);
    int port = env_int("VX_RENDEZVOUS_PORT");
    if (port < 0) port = env_required(port_var, e->launcher) + port_offset;
    if (port < 1 || port > 65535) vx_usage_error("%s launch: rendezvous port %d is not a TCP port", e->launcher, port);
    e->master_port = port;
}

void dist_detect(DistEnv *e) {
    memset(e, 0, sizeof *e);
    set_ranks(e, "single", 0, 1, 0, 1);
    if (getenv("VX_RANK")) {
        const int rank = env_required("VX_RANK", "spawn"), world = env_required("VX_WORLD_SIZE", "spawn");
        const int local = env_required("VX_LOCAL_RANK", "spawn");
        set_ranks(e, "spawn", rank, world, local, env_required("VX_LOCAL_WORLD_SIZE", "spawn"));
        const char *id = getenv("VX_NCCL_ID");
        if (id && strlen(id) < sizeof e->nccl_id) snprintf(e->nccl_id, sizeof e->nccl_id, "%s", id);
        if (getenv("VX_MASTER_ADDR")) read_master(e, "VX_MASTER_ADDR", "VX_MASTER_PORT", 0);
    } else if (getenv("OMPI_COMM_WORLD_RANK")) {
        set_ranks(e, "mpirun", env_required("OMPI_COMM_WORLD_RANK", "mpirun"),
                  env_required("OMPI_COMM_WORLD_SIZE", "mpirun"), env_int("OMPI_COMM_WORLD_LOCAL_RANK"),
                  env_int("OMPI_COMM_WORLD_LOCAL_SIZE"));
    } else if (getenv("PMI_RANK") && getenv("PMI_SIZE")) {
        set_ranks(e, "mpirun", env_int("PMI_RANK"), env_int("PMI_SIZE"), env_int("MPI_LOCALRANKID"),
                  env_int("MPI_LOCALNRANKS"));
    } else if (getenv("RANK") || getenv("WORLD_SIZE") || getenv("LOCAL_RANK")) {
        /* torchrun sets all three: one alone (a partial environment, a variable left in a shell) would make each
         * process train as if it were alone */
        static const char *const VARS[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK"};
        char list[2][64] = {"", ""}; /* [0] missing, [1] set */
        int count[2] = {0, 0};
        for (int i = 0; i < 3; i++) {
            const int set = getenv(VARS[i]) != NULL;
            const size_t used = strlen(list[set]);
            snprintf(list[set] + used, sizeof list[set] - used, "%s%s", count[set]++ ? " and " : "", VARS[i]);
        }
        if (count[0])
            vx_usage_error("torchrun launch: %s %s not set, but %s %s: a torchrun environment has all three (RANK, "
                           "WORLD_SIZE, LOCAL_RANK); set them all, or unset %s to train as one process", list[0],
                           count[0] > 1 ? "are" : "is", list[1], count[1] > 1 ? "are" : "is",
                           count[1] > 1 ? "them" : "it");
        const int rank = env_required("RANK", "torchrun"), world = env_required("WORLD_SIZE", "torchrun");
        const int local = env_required("LOCAL_RANK", "torchrun"); /* read in this order: the first bad one is named */
        /* DeepSpeed's launcher (deepspeed --no_python --no_local_rank) sets these too, but its local count as
         * LOCAL_SIZE (deepspeed/launcher/launch.py) */
        const int local_world = env_int("LOCAL_WORLD_SIZE");
        set_ranks(e, "torchrun", rank, world, local, local_world > 0 ? local_world : env_int("LOCAL_SIZE"));
        read_master(e, "MASTER_ADDR", "MASTER_PORT", 1);
    } else if (getenv("SLURM_PROCID") && getenv("SLURM_NTASKS") && (getenv("SLURM_STEP_ID") || getenv("SLURM_STEPID"))) {
        /* only inside a job step started by srun: a batch script's own shell has SLURM_PROCID=0 as well */
        set_ranks(e, "srun", env_required("SLURM_PROCID", "srun"), env_required("SLURM_NTASKS", "srun"),
                  env_int("SLURM_LOCALID"), leading_int(getenv("SLURM_STEP_TASKS_PER_NODE")));
    }
    if (e->world < 1 || e->rank >= e->world || e->local_rank >= e->local_world)
        vx_usage_error("%s launch: rank %d, world size %d, local rank %d of %d do not fit together; check the "
                       "launcher's settings", e->launcher, e->rank, e->world, e->local_rank, e->local_world);
}

void dist_describe(const DistEnv *e, char *out, size_t len) {
    if (e->world == 1) snprintf(out, len, "1 process");
    else
        snprintf(out, len, "%d ranks (%s), this is rank %d (local %d of %d)", e->world, e->launcher, e->rank,
                 e->local_rank, e->local_world);
}

static DistEnv ended_env;

/* "rank 1/2 (pid N on HOST)": who speaks, in the lines a launcher's SIGTERM makes */
static void who(char *out, size_t len) {
    char host[64] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = 0;
    snprintf(out, len, "rank %d/%d (pid %ld on %s)", ended_env.rank, ended_env.world, (long)getpid(), host);
}

static void say_ended(void) {
    char me[128];
    who(me, sizeof me);
    fflush(stdout); /* (this thread is not a handler: the main thread may be stuck in a collective, not in stdio) */
    fprintf(stderr, "voxscale: %s: ended by %s (SIGTERM): a peer rank exited or the job is being stopped; exit %d\n",
            me, ended_env.launcher, VX_EXIT_DIST);
    _exit(VX_EXIT_DIST);
}

/* srun's stop that did not finish in time: a peer is gone and this rank waits in a collective for it */
static void *srun_deadline(void *arg) {
    (void)arg;
    struct timespec t = {SRUN_STOP_GRACE_S, 0};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
    say_ended();
    return NULL;
}

static void launcher_ended(int sig) {
    if (sig != SIGTERM) return;
    if (strcmp(ended_env.launcher, "srun") != 0) say_ended();
    /* Slurm sends SIGTERM to every task of the job at once (scancel, the time limit, a preemption) and SIGKILL only
     * KillWait seconds later (30 by default): each rank takes it as a stop request (stop_signal_requested), ends
     * after the same step (the flag rides in the step's all-reduce), rank 0 writes a checkpoint, exit 130. A stop
     * that cannot finish (a peer died first: srun then ends the others) ends this rank with the line above. */
    static int armed;
    if (armed++) return;
    char me[128];
    who(me, sizeof me);
    fprintf(stderr, "voxscale: %s: SIGTERM from srun (scancel or the job's time limit): stopping after this step "
            "with a checkpoint (exit 130), or exit %d if not done within %d s\n", me, VX_EXIT_DIST, SRUN_STOP_GRACE_S);
    pthread_t t;
    if (pthread_create(&t, NULL, srun_deadline, NULL) != 0) say_ended();
    pthread_detach(t);
}

void dist_end_on_launcher_sigterm(const DistEnv *env) {
    if (strcmp(env->launcher, "mpirun") != 0 && strcmp(env->launcher, "srun") != 0) return;
    ended_env = *env;
    stop_signal_hook(launcher_ended);
}

int dist_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) vx_fatal("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &alen) != 0)
        vx_fatal("cannot find a free loopback port for the ranks' rendezvous");
    close(fd);
    return ntohs(a.sin_port);
}

/* ---- dist_spawn ------------------------------------------------------------------------------------------ */

typedef struct {
    pid_t pid;
    int done, status;
} Child;

static void describe_status(int status, char *out, size_t len) {
    if (WIFEXITED(status)) snprintf(out, len, "exited with code %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(out, len, "ended with status %d", status);
}

/* Which of several failures a sweep found is the cause (lowest first): a death by a signal, then an exit of the
 * rank's own (2 bad input, 4 diverged, ...), then exit 3, which a rank takes when a peer vanished or stalled. */
#define CAUSE_WAIT_S 1.0 /* how long an exit 3 waits for the rank whose end caused it */
static int failure_rank(int status) {
    if (!WIFEXITED(status)) return 0;
    return WEXITSTATUS(status) == VX_EXIT_DIST ? 2 : 1;
}

static pid_t start_rank(int rank, int nproc, const char *nccl_id, int port, pid_t pgid, char **argv,
                        const sigset_t *old_mask) {
    pid_t pid = fork();
    if (pid < 0) vx_fatal("cannot start rank %d: fork failed", rank);
    if (pid > 0) {
        setpgid(pid, pgid ? pgid : pid); /* also here: no race with the child's own call */
        return pid;
    }
    setpgid(0, pgid); /* a group of their own: the terminal's Ctrl-C reaches the parent, which forwards it once */
    sigprocmask(SIG_SETMASK, old_mask, NULL);
    char v[64];
    snprintf(v, sizeof v, "%d", rank);
    setenv("VX_RANK", v, 1);
    setenv("VX_LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", nproc);
    setenv("VX_WORLD_SIZE", v, 1);
    setenv("VX_LOCAL_WORLD_SIZE", v, 1);
    if (nccl_id[0]) setenv("VX_NCCL_ID", nccl_id, 1);
    if (port > 0) {
        setenv("VX_MASTER_ADDR", "127.0.0.1", 1);
        snprintf(v, sizeof v, "%d", port);
        setenv("VX_MASTER_PORT", v, 1);
    }
    execv("/proc/self/exe", argv);
    fprintf(stderr, "voxscale: cannot start rank %d: exec /proc/self/exe failed (%s)\n", rank, strerror(errno));
    _exit(VX_EXIT_FAIL);
}

int dist_spawn(int nproc, int on_gpu, int argc, char **argv) {
    (void)argc;
    char nccl_id[260] = "";
    int port = 0;
    if (on_gpu) {
        char why[200];
        if (!dist_nccl_unique_id(nccl_id, sizeof nccl_id, why, sizeof why))
            vx_usage_error("--gpus %d: cannot make the NCCL id the ranks meet with: %s", nproc, why);
    }
    /* the tcp rendezvous: CPU ranks' communicator, and where GPU ranks agree on the device first (comm_open) */
    port = dist_free_port();
    /* SIGCHLD is taken synchronously (sigtimedwait) so that reaping and forwarding happen in one loop; SIGINT and
     * SIGTERM are core/stop_signal.h's requests, looked at on every tick (the ranks start with them unblocked) */
    sigset_t set, old, child;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old);
    child = old;
    sigdelset(&child, SIGINT);
    sigdelset(&child, SIGTERM);
    stop_signal_catch(1);
    Child *kids = vx_calloc((size_t)nproc, sizeof *kids);
    pid_t pgid = 0;
    for (int r = 0; r < nproc; r++) {
        kids[r].pid = start_rank(r, nproc, nccl_id, port, pgid, argv, &child);
        if (r == 0) pgid = kids[0].pid;
    }
    int left = nproc, first_failed = -1, stop_signal = 0, cause = -1, named = 0;
    double kill_at = 0, name_at = 0;
    while (left > 0) {
        siginfo_t info;
        struct timespec tick = {0, (cause >= 0 && !named ? 20 : 100) * 1000 * 1000};
        (void)sigtimedwait(&set, &info, &tick);
        if (!stop_signal && stop_signal_requested()) { /* forwarded once */
            stop_signal = stop_signal_requested();
            killpg(pgid, stop_signal); /* each rank finishes its step, rank 0 writes a checkpoint, all exit 130 */
        }
        pid_t pid;
        int status;
        /* The rank to name is the cause. A rank killed by a signal closes its sockets before its parent can reap it,
         * and its peer may end with exit 3 ("rank 1 vanished") and be reaped first: the line named rank 0's exit 3
         * instead of rank 1's death (1 run in 15). So an exit 3 is named only when, within CAUSE_WAIT_S, no rank
         * ended of a cause of its own (a signal, another exit code). */
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int r = 0; r < nproc; r++) {
                if (kids[r].pid != pid || kids[r].done) continue;
                kids[r].done = 1;
                kids[r].status = status;
                left--;
                const int ok = WIFEXITED(status) && (WEXITSTATUS(status) == 0 ||
                                                     (stop_signal && WEXITSTATUS(status) == VX_EXIT_SIGNAL));
                if (!ok && !named && (cause < 0 || failure_rank(status) < failure_rank(kids[cause].status))) {
                    if (cause < 0) name_at = vx_now() + CAUSE_WAIT_S;
                    cause = r;
                }
            }
        }
        if (cause >= 0 && !named && (failure_rank(kids[cause].status) < 2 || vx_now() >= name_at || left == 0)) {
            named = 1;
            first_failed = cause;
            char how[96];
            describe_status(kids[cause].status, how, sizeof how);
            fprintf(stderr, "voxscale: rank %d/%d (pid %ld) %s; ending the other ranks\n", cause, nproc,
                    (long)kids[cause].pid, how);
            killpg(pgid, SIGTERM);
            kill_at = vx_now() + SPAWN_GRACE_S;
        }
        if (kill_at > 0 && vx_now() > kill_at) {
            killpg(pgid, SIGKILL); /* ranks stuck in a collective with a dead peer do not stop on SIGTERM */
            kill_at = 0;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    int code = VX_EXIT_OK;
    if (first_failed >= 0) {
        const int st = kids[first_failed].status;
        code = WIFEXITED(st) ? WEXITSTATUS(st) : VX_EXIT_DIST;
    } else if (stop_signal) {
        code = VX_EXIT_SIGNAL;
    }
    free(kids);
    return code;
}

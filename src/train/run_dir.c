/* run_dir.c: creating, locking and guarding the run directory (see run_dir.h). */
#include "train/run_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/fsutil.h"
#include "core/util.h"

#define LOCK_NAME ".voxscale.lock"

/* Takes the directory's lock or exits 2 naming the process that holds it; returns the lock file's descriptor,
 * which stays open (and the lock held) until the process ends; O_CLOEXEC keeps it out of programs the run
 * starts. */
static int lock_dir(const char *dir, char *path, size_t path_len) {
    snprintf(path, path_len, "%s/" LOCK_NAME, dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fs_write_failed("create the lock file", path, errno);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            char pid[32] = "";
            ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
            pid[n > 0 ? n : 0] = 0;
            pid[strcspn(pid, "\n")] = 0;
            vx_usage_error("run directory %s is in use by another voxscale run (pid %s); wait for it to end or choose "
                           "another --out", dir, pid[0] ? pid : "unknown");
        }
        /* some network file systems cannot lock: go on, as TensorBoard's own writer does there */
        if (errno != ENOLCK && errno != EOPNOTSUPP) fs_write_failed("lock", path, errno);
    }
    return fd;
}

/* The owner's pid in the lock file, for the message of the next run that finds it busy. */
static void claim_lock(int fd, const char *path) {
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) fs_write_failed("write the lock file", path, errno);
}

/* A directory holding config.json holds a run: a fresh run must not mix its files into it, and a resumed run only
 * continues a run of the same model and seed. */
static void guard_existing_run(const char *dir, int resuming, uint64_t model_fingerprint, int64_t seed) {
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (!resuming)
        vx_usage_error("run directory %s already holds a run (its config.json); resume it with --resume "
                       "%s/checkpoints/step_N.ckpt, or choose another --out", dir, dir);
    Config there;
    config_load(&there, path);
    if (config_model_fingerprint(&there.model) != model_fingerprint || there.train.seed != seed)
        vx_usage_error("run directory %s holds a run of another model or seed (its config.json); resume into a new "
                       "--out, or use the config of the run that is there", dir);
}

/* runs/<config>-<time>, or -2, -3, ... after it when runs started in the same second took the name: the first
 * name this process creates itself is its own. */
static void default_dir(OutputConfig *cfg, const char *config_name) {
    char stamp[32];
    time_t now = time(NULL);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
    fs_mkdirs("runs");
    for (int i = 1; i < 1000; i++) {
        if (i == 1) snprintf(cfg->dir, sizeof cfg->dir, "runs/%s-%s", config_name, stamp);
        else snprintf(cfg->dir, sizeof cfg->dir, "runs/%s-%s-%d", config_name, stamp, i);
        if (mkdir(cfg->dir, 0755) == 0) return;
        if (errno != EEXIST) fs_write_failed("create the directory", cfg->dir, errno);
    }
    vx_usage_error("runs/ holds 999 runs of %s started at %s; choose a directory with --out", config_name, stamp);
}

void run_dir_take(OutputConfig *cfg, const char *config_name, int resuming, uint64_t model_fingerprint,
                  int64_t seed) {
    if (cfg->dir[0] == 0) default_dir(cfg, config_name);
    fs_mkdirs(cfg->dir);
    char lock_path[CONFIG_STR + 32];
    const int lock_fd = lock_dir(cfg->dir, lock_path, sizeof lock_path);
    /* a refused run leaves even the lock file as it was */
    guard_existing_run(cfg->dir, resuming, model_fingerprint, seed);
    claim_lock(lock_fd, lock_path);
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/checkpoints", cfg->dir);
    fs_mkdirs(path);
}

/* run_dir.c: creating, locking and guarding the run directory (see run_dir.h). */
#include "train/run_dir.h"

#include <dirent.h>
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

/* What a directory holds of a run's files (another run's, or this one's before a resume). */
typedef struct {
    int config;        /* config.json */
    int checkpoints;   /* checkpoints/ *.ckpt (step_N and stage_k_best) */
    int metrics;       /* metrics.jsonl */
    int events;        /* events.out.tfevents.* */
    int samples;       /* samples.tsv, samples.rankN.tsv */
    int other;         /* anything else but the lock file and an empty checkpoints/ */
    char first_other[64];
} DirContents;

static int starts(const char *s, const char *head) { return strncmp(s, head, strlen(head)) == 0; }
static int ends(const char *s, const char *tail) {
    const size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}
static int is_samples(const char *name) { return starts(name, "samples") && ends(name, ".tsv"); }

static DirContents inspect(const char *dir) {
    DirContents c = {0};
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, LOCK_NAME)) continue;
        if (!strcmp(n, "config.json")) c.config = 1;
        else if (!strcmp(n, "metrics.jsonl")) c.metrics = 1;
        else if (starts(n, "events.out.tfevents.")) c.events++;
        else if (is_samples(n)) c.samples++;
        else if (!strcmp(n, "checkpoints")) {
            char sub[CONFIG_STR + 32];
            snprintf(sub, sizeof sub, "%s/checkpoints", dir);
            DIR *k = opendir(sub);
            for (struct dirent *f; k && (f = readdir(k));)
                if (strcmp(f->d_name, ".") && strcmp(f->d_name, "..")) {
                    struct stat st; /* (a directory named step_2.ckpt is in the way, not a checkpoint) */
                    if (ends(f->d_name, ".ckpt") && fstatat(dirfd(k), f->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
                        c.checkpoints++;
                    else if (!ends(f->d_name, ".ckpt.tmp") && !c.other++)
                        snprintf(c.first_other, sizeof c.first_other, "checkpoints/%.40s", f->d_name);
                }
            if (k) closedir(k);
            else if (!c.other++) snprintf(c.first_other, sizeof c.first_other, "%.60s", n); /* a file in the way */
        } else if (!c.other++) {
            snprintf(c.first_other, sizeof c.first_other, "%.60s", n);
        }
    }
    if (d) closedir(d);
    return c;
}

/* The files of a run that ended before its first checkpoint, which the run taking its directory over replaces:
 * config.json is rewritten, the rest removed (a new event file would show the dead run's curves beside its own,
 * metrics.jsonl would get its rows appended). */
static void remove_dead_run(const char *dir) {
    DIR *d = opendir(dir);
    char path[CONFIG_STR + 300];
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        if (!strcmp(n, "metrics.jsonl") || starts(n, "events.out.tfevents.") || is_samples(n)) {
            snprintf(path, sizeof path, "%s/%s", dir, n);
            if (unlink(path) != 0 && errno != ENOENT) fs_write_failed("remove", path, errno);
        }
    }
    if (d) closedir(d);
}

/* Decides what a run may do with a directory that exists (see run_dir.h): returns 1 when it holds a dead run to
 * take over, 0 when there is nothing to replace, and exits 2 when it holds another run or a run's files not of
 * this run. */
static int guard_existing_run(const char *dir, int resuming, uint64_t model_fingerprint, int64_t seed) {
    const DirContents c = inspect(dir);
    const int run_files = c.checkpoints || c.metrics || c.events || c.samples;
    if (!c.config) {
        /* a partial copy, or a folder where checkpoints were collected: a fresh run would overwrite step_N.ckpt and
         * append its rows to metrics.jsonl */
        if (run_files)
            vx_usage_error("run directory %s holds a run's files without its config.json (%d checkpoint(s)%s%s%s): not "
                           "of this run; choose another --out, or move them away", dir, c.checkpoints,
                           c.metrics ? ", metrics.jsonl" : "", c.events ? ", event files" : "",
                           c.samples ? ", samples.tsv" : "");
        if (c.other)
            vx_log("run: %s already holds %d other entr%s (%s first); the run writes beside them\n", dir, c.other,
                   c.other == 1 ? "y" : "ies", c.first_other);
        return 0;
    }
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (resuming) {
        Config there;
        config_load(&there, path);
        if (config_model_fingerprint(&there.model) != model_fingerprint || there.train.seed != seed)
            vx_usage_error("run directory %s holds a run of another model or seed (its config.json); resume into a "
                           "new --out, or use the config of the run that is there", dir);
        return 0;
    }
    if (c.checkpoints)
        vx_usage_error("run directory %s already holds a run (its config.json and %d checkpoint(s)); resume it with "
                       "--resume %s/checkpoints/step_N.ckpt, or choose another --out", dir, c.checkpoints, dir);
    /* a run that ended before its first checkpoint (a refused volume, a failed launch, a kill): nothing to resume,
     * and its lock is free (lock_dir took it), so it does not stand in the way of its rerun */
    vx_log("run: %s holds a run that ended before its first checkpoint (no checkpoint, its lock free): taking it "
           "over; its config.json, metrics.jsonl and event files are replaced\n", dir);
    return 1;
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
    const int take_over = guard_existing_run(cfg->dir, resuming, model_fingerprint, seed);
    claim_lock(lock_fd, lock_path);
    if (take_over) remove_dead_run(cfg->dir);
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/checkpoints", cfg->dir);
    fs_mkdirs(path);
}

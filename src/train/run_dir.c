/* run_dir.c: creating, locking and guarding the run directory (see run_dir.h). */
#include "train/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/fsutil.h"
#include "core/outguard.h"
#include "core/util.h"

/* The run directory this process locked (run_dir_take), held until it ends. */
static OutLock run_lock = {.fd = -1};

/* What a directory holds of a run's files (another run's, or this one's before a resume). */
typedef struct {
    int config;        /* config.json */
    int checkpoints;   /* checkpoints/: every form a run writes: step_N.ckpt, best.ckpt and stage_k_best.ckpt files,
                        * and a sharded run's step_N.zero, best.zero, stage_k_best.zero directories */
    int metrics;       /* metrics.jsonl */
    int events;        /* events.out.tfevents.* */
    int samples;       /* samples.tsv, samples.rankN.tsv */
    int other;         /* anything else but the lock file and an empty checkpoints/ */
    char first_other[64];
    char last_step[64]; /* the step_N checkpoint of the largest N, for the message that says how to resume */
    long last_n;
} DirContents;

static int starts(const char *s, const char *head) { return strncmp(s, head, strlen(head)) == 0; }
static int ends(const char *s, const char *tail) {
    const size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}
static int is_samples(const char *name) { return starts(name, "samples") && ends(name, ".tsv"); }

/* A checkpoint's temporary (fs_write_atomic's step_2.ckpt.<6 letters>.tmp, or an older build's step_2.ckpt.tmp),
 * left by a run killed while writing it: not a checkpoint, nor in the way. */
static int is_ckpt_temp(const char *name) {
    const char *c = strstr(name, ".ckpt.");
    return c && ends(name, ".tmp") && (strcmp(c, ".ckpt.tmp") == 0 || strlen(c) == strlen(".ckpt.XXXXXX.tmp"));
}

/* Counts an entry of checkpoints/ that is a checkpoint of any form; 0 for anything else (a directory named
 * step_2.ckpt is in the way, not a checkpoint). */
static int count_checkpoint(DIR *k, const char *name, DirContents *c) {
    struct stat st;
    if (fstatat(dirfd(k), name, &st, 0) != 0) return 0;
    const int file = ends(name, ".ckpt") && S_ISREG(st.st_mode), sharded = ends(name, ".zero") && S_ISDIR(st.st_mode);
    if (!file && !sharded) return 0;
    c->checkpoints++;
    long n;
    char tail[8];
    if (sscanf(name, "step_%ld.%7s", &n, tail) == 2 && n > c->last_n) {
        c->last_n = n;
        snprintf(c->last_step, sizeof c->last_step, "%.60s", name);
    }
    return 1;
}

static DirContents inspect(const char *dir) {
    DirContents c = {0};
    c.last_n = -1;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, OUT_LOCK_NAME)) continue;
        if (!strcmp(n, "config.json")) c.config = 1;
        else if (!strcmp(n, "metrics.jsonl")) c.metrics = 1;
        else if (starts(n, "events.out.tfevents.")) c.events++;
        else if (is_samples(n)) c.samples++;
        else if (!strcmp(n, "checkpoints")) {
            char sub[CONFIG_STR + 32];
            snprintf(sub, sizeof sub, "%s/checkpoints", dir);
            DIR *k = opendir(sub);
            for (struct dirent *f; k && (f = readdir(k));)
                if (strcmp(f->d_name, ".") && strcmp(f->d_name, "..") && !count_checkpoint(k, f->d_name, &c) &&
                    !is_ckpt_temp(f->d_name) && !c.other++)
                    snprintf(c.first_other, sizeof c.first_other, "checkpoints/%.40s", f->d_name);
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

/* Cuts a file of rows keyed by step (metrics.jsonl's {"step": N, ...}, samples.tsv's N\t...), written in step order,
 * after the rows of step `step`: a run resumed from a checkpoint of that step logs the later steps again, and a
 * crashed run's rows of them would stand twice. A torn last row (a kill mid-write) goes too; a row whose step
 * cannot be read is kept. Returns the rows cut. */
static long cut_after_step(const char *path, const char *key_format, int64_t step) {
    FILE *f = fopen(path, "r+");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    long at = 0, cut_at = -1, cut = 0;
    for (ssize_t n; (n = getline(&line, &cap, f)) > 0; at += n) {
        long long s;
        const int torn = line[n - 1] != '\n';
        if (cut_at < 0 && (torn || (sscanf(line, key_format, &s) == 1 && s > step))) cut_at = at;
        if (cut_at >= 0) cut++;
    }
    free(line);
    if (cut_at >= 0 && (ftruncate(fileno(f), cut_at) != 0 || fsync(fileno(f)) != 0))
        fs_write_failed("cut the rows after the checkpoint from", path, errno);
    if (fclose(f) != 0) fs_write_failed("write", path, errno);
    return cut;
}

/* The run's own rows of the steps after the checkpoint it resumes from: metrics.jsonl and the samples files. */
static void cut_resumed_run(const char *dir, int64_t step) {
    DIR *d = opendir(dir);
    char path[CONFIG_STR + 300];
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        const int metrics = !strcmp(n, "metrics.jsonl");
        if (!metrics && !is_samples(n)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, n);
        const long cut = cut_after_step(path, metrics ? "{\"step\": %lld" : "%lld\t", step);
        if (cut)
            vx_log("run: %s: %ld row(s) after step %lld (the checkpoint resumed) removed: the run logs those steps "
                   "again\n", path, cut, (long long)step);
    }
    if (d) closedir(d);
}

/* Decides what a run may do with a directory that exists (see run_dir.h): returns 1 when it holds a dead run to
 * take over, 0 when there is nothing to replace, and -1 with why (one line, exit 2) when it holds another run or a
 * run's files not of this run. */
static int guard_existing_run(const char *dir, int resuming, uint64_t model_fingerprint, int64_t seed, char *why,
                              size_t why_len) {
    const DirContents c = inspect(dir);
    const int run_files = c.checkpoints || c.metrics || c.events || c.samples;
    if (!c.config) {
        /* a partial copy, or a folder where checkpoints were collected: a fresh run would overwrite step_N.ckpt (or a
         * sharded step_N.zero's shards) and append its rows to metrics.jsonl */
        if (run_files) {
            snprintf(why, why_len, "run directory %s holds a run's files without its config.json (%d "
                     "checkpoint(s)%s%s%s): not of this run; choose another --out, or move them away", dir,
                     c.checkpoints, c.metrics ? ", metrics.jsonl" : "", c.events ? ", event files" : "",
                     c.samples ? ", samples.tsv" : "");
            return -1;
        }
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
        if (config_model_fingerprint(&there.model) != model_fingerprint || there.train.seed != seed) {
            snprintf(why, why_len, "run directory %s holds a run of another model or seed (its config.json); resume "
                     "into a new --out, or use the config of the run that is there", dir);
            return -1;
        }
        return 0;
    }
    if (c.checkpoints) {
        snprintf(why, why_len, "run directory %s already holds a run (its config.json and %d checkpoint(s)); resume it "
                 "with --resume %s/checkpoints/%s, or choose another --out", dir, c.checkpoints, dir,
                 c.last_step[0] ? c.last_step : "step_N.ckpt");
        return -1;
    }
    /* a run that ended before its first checkpoint (a refused volume, a failed launch, a kill): nothing to resume,
     * and its lock is free (out_lock took it), so it does not stand in the way of its rerun */
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

void run_dir_take(OutputConfig *cfg, const char *config_name, int64_t resume_step, uint64_t model_fingerprint,
                  int64_t seed) {
    if (cfg->dir[0] == 0) default_dir(cfg, config_name);
    fs_mkdirs(cfg->dir);
    out_lock(cfg->dir, "run directory", &run_lock);
    char why[CONFIG_STR * 2 + 300];
    const int take_over = guard_existing_run(cfg->dir, resume_step >= 0, model_fingerprint, seed, why, sizeof why);
    if (take_over < 0) {
        out_lock_refused(&run_lock); /* a refused run leaves even the lock file as it was */
        vx_usage_error("%s", why);
    }
    out_lock_claim(&run_lock);
    if (take_over) remove_dead_run(cfg->dir);
    if (resume_step >= 0) cut_resumed_run(cfg->dir, resume_step);
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/checkpoints", cfg->dir);
    fs_mkdirs(path);
}

void run_dir_check_ours(const char *what) {
    char why[200];
    if (!run_dir_is_ours(why, sizeof why))
        vx_exit_error(VX_EXIT_STORAGE, "run directory %s is no longer this run's: %s; %s is not written (it would land "
                      "among another run's files)", run_lock.dir, why, what);
}

int run_dir_is_ours(char *why, size_t why_len) {
    return run_lock.fd < 0 || out_lock_still_ours(&run_lock, why, why_len);
}

void run_dir_write_plan(const char *dir) {
    char path[CONFIG_STR + 16];
    snprintf(path, sizeof path, "%s/plan.txt", dir);
    const char *text = vx_plan_text();
    fs_write_atomic(path, text, strlen(text));
}

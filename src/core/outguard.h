/* outguard.h: the one rule of every command that writes files (train, its ZeRO shards, ckpt consolidate, export,
 * predict, bench's results): it writes only files it creates in this invocation, or files of its own run in a
 * directory it locked. An existing file it would write is refused before anything is written (exit 2, one line
 * naming it) unless --overwrite says so, and a file the command reads (out_input) is never written, --overwrite or
 * not. The pieces:
 *   out_lock        an output directory's lock: <dir>/.voxscale.lock, an flock held for the life of the process and
 *                   holding its pid, so a second command writing there is refused naming the first; a refused
 *                   command removes the lock file when it was the one that made it
 *   out_input       the files a command reads, which its outputs may never be
 *   out_claim       an output path checked before anything is written
 *   out_write       the output written atomically and, without --overwrite, never over anything (a file that
 *                   appeared since out_claim is refused too)
 *   out_track       files written this invocation, removed again if the command fails before out_done, so that
 *                   the rerun meets none of them */
#pragma once
#include <stddef.h>
#include <sys/types.h>

#define OUT_LOCK_NAME ".voxscale.lock"

typedef struct {
    int fd;              /* the lock file, open and flocked until the process ends; -1 before out_lock */
    int created;         /* this process made the lock file */
    dev_t dev, dir_dev;  /* the lock file's and the directory's identity when they were locked */
    ino_t ino, dir_ino;
    char dir[4096];
    char path[4200];
} OutLock;

/* Locks dir (it must exist), or exits 2 naming the process that holds it: "<what> <dir> is in use by another
 * voxscale run (pid N); wait for it to end or choose another --out" (what: "run directory", "predict --out"). A
 * file system that cannot lock (some network ones) is used unlocked. */
void out_lock(const char *dir, const char *what, OutLock *l);
/* The lock is this command's from here on: its pid goes into the lock file for the next one's message. */
void out_lock_claim(OutLock *l);
/* The command is refused after out_lock: the lock file is removed when this process made it, and released. */
void out_lock_refused(OutLock *l);
/* Whether the directory and its lock file are still the ones out_lock locked (not deleted, renamed or replaced
 * since, by hand or by another run that then locked the new ones): 1, or 0 and why. */
int out_lock_still_ours(const OutLock *l, char *why, size_t why_len);

/* A file the command reads (`what`: its flag, "--ckpt"): no output may be it. A path that does not exist is none. */
void out_input(const char *path, const char *what);
/* The `what` of the input path is (links followed), or NULL when it is none. */
const char *out_input_of(const char *path);
/* Exits 2 unless path may be written: nothing is there, or `overwrite` and a file there that is not one of the
 * command's inputs. `who` names the command and its flag ("export --out"). */
void out_claim(const char *path, int overwrite, const char *who);
/* 1 when something is at path (a file, a directory, a link, even a dangling one) */
int out_exists(const char *path);
/* Writes path atomically (core/fsutil.h); without `overwrite` never over an existing entry: one that appeared
 * since out_claim is refused with exit 2 and nothing written. */
void out_write(const char *path, const void *data, size_t len, int overwrite, const char *who);

/* From here on, the files out_write creates are removed again should the process end (exit, a refused volume)
 * before out_done: a failed command leaves no outputs of its own behind. */
void out_track(void);
/* The command succeeded: its outputs stay. */
void out_done(void);

/* stop_signal.c: SIGINT and SIGTERM taken by one thread with sigwaitinfo (see stop_signal.h for why). */
#include "core/stop_signal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

#define MAX_HOOKS 4

static sigset_t stop_set;
static pthread_t watcher;
static atomic_int started, catching, requested;
static _Atomic(StopHook) hooks[MAX_HOOKS];

const char *stop_signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

/* The default action, as if we had never taken the signal: killed by it. Only this thread unblocks it. */
static void die_of(int sig) {
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    _exit(128 + sig); /* (not reached) */
}

static void *watch(void *arg) {
    (void)arg;
    for (;;) {
        const int sig = sigwaitinfo(&stop_set, NULL);
        if (sig <= 0) continue; /* EINTR */
        if (!atomic_load(&catching)) die_of(sig);
        int none = 0;
        atomic_compare_exchange_strong(&requested, &none, sig);
        for (int i = 0; i < MAX_HOOKS; i++) {
            StopHook h = atomic_load(&hooks[i]);
            if (h) h(sig);
        }
    }
    return NULL;
}

/* A thread that existed before stop_signal_start (OpenBLAS starts its pool when it loads) does not block the signals;
 * one sent to the process may land there: it is passed on, and nothing else runs on that thread's stack. */
static void pass_on(int sig) {
    const int saved = errno;
    pthread_kill(watcher, sig);
    errno = saved;
}

void stop_signal_start(void) {
    if (atomic_exchange(&started, 1)) return;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    if (pthread_create(&watcher, NULL, watch, NULL) != 0) vx_fatal("cannot start the thread that takes SIGINT/SIGTERM");
    pthread_detach(watcher);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = pass_on;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void stop_signal_child_before_exec(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGINT);
    sigaddset(&both, SIGTERM);
    sigprocmask(SIG_UNBLOCK, &both, NULL);
}

void stop_signal_catch(int on) { atomic_store(&catching, on); }

int stop_signal_requested(void) { return atomic_load(&requested); }

void stop_signal_honour(const char *during, const char *after) {
    const int sig = stop_signal_requested();
    if (!sig) return;
    vx_error_line("stopped by %s during %s; %s", stop_signal_name(sig), during, after);
    vx_exit(VX_EXIT_SIGNAL);
}

void stop_signal_hook(StopHook fn) {
    for (int i = 0; i < MAX_HOOKS; i++) {
        StopHook none = NULL;
        if (atomic_compare_exchange_strong(&hooks[i], &none, fn) || none == fn) return;
    }
    vx_fatal("stop_signal_hook: more than %d hooks", MAX_HOOKS);
}

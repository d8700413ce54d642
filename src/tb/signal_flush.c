/* signal_flush.c: SIGINT/SIGTERM handling for the event writer: write out buffered records, then let the
 * signal do what it did before we were installed (by default, end the process as killed by the signal). */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "tb/event_file.h"
#include "tb/tb_writer.h"

static struct sigaction previous[2];
static const int handled[2] = {SIGINT, SIGTERM};
static atomic_flag installed = ATOMIC_FLAG_INIT;

void tb_writer_flush_all_on_signal(void) { event_file_flush_all_signal_safe(); }

static void flush_and_reraise(int sig) {
    event_file_flush_all_signal_safe();
    for (int i = 0; i < 2; i++) {
        if (handled[i] != sig) continue;
        /* Put back the old action and raise again: the signal is blocked while we run, so it is delivered to
         * the old action as soon as we return. */
        sigaction(sig, &previous[i], NULL);
        raise(sig);
    }
}

void tb_writer_install_signal_handlers(void) {
    if (atomic_flag_test_and_set(&installed)) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = flush_and_reraise;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 2; i++) sigaction(handled[i], &sa, &previous[i]);
}

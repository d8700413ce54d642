/* heartbeat.c: the first steps' sign of life (see heartbeat.h). */
#include "train/heartbeat.h"

#include "core/progress.h"
#include "core/util.h"

void heartbeat_step(Heartbeat *h, int64_t step, int steps, int log_every, double loss, double step_ms) {
    if (h->off) return;
    const double now = vx_now();
    if (h->first == 0) h->first = step;
    if (step != h->first && now - h->last < progress_due_interval()) return;
    char eta[32];
    progress_format_eta(step_ms / 1e3 * (double)(steps - step), eta, sizeof eta);
    vx_status("step %5lld/%d | loss %.6f | %.0f ms/step | eta %s (the full line every %d steps)", (long long)step,
              steps, loss, step_ms, eta, log_every);
    h->last = now;
}

void heartbeat_stop(Heartbeat *h) { h->off = 1; }

/* progress.c: progress lines with rate and ETA (see progress.h). */
#include "core/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

double progress_interval(void) {
    const char *e = getenv("VX_PROGRESS_S");
    char *end;
    const double v = e && *e ? strtod(e, &end) : 10.0;
    return e && *e && (*end || !(v >= 0)) ? 10.0 : v; /* (a malformed value: the default, not an error mid-run) */
}

double progress_due_interval(void) {
    const double s = progress_interval();
    return vx_stdout_is_tty() && s > 0.5 ? 0.5 : s;
}

void progress_format_eta(double seconds, char *out, size_t len) {
    const long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(out, len, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60) snprintf(out, len, "%ldm%02lds", s / 60, s % 60);
    else snprintf(out, len, "%lds", s);
}

void progress_begin(Progress *p, const char *what, double total, const char *unit) {
    snprintf(p->what, sizeof p->what, "%s", what);
    p->unit = unit;
    p->total = total;
    p->done = 0;
    p->t0 = p->last = vx_now();
    p->lines = 0;
    pthread_mutex_init(&p->lock, NULL);
}

static void line(Progress *p, double now) {
    const double secs = now - p->t0, rate = secs > 0 ? p->done / secs : 0;
    char eta[32] = "";
    if (p->total > 0 && rate > 0) progress_format_eta((p->total - p->done) / rate, eta, sizeof eta);
    if (p->total > 0)
        vx_status("%s: %.0f/%.0f %s (%.0f%%) | %.2f %s/s | eta %s", p->what, p->done, p->total, p->unit,
                  100.0 * p->done / p->total, rate, p->unit, eta[0] ? eta : "-");
    else vx_status("%s: %.0f %s | %.2f %s/s", p->what, p->done, p->unit, rate, p->unit);
    p->last = now;
    p->lines++;
}

void progress_add(Progress *p, double n) {
    pthread_mutex_lock(&p->lock);
    p->done += n;
    const double now = vx_now();
    if (now - p->last >= progress_due_interval()) line(p, now);
    pthread_mutex_unlock(&p->lock);
}

void progress_end(Progress *p) {
    pthread_mutex_lock(&p->lock);
    if (p->lines > 0)
        vx_log("%s: %.0f %s in %.1f s\n", p->what, p->done, p->unit, vx_now() - p->t0);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_destroy(&p->lock);
}

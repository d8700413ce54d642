/* scaling_model.c: the projection of a data-parallel step from one rank's timeline (scaling_model.h). */
#include "bench/scaling_model.h"

#include <math.h>
#include <stddef.h>

double scaling_allreduce_time(int n, double bytes, double alpha, double bus) {
    return n > 1 ? 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes / bus : 0.0;
}

double scaling_half_ring_time(int n, double bytes, double alpha, double bus) {
    return n > 1 ? (n - 1) * alpha + (double)(n - 1) / n * bytes / bus : 0.0;
}

double scaling_project_step_zero(const Timeline *tl, int n, double alpha, double bus, double share, const ZeroComm *z) {
    const int stage = z ? z->stage : 0;
    double end = 0;
    for (int i = 0; i < tl->nb && n > 1; i++) {
        const double start = fmax(tl->ready[i] * share, end);
        end = start + (stage >= 2 ? scaling_half_ring_time(n, tl->bytes[i], alpha, bus)
                                  : scaling_allreduce_time(n, tl->bytes[i], alpha, bus));
    }
    const double backward = tl->fwd * share + fmax(tl->bwd * share, end);
    if (stage == 0) return backward + tl->opt * share;
    double t = backward + (n > 1 ? (n - 1) * alpha : 0.0) + tl->opt * share / n; /* the norm's parts; the shard */
    if (z->offload) t += 2.0 * (z->param_bytes / n) / z->host_bus;
    return t + scaling_half_ring_time(n, z->param_bytes, alpha, bus);
}

double scaling_project_step(const Timeline *tl, int n, double alpha, double bus, double share) {
    return scaling_project_step_zero(tl, n, alpha, bus, share, NULL);
}

RingFit scaling_fit_ring(int n, int nr, const double *bytes, const double *seconds) {
    RingFit f = {0, 0, 0, "least squares on relative error"};
    if (n < 2 || nr < 2) return f;
    /* weights 1/T^2: the small sizes' latency counts as much as the large sizes' bandwidth, which plain least
     * squares would let the largest message decide alone. T = c0 + c1 S with c0 = 2(n-1) a, c1 = 2(n-1)/(n B). */
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < nr; i++) {
        const double w = 1.0 / (seconds[i] * seconds[i]), x = bytes[i], y = seconds[i];
        sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
    }
    double c1 = (sw * sxy - sx * sy) / (sw * sxx - sx * sx), c0 = (sy - c1 * sx) / sw;
    if (!(c1 > 0)) { /* rather than no fit, which would drop this rank count's measured link from bench scaling */
        f.method = "largest and smallest message (the times did not grow with the size)";
        c1 = seconds[nr - 1] / bytes[nr - 1], c0 = seconds[0];
    }
    if (!(c1 > 0)) return f; /* a zero time: nothing measured */
    f.alpha = (c0 > 0 ? c0 : 0) / (2.0 * (n - 1));
    f.bus = 2.0 * (n - 1) / n / c1;
    for (int i = 0; i < nr; i++) {
        const double model = (c0 > 0 ? c0 : 0) + c1 * bytes[i], e = fabs(model / seconds[i] - 1);
        if (bytes[i] >= (1 << 20) && e > f.worst_error) f.worst_error = e; /* where bandwidth dominates */
    }
    return f;
}

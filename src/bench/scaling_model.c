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

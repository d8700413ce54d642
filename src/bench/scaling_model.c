/* scaling_model.c: the projection of a data-parallel step from one rank's timeline (scaling_model.h). */
#include "bench/scaling_model.h"

#include <math.h>

double scaling_allreduce_time(int n, double bytes, double alpha, double bus) {
    return n > 1 ? 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes / bus : 0.0;
}

double scaling_project_step(const Timeline *tl, int n, double alpha, double bus, double share) {
    double end = 0;
    for (int i = 0; i < tl->nb && n > 1; i++) {
        const double start = fmax(tl->ready[i] * share, end);
        end = start + scaling_allreduce_time(n, tl->bytes[i], alpha, bus);
    }
    return tl->fwd * share + fmax(tl->bwd * share, end) + tl->opt * share;
}

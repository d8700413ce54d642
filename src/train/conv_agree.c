/* conv_agree.c: rank 0's convolution choices, adopted by every rank (conv_agree.h). */
#include "train/conv_agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv3d/conv3d_cpu_select.h"
#include "core/util.h"

void conv_agree(Comm *c, const Backend *be, const Model *m) {
    /* every rank takes part (the ranks agreed on the device): a rank that stayed out because of its own VX_CONV_CPU
     * would leave rank 0's broadcast to meet its next collective */
    if (c->world <= 1 || strcmp(be->name, "cpu") != 0) return;
    /* the distinct shapes, in node order (the same on every rank: the ranks agreed on the config) */
    const Conv3dShape **shape = vx_calloc((size_t)m->n_nodes + 1, sizeof *shape);
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        if (!node_convolves(&m->nodes[i])) continue;
        const Conv3dShape *s = &m->nodes[i].conv;
        int seen = 0;
        for (int j = 0; j < n && !seen; j++) seen = memcmp(shape[j], s, sizeof *s) == 0;
        if (!seen) shape[n++] = s;
    }
    if (n == 0) {
        free(shape);
        return;
    }
    float *path = vx_malloc((size_t)n * 3 * sizeof(float)); /* CONV_PATH_* per shape and direction: exact floats */
    if (c->rank == 0)
        for (int j = 0; j < n; j++)
            for (int dir = 0; dir < 3; dir++) path[3 * j + dir] = (float)conv3d_cpu_path(shape[j], dir);
    comm_wait(c, comm_broadcast(c, path, (size_t)n * 3, 0, "rank 0's convolution choices"), NULL);
    int refused = 0;
    if (c->rank != 0 && conv3d_cpu_mode() == CONV_MODE_AUTO) /* (VX_CONV_CPU forcing a path here wins) */
        for (int j = 0; j < n; j++) {
            const int p[3] = {(int)path[3 * j], (int)path[3 * j + 1], (int)path[3 * j + 2]};
            refused += !conv3d_cpu_adopt(shape[j], p, "chosen by rank 0");
        }
    if (refused) /* another host's CPU: its own choice, as on any machine of another kind */
        fprintf(stderr, "voxscale: rank %d/%d: warning: %d of %d convolution shapes cannot run rank 0's choice on this "
                "CPU; this rank chose them itself (its rounding may differ from rank 0's)\n", c->rank, c->world,
                refused, n);
    free(path);
    free(shape);
}

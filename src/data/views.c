/* views.c: a CT's X-ray views read from PNG files and moved with its augmentation (see views.h). */
#include "data/views.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "core/util.h"
#include "data/png_image.h"

void views_columns(const DataConfig *cfg, char names[2][CONFIG_STR]) {
    const char *comma = strchr(cfg->view_columns, ',');
    VX_CHECK(comma, "data.view_columns \"%s\" names no two columns", cfg->view_columns);
    snprintf(names[0], CONFIG_STR, "%.*s", (int)(comma - cfg->view_columns), cfg->view_columns);
    snprintf(names[1], CONFIG_STR, "%s", comma + 1);
}

char *views_path(const Manifest *man, const char *cell) {
    char dir[sizeof man->origin];
    snprintf(dir, sizeof dir, "%s", man->origin); /* a CSV source's origin is the CSV's path */
    const char *base = dirname(dir);
    const size_t need = strlen(base) + strlen(cell) + 2;
    char *path = vx_malloc(need);
    if (cell[0] == '/') snprintf(path, need, "%s", cell);
    else snprintf(path, need, "%s/%s", base, cell);
    return path;
}

int views_read(const char *path, int img, float *out, char *why, size_t why_len) {
    int w, h, depth;
    float *px = NULL;
    /* the header first: a view of the wrong size is refused before its pixels are read */
    if (!png_read_grey(path, &w, &h, &depth, NULL, why, why_len)) return 0;
    if (w != img || h != img) {
        snprintf(why, why_len, "the view is %d x %d pixels, xray.img_size asks %d x %d", w, h, img, img);
        return 0;
    }
    if (!out) return 1;
    if (!png_read_grey(path, &w, &h, &depth, &px, why, why_len)) return 0;
    const float full = depth == 16 ? 65535.0f : 255.0f;
    for (long i = 0; i < (long)img * img; i++) out[i] = px[i] / full;
    free(px);
    return 1;
}

/* For augment.h's y[z][j][i] = x[zs][sj][si] (flips undone, then k turns): y's AP view (the sum over j) at column i
 * is x's view (k odd: the lateral, the sum over x's w) at column is (k < 2) or n-1-is (k >= 2), is = i flipped by
 * FLIP_X; y's lateral at column j is x's view (k odd: the AP) at column jf (k = 0, 3) or n-1-jf (k = 1, 2), jf = j
 * flipped by FLIP_Y; rows follow z, flipped by FLIP_Z. Bilinear resampling with align_corners=False is symmetric
 * under a flip, so the rendered images flip alike. */
void views_augment(int img, uint32_t code, const float *in, float *out) {
    const int k = (int)(code >> AUGMENT_ROT_SHIFT) & 3;
    const long plane = (long)img * img;
    for (int v = 0; v < 2; v++) {
        const float *src = in + (long)(v ^ (k & 1)) * plane;
        const int flip_rows = (code & AUGMENT_FLIP_Z) != 0;
        const int flip_cols = v == 0 ? ((code & AUGMENT_FLIP_X) != 0) ^ (k >= 2)
                                     : ((code & AUGMENT_FLIP_Y) != 0) ^ (k == 1 || k == 2);
        for (int r = 0; r < img; r++)
            for (int c = 0; c < img; c++)
                out[v * plane + (long)r * img + c] =
                    src[(long)(flip_rows ? img - 1 - r : r) * img + (flip_cols ? img - 1 - c : c)];
    }
}

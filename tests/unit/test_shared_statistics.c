/* test_shared_statistics.c: cmocka tests of train.fuse's shared BatchNorm statistics (model.h's Node.bn_shared,
 * build_share_batch_statistics in model_build.c). In a DenseNet every dense layer's norm1 after a block's first, the
 * transition's norm and norm5 copy the batch sums of all but the channels the layer before added, from the BatchNorm
 * that reduced them just before; the other BatchNorms and every one with train.fuse 0 reduce all their channels. On a
 * graph built by hand: a write over channels an earlier BatchNorm read ends the sharing, one after them does not.
 * And in a training forward the copied statistics are the reduced ones bit for bit (the CPU's per-channel sums do
 * not depend on the channel count): each node's mean and invstd equal those of the same model with train.fuse 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "common/rng.h"
#include "core/config.h"
#include "families/build.h"
#include "graph/exec_ptr.h"
#include "model_of.h"

static Model *cxr_tiny(int fuse, int batch) {
    Config cfg;
    config_defaults(&cfg);
    config_load(&cfg, "configs/test/cxr-tiny.json");
    cfg.train.fuse = fuse;
    return model_of(&cfg, batch, backend_cpu());
}

/* "features.denseblockB.denselayerL..." -> B and L (0 when not a dense layer's node) */
static void block_layer(const char *name, int *block, int *layer) {
    *block = *layer = 0;
    sscanf(name, "features.denseblock%d.denselayer%d", block, layer);
}

static void test_each_dense_norm_copies_the_channels_the_layer_before_reduced(void **state) {
    (void)state;
    Model *m = cxr_tiny(1, 2);
    const int g = m->cfg.densenet.growth_rate;
    int shared = 0, whole = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (nd->kind != OP_BATCHNORM) continue;
        int b, l;
        block_layer(nd->name, &b, &l);
        const int dense_norm1 = l > 1 && strstr(nd->name, ".norm1") != NULL;
        const int after_block = strncmp(nd->name, "features.transition", 19) == 0 ||
                                strncmp(nd->name, "features.norm5", 14) == 0;
        if (!dense_norm1 && !after_block) { /* norm0, each block's first norm1, every norm2 */
            if (nd->bn_shared != 0) fail_msg("%s shares %d channels", nd->name, nd->bn_shared);
            whole++;
            continue;
        }
        if (nd->bn_shared != nd->bn.c - g) fail_msg("%s (%d channels) shares %d", nd->name, nd->bn.c, nd->bn_shared);
        const Node *from = &m->nodes[nd->bn_from];
        int fb, fl;
        block_layer(from->name, &fb, &fl);
        assert_true(strstr(from->name, ".norm1") != NULL && from->bn.c == nd->bn.c - g);
        if (dense_norm1) assert_true(fb == b && fl == l - 1); /* the norm1 of the layer before */
        shared++;
    }
    /* cxr-tiny is DenseNet121: layers 6, 12, 24, 16; 57 norm1s share, 3 transitions and norm5 */
    assert_int_equal(shared, 5 + 11 + 23 + 15 + 3 + 1);
    assert_int_equal(whole, 1 + 4 + 58);
    model_free(m);
    Model *separate = cxr_tiny(0, 2);
    for (int i = 0; i < separate->n_nodes; i++) assert_int_equal(separate->nodes[i].bn_shared, 0);
    model_free(separate);
}

/* x (4 channels) into a 12-channel buffer; BatchNorm a over [0,4); a write at 4; b over [0,8) shares a's 4; then
 * `at` decides what the next write covers, and c over [0,12) shares b's 8 unless that write went over them */
static void hand_built(int over_at, int *b_shared, int *c_shared) {
    Model *m = vx_calloc(1, sizeof *m);
    m->dtype = DT_F32;
    m->batch = 2;
    m->fuse = 1;
    const int x = build_tensor(m, (Dims){2, 1, 3, 3, 4}, -1, DT_F32);
    const int buf = build_channel_buffer(m, "buf", x, 12);
    build_batchnorm(m, "a", build_channel_view(m, buf, 4));
    build_channel_write(m, "w1", build_relu(m, "f1", x), buf, 4);
    build_batchnorm(m, "b", build_channel_view(m, buf, 8));
    build_channel_write(m, "w2", build_relu(m, "f2", x), buf, over_at);
    build_batchnorm(m, "c", buf);
    build_share_batch_statistics(m);
    for (int i = 0; i < m->n_nodes; i++) {
        if (strcmp(m->nodes[i].name, "b") == 0) *b_shared = m->nodes[i].bn_shared;
        if (strcmp(m->nodes[i].name, "c") == 0) *c_shared = m->nodes[i].bn_shared;
    }
    model_free(m);
}

static void test_a_write_over_channels_read_before_ends_the_sharing(void **state) {
    (void)state;
    int b, c;
    hand_built(8, &b, &c); /* the dense block's order: each write after the channels before it */
    assert_int_equal(b, 4);
    assert_int_equal(c, 8);
    hand_built(4, &b, &c); /* over b's channels [4, 8) (and a's are b's too: nothing before b is taken) */
    assert_int_equal(b, 4);
    assert_int_equal(c, 0);
    hand_built(0, &b, &c); /* over [0, 4), which a and b both read */
    assert_int_equal(c, 0);
}

/* every BatchNorm's saved mean and invstd after a training forward (from the same weights and input) */
static float *forward_statistics(Model *m, long *count) {
    model_allocate(m);
    model_init_params(m, 5);
    const long n = m->tensors[m->t_input].count;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) x[i] = vx_uniform01(vx_hash3(11, 2, (uint64_t)i)) - 0.25f;
    m->be->copy_to_device(model_tensor(m, m->t_input), x, sizeof(float) * (size_t)n);
    free(x);
    model_set_first_sample(m, 0);
    model_forward(m, 1);
    long total = 0;
    for (int i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].kind == OP_BATCHNORM) total += 2 * m->nodes[i].bn.c;
    float *out = malloc(sizeof(float) * (size_t)total), *o = out;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (nd->kind != OP_BATCHNORM) continue;
        memcpy(o, exec_item(m, nd->stats), sizeof(float) * 2 * (size_t)nd->bn.c); /* mean, invstd (CPU memory) */
        o += 2 * nd->bn.c;
    }
    *count = total;
    return out;
}

static void test_copied_statistics_are_the_reduced_ones_bit_for_bit(void **state) {
    (void)state;
    Model *fused = cxr_tiny(1, 3), *separate = cxr_tiny(0, 3);
    long a_n, b_n;
    float *a = forward_statistics(fused, &a_n), *b = forward_statistics(separate, &b_n);
    assert_int_equal(a_n, b_n);
    assert_memory_equal(a, b, sizeof(float) * (size_t)a_n);
    free(a), free(b);
    model_free(fused);
    model_free(separate);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_dense_norm_copies_the_channels_the_layer_before_reduced),
        cmocka_unit_test(test_a_write_over_channels_read_before_ends_the_sharing),
        cmocka_unit_test(test_copied_statistics_are_the_reduced_ones_bit_for_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

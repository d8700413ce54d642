/* test_vit3d.c: the vit3d family's skeleton (src/families/build_vit3d.c, its nodes in model_exec_vit.c) on the CPU
 * backend, through the same executor as ae3d and resnet3d, at a tiny config (8^3 volume, patches 4^3: 8 tokens,
 * hidden 32, 2 heads, 2 blocks, MLP x2):
 *   - the graph: node kinds and parameter names in order, the planned arena smaller than its items unshared;
 *   - every parameter view's largest gradient against a central finite difference of the model's own loss (float32;
 *     the pieces' float64 checks are the op cases'), which checks the wiring: dx_beta accumulation of the residual
 *     stream, the packed QKV gradient, the positions' batch sum, GELU's saved pre-activation;
 *   - activation checkpointing per transformer block: loss and gradients bit for bit, a smaller arena;
 *   - a few AdamW steps on a fixed batch: the reconstruction loss falls;
 *   - `bench kernels`' cases of the model (src/bench/kernel_cases.c): each names an op of the table and passes its
 *     float64 check on the CPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/op_check.h"
#include "bench/kernel_cases.h"
#include "common/rng.h"
#include "model_of.h"
#include "optim/optim.h"

static Config tiny(void) {
    Config cfg;
    config_defaults(&cfg);
    snprintf(cfg.model.family, sizeof cfg.model.family, "vit3d");
    snprintf(cfg.model.loss, sizeof cfg.model.loss, "mse");
    for (int a = 0; a < 3; a++) cfg.model.input_size[a] = 8, cfg.model.vit.patch_size[a] = 4;
    cfg.model.in_channels = 1;
    cfg.model.vit = (ViTConfig){.hidden_size = 32, .blocks = 2, .heads = 2, .patch_size = {4, 4, 4}, .mlp_ratio = 2,
                                .ln_eps = 1e-6};
    return cfg;
}

/* a smooth volume per sample plus a little noise, a pure function of the sample */
static void batch_of(float *x, int n, long per) {
    for (int b = 0; b < n; b++)
        for (long i = 0; i < per; i++) {
            const int z = (int)(i / 64), y = (int)(i / 8 % 8), w = (int)(i % 8);
            x[b * per + i] = sinf(0.7f * z + b) * cosf(0.5f * y - 0.3f * b) + 0.2f * w / 8.0f +
                             0.05f * (vx_uniform01(vx_hash3(7, (uint64_t)b, (uint64_t)i)) - 0.5f);
        }
}

static Model *ready_with(int batch, int checkpoint_activations) {
    Config cfg = tiny();
    cfg.train.checkpoint_activations = checkpoint_activations;
    Model *m = model_of(&cfg, batch, backend_cpu());
    model_allocate(m);
    model_init_params(m, 1234);
    const Tensor *in = &m->tensors[m->t_input];
    float *x = malloc(sizeof(float) * (size_t)in->count);
    batch_of(x, batch, in->count / batch);
    m->be->copy_to_device(model_tensor(m, m->t_input), x, sizeof(float) * (size_t)in->count);
    free(x);
    return m;
}
static Model *ready(int batch) { return ready_with(batch, 0); }

static float loss_now(Model *m) {
    model_forward(m, 1);
    model_loss(m);
    return model_read_losses(m).total;
}

static void test_graph(void **state) {
    Model *m = ready(2);
    assert_int_equal(m->family, FAMILY_VIT3D);
    /* patch conv, pos, 2 x (ln, qkv, attn, proj, add, ln, fc1, fc2, add), ln, head, unpatchify */
    assert_int_equal(m->n_nodes, 2 + 2 * 9 + 3);
    assert_int_equal(m->nodes[0].kind, OP_CONV);
    assert_int_equal(m->nodes[0].conv.stride[0], 4);
    assert_int_equal(m->nodes[4].kind, OP_ATTENTION);
    assert_int_equal(m->nodes[4].att.tq, 8);
    assert_int_equal(m->nodes[4].att.d, 16);
    assert_int_equal(m->nodes[m->n_nodes - 1].kind, OP_UNPATCH);
    assert_string_equal(m->params[0].name, "patch_embed.proj.weight");
    assert_string_equal(m->params[2].name, "pos_embed.weight");
    assert_string_equal(m->params[m->n_params - 1].name, "head.bias");
    /* 32 (1*64 + 1) patch embed, 8*32 positions, per block 2*(64) norms + 32*96+96 + 32*32+32 + 32*64+64 + 64*32+32,
     * final norm 64, head 32*64 + 64 */
    const long block = 2 * 64 + (32 * 96 + 96) + (32 * 32 + 32) + (32 * 64 + 64) + (64 * 32 + 32);
    assert_int_equal(m->param_count, 32 * 64 + 32 + 8 * 32 + 2 * block + 64 + 32 * 64 + 64);
    assert_true(m->plan.total < plan_unshared_bytes(&m->plan));
    model_free(m);
}

static void test_gradients(void **state) {
    Model *m = ready(2);
    const Backend *be = m->be;
    model_forward(m, 1);
    model_backward(m, 1.0f, 0.0f, NULL);
    const size_t bytes = sizeof(float) * (size_t)m->param_floats;
    float *g = malloc(bytes), *p = malloc(bytes);
    be->copy_to_host(g, m->grad, bytes);
    be->copy_to_host(p, m->param, bytes);
    int checked = 0;
    for (int v = 0; v < m->n_params; v++) {
        const ParamView *pv = &m->params[v];
        long at = pv->offset;
        for (long j = pv->offset; j < pv->offset + pv->count; j++)
            if (fabsf(g[j]) > fabsf(g[at])) at = j;
        if (fabsf(g[at]) < 1e-4f) continue; /* a view whose gradient is all but zero says little in float32 */
        const float keep = p[at], eps = 2e-2f * (fabsf(keep) > 0.5f ? fabsf(keep) : 0.5f);
        p[at] = keep + eps;
        be->copy_to_device(m->param, p, bytes);
        const double lp = loss_now(m);
        p[at] = keep - eps;
        be->copy_to_device(m->param, p, bytes);
        const double lm = loss_now(m);
        p[at] = keep;
        be->copy_to_device(m->param, p, bytes);
        const double fd = (lp - lm) / (2.0 * eps);
        if (!(fabs(fd - g[at]) <= 0.03 * fabs(g[at]) + 1e-5))
            fail_msg("%s element %ld: gradient %.6g, central difference %.6g", pv->name, at - pv->offset, g[at], fd);
        checked++;
    }
    assert_true(checked >= m->n_params - 2); /* nearly every view (zero-gradient ones are skipped) */
    free(g), free(p);
    model_free(m);
}

/* Activation checkpointing, one Block per transformer block (norm1 .. add2): the recomputation reruns the same
 * kernels on the same inputs, so the loss and every gradient are the stored ones bit for bit, in a smaller arena. */
static void test_checkpointed_blocks(void **state) {
    Model *a = ready_with(2, 0), *b = ready_with(2, 1);
    assert_int_equal(b->n_blocks, 2);
    assert_int_equal(b->nodes[b->blocks[0].first].kind, OP_LAYERNORM);
    assert_int_equal(b->nodes[b->blocks[0].last].kind, OP_ADD);
    assert_true(b->plan.total < a->plan.total);
    const size_t bytes = sizeof(float) * (size_t)a->param_floats;
    float *ga = malloc(bytes), *gb = malloc(bytes);
    float la[2], lb[2];
    Model *ms[2] = {a, b};
    float *gs[2] = {ga, gb}, *ls[2] = {la, lb};
    for (int k = 0; k < 2; k++) {
        model_forward(ms[k], 1);
        model_backward(ms[k], 1.0f, 0.0f, NULL);
        ms[k]->be->copy_to_host(gs[k], ms[k]->grad, bytes);
        ms[k]->be->copy_to_host(ls[k], ms[k]->losses, sizeof la);
    }
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(ga, gb, bytes);
    free(ga), free(gb);
    model_free(a), model_free(b);
}

static void test_loss_falls(void **state) {
    Model *m = ready(2);
    const OptimConfig oc = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0};
    const size_t n = (size_t)m->param_floats;
    const float first = loss_now(m);
    float last = first;
    for (int step = 1; step <= 30; step++) {
        model_forward(m, 1);
        model_backward(m, 1.0f, 0.0f, NULL);
        last = model_read_losses(m).total;
        const AdamWConsts c = adamw_consts(&oc, 3e-3, step, 1.0f);
        adamw_cpu((long)n, m->param, m->grad, m->adam_m, m->adam_v, &c);
    }
    const float after = loss_now(m);
    print_message("vit3d tiny: loss %.5f -> %.5f (last step's %.5f) after 30 AdamW steps\n", first, after, last);
    assert_true(isfinite(after));
    assert_true(after < 0.5f * first);
    model_free(m);
}

static void test_kernel_cases(void **state) {
    const Config cfg = tiny();
    const Backend *be = backend_cpu();
    Model *m = model_of(&cfg, 2, be);
    KernelCase *cases;
    const int n = kernel_cases_of_model(m, be, &cases);
    int n_ops, attention = 0, gemm = 0;
    const KernelOp *ops = kernel_ops(&n_ops);
    for (int i = 0; i < n; i++) {
        KernelCheck r;
        kernel_check_case(be, &cases[i], 0, 5, kernel_check_tolerance(&cases[i], 0), 0, &r);
        if (!r.ok) fail_msg("%s [%s]: %s", ops[cases[i].op].name, cases[i].shape, r.detail);
        attention += strncmp(ops[cases[i].op].name, "attention", 9) == 0;
        gemm += strncmp(ops[cases[i].op].name, "gemm", 4) == 0;
    }
    assert_int_equal(attention, 3); /* one shape: forward, backward and the step through the saved P */
    assert_true(gemm >= 8);
    free(cases);
    model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph),
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_checkpointed_blocks),
        cmocka_unit_test(test_loss_falls),
        cmocka_unit_test(test_kernel_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

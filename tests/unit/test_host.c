/* test_host.c: unit tests of the host-side pieces the integration tests reach only indirectly: the arena planner,
 * the learning-rate schedule, the phantom generator and the prefetching loader, the model's memory plan and its
 * per-sample noise, error-message escaping and the config reader's strictness. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/config.h"
#include "core/util.h"
#include "model_of.h"
#include "hw/hw.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/phantom.h"
#include "graph/model.h"
#include "graph/plan.h"
#include "train/train_plan.h"
#include "augment/augment.h"
#include "conv3d/conv3d.h"
#include "elementwise/elementwise.h"
#include "groupnorm/groupnorm.h"
#include "latent/latent.h"
#include "loss/loss.h"
#include "normal/normal.h"
#include "optim/optim.h"
#include "silu/silu.h"
#include "upsample/upsample.h"
#include "relu/relu.h"
#include "avgpool/avgpool.h"
#include "train/schedule.h"
#include "train/train_log.h"
#include "train/volume_tiles.h"
#include "backend_double.h"

/* No two items whose live intervals overlap may share bytes. */
static void assert_plan_valid(const Plan *p) {
    for (int i = 0; i < p->count; i++) {
        const PlanItem *a = &p->items[i];
        assert_true(a->offset + a->bytes <= p->total);
        for (int j = i + 1; j < p->count; j++) {
            const PlanItem *b = &p->items[j];
            int live_together = a->first <= b->last && b->first <= a->last;
            int share_bytes = a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
            if (live_together && share_bytes) fail_msg("items %d and %d overlap in time and memory", i, j);
        }
    }
}

static void test_plan_reuses_dead_memory(void **state) {
    (void)state;
    Plan p = {0};
    plan_add(&p, 1000, 0, 1); /* dies before the next two are born */
    plan_add(&p, 1000, 2, 3);
    plan_add(&p, 500, 2, 3);
    plan_solve(&p);
    assert_plan_valid(&p);
    assert_int_equal(p.items[0].bytes, 1024); /* rounded to 256 */
    assert_int_equal(p.total, 1024 + 512);    /* the first item's bytes were reused */
    assert_int_equal(plan_unshared_bytes(&p), 1024 + 1024 + 512);
    plan_free(&p);
}

static void test_plan_random_intervals_never_collide(void **state) {
    (void)state;
    srand(3);
    for (int trial = 0; trial < 50; trial++) {
        Plan p = {0};
        int n = 1 + rand() % 80;
        for (int i = 0; i < n; i++) {
            int a = rand() % 100, b = rand() % 100;
            plan_add(&p, (size_t)(1 + rand() % 100000), a < b ? a : b, a < b ? b : a);
        }
        plan_solve(&p);
        assert_plan_valid(&p);
        assert_true(p.total <= plan_unshared_bytes(&p));
        plan_free(&p);
    }
}

static void test_model_plan_is_valid_and_saves_memory(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.model.res_blocks = 2;
    Model *m = model_of(&cfg, 2, backend_cpu());
    assert_plan_valid(&m->plan);
    assert_true(m->plan.total < plan_unshared_bytes(&m->plan));
    /* Every gradient is overwritten by exactly one node (beta 0) before anything adds to it. */
    for (int t = 0; t < m->n_tensors; t++) {
        if (m->tensors[t].grad < 0) continue;
        int writers0 = 0;
        for (int i = 0; i < m->n_nodes; i++)
            for (int s = 0; s < 2; s++)
                if (m->nodes[i].in[s] == t && m->nodes[i].dx_beta[s] == 0.0f) writers0++;
        if (t == m->t_recon) assert_int_equal(writers0, 0); /* the loss writes it */
        else assert_int_equal(writers0, 1);
    }
    /* Parameters tile the packed layout exactly, in reverse creation order; in the flat buffers each starts on a
     * 256-byte boundary (cuDNN's weight pointers), in the same order, without overlap or more padding than
     * needed. */
    long covered = 0;
    for (int i = 0; i < m->n_params; i++) covered += m->params[i].count;
    assert_int_equal(covered, m->param_count);
    assert_int_equal(m->params[m->n_params - 1].packed_offset, 0);
    assert_int_equal(m->params[0].packed_offset + m->params[0].count, m->param_count);
    assert_int_equal(m->params[m->n_params - 1].offset, 0);
    for (int i = 0; i < m->n_params; i++) {
        const ParamView *p = &m->params[i];
        assert_int_equal(p->offset % MODEL_PARAM_ALIGN, 0);
        const long end = i == 0 ? m->param_floats : m->params[i - 1].offset;
        assert_true(p->offset + p->count <= end);
        assert_true(end - (p->offset + p->count) < MODEL_PARAM_ALIGN);
        if (i > 0) assert_int_equal(m->params[i - 1].packed_offset, p->packed_offset + p->count);
    }
    assert_true(m->param_floats > m->param_count); /* the default model has views of odd sizes */
    model_free(m);
}

/* Activation checkpointing: a valid plan, a smaller arena, the same gradient bookkeeping; only nodes inside a
 * ResBlock (never its residual add) are rerun, and every tensor a rerun node writes gets its own second buffer. */
static void test_checkpointed_plan_is_valid_and_smaller(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.model.res_blocks = 2;
    Model *kept = model_of(&cfg, 2, backend_cpu());
    cfg.train.checkpoint_activations = 1;
    Model *m = model_of(&cfg, 2, backend_cpu());
    assert_plan_valid(&m->plan);
    assert_true(m->plan.total < kept->plan.total);
    assert_int_equal(m->n_blocks, 2 * cfg.model.levels * cfg.model.res_blocks);
    assert_true(m->recompute_flops > 0);
    int rerun = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        assert_true(nd->dx_beta[0] == kept->nodes[i].dx_beta[0] && nd->dx_beta[1] == kept->nodes[i].dx_beta[1]);
        int in_block = 0;
        for (int b = 0; b < m->n_blocks; b++)
            if (i >= m->blocks[b].first && i < m->blocks[b].last) in_block = 1;
        if (nd->recompute) {
            rerun++;
            assert_true(in_block);
            assert_int_not_equal(m->tensors[nd->out].act_bwd, m->tensors[nd->out].act);
        } else {
            assert_int_equal(m->tensors[nd->out].act_bwd, m->tensors[nd->out].act);
        }
    }
    assert_true(rerun > 0);
    model_free(kept);
    model_free(m);
}

/* One forward and backward of a freshly initialized model on the phantoms at sample 0, twice (param_beta 0, then 1: the
 * accumulation path); the losses of both and the packed parameter gradient after them. */
static void run_two_micro_batches(const Config *cfg, float losses[4], float *grad_packed) {
    Model *m = model_of(cfg, 2, backend_cpu());
    model_allocate(m);
    model_init_params(m, 11);
    float *x = model_tensor(m, m->t_input);
    for (int k = 0; k < 2; k++) {
        phantom_batch(5, cfg->model.input_size, cfg->model.in_channels, (float)cfg->data.noise, 2, 2 * k, x);
        model_set_first_sample(m, (uint64_t)(2 * k));
        model_forward(m, 1);
        model_backward(m, 0.5f, (float)k, NULL);
        const Losses l = model_read_losses(m);
        losses[2 * k] = l.recon, losses[2 * k + 1] = l.kl;
    }
    model_download_packed(m, m->grad, grad_packed);
    model_free(m);
}

/* model.pad_input_channels: conv_in reads an input zero-padded to 8 channels (an f32 -> f32 pad node on the CPU) and
 * weights padded from the master each forward; its backward slices the padded weight gradient into the real one. The
 * parameters keep their shapes (checkpoints are the same), the plan holds the padded input, and the losses and
 * gradients are those of the unpadded model: the padded products are exact zeros, so only a GEMM's summation order
 * could differ (K = 27 -> 216). Seen on 2 threads: losses identical, gradients 2.3e-8 of the largest apart; the bound
 * is 1e-6 (slicing with beta 0 on the second micro-batch, a planted bug, is 1.1e-2). */
static void test_padded_input_channels_match_unpadded(void **state) {
    (void)state;
    for (int variant = 0; variant < 2; variant++) { /* fused; then unfused with activation checkpointing */
        Config cfg;
        config_defaults(&cfg);
        cfg.model.input_size[0] = cfg.model.input_size[1] = cfg.model.input_size[2] = 16;
        cfg.train.fuse = !variant;
        cfg.train.checkpoint_activations = variant;
        Config on = cfg;
        snprintf(cfg.model.pad_input_channels, sizeof cfg.model.pad_input_channels, "off");
        snprintf(on.model.pad_input_channels, sizeof on.model.pad_input_channels, "on");
        Model *a = model_of(&cfg, 2, backend_cpu()), *b = model_of(&on, 2, backend_cpu());
        assert_int_equal(a->t_input_lp, a->t_input); /* float32, off: conv_in reads the input itself */
        const Tensor *lp = &b->tensors[b->t_input_lp];
        assert_int_not_equal(b->t_input_lp, b->t_input);
        assert_int_equal(lp->dims.c, 8);
        assert_int_equal(lp->count, 8 * b->tensors[b->t_input].count);
        assert_true(b->plan.items[lp->act].bytes >= (size_t)lp->count * sizeof(float)); /* planned padded */
        assert_true(plan_unshared_bytes(&b->plan) > plan_unshared_bytes(&a->plan));
        assert_plan_valid(&b->plan);
        int padded = 0;
        for (int i = 0; i < b->n_nodes; i++) {
            const Node *nd = &b->nodes[i];
            if (nd->pad_w < 0) continue;
            padded++;
            assert_string_equal(nd->name, "encoder.conv_in");
            assert_int_equal(nd->conv.c_in, 8);
            assert_int_equal(b->params[nd->weight].shape[4], 1);
            assert_false(nd->recompute);
        }
        assert_int_equal(padded, 1);
        assert_int_equal(b->param_count, a->param_count);
        for (int i = 0; i < a->n_params; i++) assert_int_equal(a->params[i].count, b->params[i].count);
        assert_true(b->conv_flops_step == a->conv_flops_step); /* the model's work, padded or not */
        const long count = a->param_count;
        model_free(a);
        model_free(b);

        float la[4], lb[4];
        float *ga = malloc((size_t)count * sizeof(float)), *gb = malloc((size_t)count * sizeof(float));
        run_two_micro_batches(&cfg, la, ga);
        run_two_micro_batches(&on, lb, gb);
        double worst_loss = 0, worst_grad = 0, scale = 0;
        for (int k = 0; k < 4; k++) worst_loss = fmax(worst_loss, fabs((double)la[k] - lb[k]) / fabs((double)la[k]));
        for (long i = 0; i < count; i++) {
            worst_grad = fmax(worst_grad, fabs((double)ga[i] - gb[i]));
            scale = fmax(scale, fabs((double)ga[i]));
        }
        print_message("pad_input_channels on vs off (%s): losses %.3g relative, gradients %.3g of the largest\n",
                      variant ? "unfused, checkpointed" : "fused", worst_loss, worst_grad / scale);
        assert_true(scale > 0);
        assert_true(worst_loss <= 1e-6);
        assert_true(worst_grad <= 1e-6 * scale);
        free(ga);
        free(gb);
    }
}

/* The hardware plan (hw_plan.h) on simulated GPUs: a test double of the device (its free memory and compute
 * capability) and of the backend (the CPU's table, planning bytes with its workspace sizes, but answering supports()
 * for every storage type as a GPU does). ae3d-64's model. */
static Config ae3d_64(void) {
    Config c;
    config_defaults(&c);
    c.model.input_size[0] = c.model.input_size[1] = c.model.input_size[2] = 64;
    c.model.channels[0] = 32, c.model.channels[1] = 64, c.model.channels[2] = 64, c.model.levels = 3;
    c.model.norm_groups = 16, c.model.latent_channels = 3, c.train.batch_size = 0;
    return c;
}
static size_t plan_bytes(const Config *cfg, const Backend *be, int batch, DType dt, int ckpt) {
    Config c = *cfg;
    snprintf(c.train.precision, sizeof c.train.precision, "%s", dt == DT_BF16 ? "bf16" : dt == DT_F16 ? "fp16" : "off");
    c.train.checkpoint_activations = ckpt;
    Model *m = model_of(&c, batch, be);
    const size_t b = model_device_bytes(m);
    model_free(m);
    return b;
}

/* Seed 001's three vit3d_diffusion stages (configs/vit3d-diffusion-stages.json: 64^3 x 16, 128^3 x 8, 256^3 x 4 per
 * GPU) planned on a simulated 80 GB GPU (bf16 by compute capability 9.0): every stage fits, each at its own batch,
 * with activation checkpointing switched on only where that batch does not fit without it. */
static void test_vit_diffusion_stages_on_80gb(void **state) {
    (void)state;
    const Backend be = gpu_double();
    Config cfg;
    config_load(&cfg, "configs/vit3d-diffusion-stages.json");
    const size_t GiB = 1073741824ul;
    const HwPlanDevice h100 = {.gpu = 1, .cc_major = 9, .cc_minor = 0, .available = 80 * GiB, .cap = 64};
    static StagePlan st[CONFIG_MAX_STAGES];
    const int n = train_stages(&cfg.model, &cfg.train, 0, 1, st);
    assert_int_equal(n, 3);
    const int batch[3] = {16, 8, 4};
    for (int k = 0; k < n; k++) {
        HwPlan p;
        char why[400], line[700];
        assert_true(hw_plan(&st[k].model, &st[k].train, &be, &h100, 1, &p, why, sizeof why));
        assert_int_equal(p.batch, batch[k]);
        assert_int_equal(p.precision, DT_BF16);
        assert_true((double)p.need_bytes <= HW_MEMORY_SHARE * (double)h100.available);
        hw_plan_describe(&p, &h100, &st[k].train, line, sizeof line);
        printf("80 GB, stage %d: input %d^3: %s\n", k + 1, st[k].model.input_size[0], line);
    }
}

/* train.batch_preset cxr (seed 002's table) for configs/cxr-densenet121.json (DenseNet121, 320 x 320 films) on simulated
 * GPUs of each row's memory: the table's batch x accumulation where the exact plan fits its batch; where it does not
 * (a GPU of 24 GB with 0.9 GB free), the largest batch that fits and the accumulation that keeps 64 samples per step;
 * on the CPU the table is not used. */
static void test_seed002_batch_preset(void **state) {
    (void)state;
    const Backend be = gpu_double();
    Config cfg;
    config_load(&cfg, "configs/cxr-densenet121.json");
    cfg.train.batch_size = 0;
    snprintf(cfg.train.batch_preset, sizeof cfg.train.batch_preset, "cxr");
    const double GB = 1e9;
    const struct {
        double total, free_gb;
        int batch, accum;
    } rows[] = {{80, 80, 16, 4}, {24, 24, 16, 4}, {16, 16, 12, 5}, {12, 12, 8, 8}, {8, 8, 4, 16}, {4, 4, 2, 32}};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        const HwPlanDevice dev = {.gpu = 1, .cc_major = 9, .available = (size_t)(rows[k].free_gb * GB),
                                  .total = (size_t)(rows[k].total * GB), .cap = 64};
        HwPlan p;
        char why[400], line[900];
        assert_true(hw_plan(&cfg.model, &cfg.train, &be, &dev, 1, &p, why, sizeof why));
        hw_plan_describe(&p, &dev, &cfg.train, line, sizeof line);
        printf("%.0f GB: %s\n", rows[k].total, line);
        assert_int_equal(p.batch, rows[k].batch);
        assert_int_equal(p.accum, rows[k].accum);
        assert_non_null(strstr(line, "seed 002's table for a"));
        assert_non_null(strstr(line, ", kept"));
    }
    /* 24 GB, little of it free: the table's 16 does not fit, a smaller batch that does, 64 samples per step kept */
    const HwPlanDevice busy = {.gpu = 1, .cc_major = 9, .available = (size_t)(0.9 * GB), .total = (size_t)(24 * GB),
                               .cap = 64};
    HwPlan p;
    char why[400], line[900];
    assert_true(hw_plan(&cfg.model, &cfg.train, &be, &busy, 1, &p, why, sizeof why));
    hw_plan_describe(&p, &busy, &cfg.train, line, sizeof line);
    printf("24 GB, 0.9 GB free: %s\n", line);
    assert_true(p.batch >= 1 && p.batch < 16);
    assert_true((double)p.need_bytes <= HW_MEMORY_SHARE * (double)busy.available);
    assert_true((double)plan_bytes(&cfg, &be, p.batch + 1, DT_BF16, 0) > HW_MEMORY_SHARE * (double)busy.available);
    assert_int_equal(p.accum, (64 + p.batch - 1) / p.batch);
    assert_non_null(strstr(line, "says 16 x 4, but batch 16 plans more than the budget"));
    /* the CPU: the exact plan, and the line says the table is for GPUs */
    const HwPlanDevice cpu = {.gpu = 0, .available = (size_t)(24 * GB), .cap = 2};
    assert_true(hw_plan(&cfg.model, &cfg.train, &be, &cpu, 1, &p, why, sizeof why));
    hw_plan_describe(&p, &cpu, &cfg.train, line, sizeof line);
    assert_non_null(strstr(line, "seed 002's table is for GPUs"));
}

static void test_hardware_plan_on_simulated_gpus(void **state) {
    (void)state;
    const Backend be = gpu_double();
    const Config cfg = ae3d_64();
    const size_t GiB = 1073741824ul;
    /* (a cap above 64: ae3d-64 in bf16 fits 64 in 24 GB since the decoder's upsampling convolution keeps no
     * upsampled tensor) */
    const HwPlanDevice l4 = {.gpu = 1, .cc_major = 8, .cc_minor = 9, .available = 24 * GiB, .cap = 1024},
                       h100 = {.gpu = 1, .cc_major = 9, .cc_minor = 0, .available = 80 * GiB, .cap = 1024};
    HwPlan a, b;
    char why[400];
    assert_true(hw_plan(&cfg.model, &cfg.train, &be, &l4, 1, &a, why, sizeof why));
    assert_true(hw_plan(&cfg.model, &cfg.train, &be, &h100, 1, &b, why, sizeof why));
    /* bf16 on both (8.9 and 9.0); the largest power of two that fits 80%, larger on 80 GB; no checkpointing needed */
    assert_int_equal(a.precision, DT_BF16);
    assert_int_equal(b.precision, DT_BF16);
    print_message("ae3d-64: batch %d on 24 GB, %d on 80 GB\n", a.batch, b.batch);
    assert_true(a.batch >= 1 && b.batch > a.batch);
    assert_int_equal(a.checkpoint_activations + b.checkpoint_activations, 0);
    const HwPlanDevice *devs[2] = {&l4, &h100};
    const HwPlan *plans[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
        const double budget = HW_MEMORY_SHARE * (double)devs[k]->available;
        assert_int_equal(plans[k]->need_bytes, plan_bytes(&cfg, &be, plans[k]->batch, DT_BF16, 0));
        assert_true((double)plans[k]->need_bytes <= budget);
        if (plans[k]->batch < 64) assert_true((double)plan_bytes(&cfg, &be, 2 * plans[k]->batch, DT_BF16, 0) > budget);
    }
    /* bf16 activations: more fits than in float32 */
    Config f32 = cfg;
    snprintf(f32.train.precision, sizeof f32.train.precision, "off");
    HwPlan c;
    assert_true(hw_plan(&f32.model, &f32.train, &be, &l4, 1, &c, why, sizeof why));
    assert_int_equal(c.precision, DT_F32);
    assert_true(c.batch < a.batch);
    /* no bf16 below compute capability 8.0: fp16 */
    const HwPlanDevice t4 = {.gpu = 1, .cc_major = 7, .cc_minor = 5, .available = 16 * GiB, .cap = 64};
    assert_true(hw_plan(&cfg.model, &cfg.train, &be, &t4, 1, &c, why, sizeof why));
    assert_int_equal(c.precision, DT_F16);
    /* the plan's line says why: auto chose by compute capability; an explicit type is the config's */
    char line[700];
    hw_plan_describe(&b, &h100, &cfg.train, line, sizeof line);
    assert_non_null(strstr(line, "plan: bf16 mixed precision (compute capability 9.0: bf16 tensor cores); batch "));
    hw_plan_describe(&c, &t4, &cfg.train, line, sizeof line);
    assert_non_null(strstr(line, "plan: f16 mixed precision (compute capability 7.5: fp16, no bf16 below 8.0)"));
    Config asked_bf16 = cfg;
    snprintf(asked_bf16.train.precision, sizeof asked_bf16.train.precision, "bf16");
    hw_plan_describe(&b, &h100, &asked_bf16.train, line, sizeof line);
    assert_non_null(strstr(line, "plan: bf16 mixed precision (train.precision); "));
    /* a global batch of 64 on 4 of the 24 GB GPUs: the batch divides 16 per rank, accumulation makes up the rest */
    Config g = cfg;
    g.train.global_batch = 64;
    assert_true(hw_plan(&g.model, &g.train, &be, &l4, 4, &c, why, sizeof why));
    assert_int_equal(c.batch * 4 * c.accum, 64);
    assert_int_equal(16 % c.batch, 0);
    assert_true(c.batch <= a.batch);
    g.train.global_batch = 66; /* 66 does not split into 4 ranks */
    assert_false(hw_plan(&g.model, &g.train, &be, &l4, 4, &c, why, sizeof why));
    assert_non_null(strstr(why, "does not split"));
}

/* The automatic batch search asks the backend for convolution workspaces (on a GPU: cuDNN's heuristics and workspace
 * queries per direction and shape) about once per convolution of the chosen batch, not for every candidate batch:
 * counted on the simulated GPU, against the search that planned every batch exactly, which must choose the same. */
static long workspace_queries;
static size_t (*cpu_workspace)(const Conv3dShape *s);
static size_t counting_workspace(const Conv3dShape *s) {
    workspace_queries++;
    return cpu_workspace(s);
}

static void test_batch_search_plans_exactly_once(void **state) {
    (void)state;
    Backend be = gpu_double();
    cpu_workspace = conv3d_double.workspace_bytes;
    conv3d_double.workspace_bytes = counting_workspace;
    const Config cfg = ae3d_64();
    const size_t GiB = 1073741824ul;
    Model *one = model_of(&cfg, 1, &be);
    int convs = 0;
    for (int i = 0; i < one->n_nodes; i++) convs += node_convolves(&one->nodes[i]); /* (the phase one too) */
    model_free(one);
    const size_t sizes[] = {3 * GiB, 24 * GiB, 80 * GiB, 141 * GiB};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const HwPlanDevice dev = {.gpu = 1, .cc_major = 9, .available = sizes[k], .cap = 64};
        const double budget = HW_MEMORY_SHARE * (double)dev.available;
        /* before: every candidate batch planned exactly, up to the first that does not fit */
        workspace_queries = 0;
        int want = 0;
        for (int b = 1; b <= 64 && (double)plan_bytes(&cfg, &be, b, DT_BF16, 0) <= budget; b *= 2) want = b;
        const long before = workspace_queries;
        workspace_queries = 0;
        HwPlan p;
        char why[400];
        assert_true(hw_plan(&cfg.model, &cfg.train, &be, &dev, 1, &p, why, sizeof why));
        const long now = workspace_queries;
        print_message("%zu GiB: batch %d; workspace queries %ld planning every batch, %ld now (%d convolutions)\n",
                      sizes[k] / GiB, p.batch, before, now, convs);
        assert_int_equal(p.batch, want);
        assert_int_equal(p.need_bytes, plan_bytes(&cfg, &be, p.batch, DT_BF16, 0));
        assert_true(now <= convs);
        if (want >= 4) assert_true(now * 3 <= before);
    }
    conv3d_double.workspace_bytes = cpu_workspace;
}

/* model.pad_input_channels auto pads in bf16 and fp16 (cuDNN's tensor-core types) and not in float32; off never, on
 * always. Built on the simulated GPU's table (ae3d-64 at batch 2): the padded input is planned in the storage type. */
static void test_input_padding_auto_follows_the_storage_type(void **state) {
    (void)state;
    const Backend be = gpu_double();
    const struct {
        const char *precision, *pad;
        int c;
        DType dt;
    } cases[] = {{"bf16", "auto", 8, DT_BF16}, {"fp16", "auto", 8, DT_F16}, {"off", "auto", 1, DT_F32},
                 {"bf16", "off", 1, DT_BF16}, {"off", "on", 8, DT_F32}};
    size_t unshared[5];
    for (int k = 0; k < 5; k++) {
        Config c = ae3d_64();
        snprintf(c.train.precision, sizeof c.train.precision, "%s", cases[k].precision);
        snprintf(c.model.pad_input_channels, sizeof c.model.pad_input_channels, "%s", cases[k].pad);
        Model *m = model_of(&c, 2, &be);
        const Tensor *lp = &m->tensors[m->t_input_lp];
        assert_int_equal(lp->dims.c, cases[k].c);
        assert_int_equal(lp->dtype, cases[k].dt);
        assert_int_equal(m->t_input_lp == m->t_input, cases[k].dt == DT_F32 && cases[k].c == 1);
        assert_true(m->plan.items[lp->act].bytes >= (size_t)lp->count * dtype_size(lp->dtype));
        unshared[k] = plan_unshared_bytes(&m->plan);
        model_free(m);
    }
    /* bf16 padded against unpadded: at least the 7 zero channels of 2 x 64^3 voxels more */
    assert_true(unshared[0] >= unshared[3] + 7ul * 2 * 64 * 64 * 64 * 2);
}

/* Activation checkpointing only when the batch would not fit without it: memory between what batch 1 needs with
 * and without it switches it on; a given batch that fits only with it gets it; one that fits does not. */
static void test_hardware_plan_switches_checkpointing_on_only_when_needed(void **state) {
    (void)state;
    const Backend be = gpu_double();
    Config cfg = ae3d_64();
    const size_t plain = plan_bytes(&cfg, &be, 1, DT_BF16, 0), ckpt = plan_bytes(&cfg, &be, 1, DT_BF16, 1);
    assert_true(ckpt < plain);
    const HwPlanDevice dev = {.gpu = 1, .cc_major = 9, .available = (size_t)((plain + ckpt) / 2 / HW_MEMORY_SHARE),
                              .cap = 64};
    HwPlan p;
    char why[400];
    char line[700];
    assert_true(hw_plan(&cfg.model, &cfg.train, &be, &dev, 1, &p, why, sizeof why));
    assert_int_equal(p.batch, 1);
    assert_true(p.checkpoint_activations && p.checkpoint_switched_on);
    hw_plan_describe(&p, &dev, &cfg.train, line, sizeof line);
    assert_non_null(strstr(line, "activation checkpointing on (batch 1 does not fit without it)"));
    cfg.train.batch_size = 1; /* given, and fitting only with checkpointing */
    assert_true(hw_plan(&cfg.model, &cfg.train, &be, &dev, 1, &p, why, sizeof why));
    assert_true(p.checkpoint_activations && p.checkpoint_switched_on);
    /* a given batch 2 that fits only with it: the line names that batch */
    const size_t plain2 = plan_bytes(&cfg, &be, 2, DT_BF16, 0), ckpt2 = plan_bytes(&cfg, &be, 2, DT_BF16, 1);
    const HwPlanDevice dev2 = {.gpu = 1, .cc_major = 9, .available = (size_t)((plain2 + ckpt2) / 2 / HW_MEMORY_SHARE),
                               .cap = 64};
    cfg.train.batch_size = 2;
    assert_true(hw_plan(&cfg.model, &cfg.train, &be, &dev2, 1, &p, why, sizeof why));
    assert_true(p.checkpoint_activations && p.checkpoint_switched_on);
    hw_plan_describe(&p, &dev2, &cfg.train, line, sizeof line);
    assert_non_null(strstr(line, "activation checkpointing on (batch 2 does not fit without it)"));
    cfg.train.batch_size = 1;
    const HwPlanDevice roomy = {.gpu = 1, .cc_major = 9, .available = 2 * plain, .cap = 64};
    assert_true(hw_plan(&cfg.model, &cfg.train, &be, &roomy, 1, &p, why, sizeof why));
    assert_int_equal(p.checkpoint_activations, 0);
    const HwPlanDevice tiny = {.gpu = 1, .cc_major = 9, .available = ckpt / 4, .cap = 64};
    cfg.train.batch_size = 0;
    assert_false(hw_plan(&cfg.model, &cfg.train, &be, &tiny, 1, &p, why, sizeof why));
    assert_non_null(strstr(why, "even batch size 1"));
    /* the CPU: float32, capped at its cores */
    const HwPlanDevice cpu = {.gpu = 0, .available = 64ul << 30, .cap = 2};
    assert_true(hw_plan(&cfg.model, &cfg.train, backend_cpu(), &cpu, 1, &p, why, sizeof why));
    assert_int_equal(p.precision, DT_F32);
    assert_int_equal(p.batch, 2);
}

/* pack(unpack(x)) == x, and unpack writes zeros into the padding: checkpoints are alignment-independent. */
static void test_param_pack_round_trip(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    Model *m = model_of(&cfg, 1, backend_cpu());
    float *packed = malloc((size_t)m->param_count * sizeof(float)), *back = malloc((size_t)m->param_count * sizeof(float));
    float *flat = malloc((size_t)m->param_floats * sizeof(float));
    for (long i = 0; i < m->param_count; i++) packed[i] = (float)i + 0.5f;
    for (long i = 0; i < m->param_floats; i++) flat[i] = NAN;
    model_unpack_params(m, packed, flat);
    long nonzero = 0;
    for (long i = 0; i < m->param_floats; i++) {
        assert_false(isnan(flat[i]));
        nonzero += flat[i] != 0.0f;
    }
    assert_int_equal(nonzero, m->param_count); /* every value once, the padding 0 (packed[i] > 0) */
    model_pack_params(m, flat, back);
    assert_memory_equal(back, packed, (size_t)m->param_count * sizeof(float));
    free(packed);
    free(back);
    free(flat);
    model_free(m);
}

static void test_schedule_warmup_then_cosine(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.train.lr = 1e-3;
    cfg.train.min_lr = 1e-5;
    cfg.train.warmup_steps = 10;
    cfg.train.steps = 110;
    assert_float_equal(schedule_lr(&cfg.train, 0), 1e-4, 1e-12);
    assert_float_equal(schedule_lr(&cfg.train, 9), 1e-3, 1e-12);
    assert_float_equal(schedule_lr(&cfg.train, 10), 1e-3, 1e-12);
    assert_float_equal(schedule_lr(&cfg.train, 109), 1e-5, 1e-12);
    double mid = schedule_lr(&cfg.train, 10 + 99 / 2.0);
    assert_true(mid > 1e-5 && mid < 1e-3);
    for (long s = 11; s < 110; s++) assert_true(schedule_lr(&cfg.train, s) <= schedule_lr(&cfg.train, s - 1));
}

static void test_phantom_is_a_function_of_seed_and_index(void **state) {
    (void)state;
    const int n = 12 * 10 * 8 * 2;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *c = malloc(n * sizeof(float));
    phantom_generate(5, 17, 12, 10, 8, 2, 0.02f, a);
    phantom_generate(5, 17, 12, 10, 8, 2, 0.02f, b);
    phantom_generate(5, 18, 12, 10, 8, 2, 0.02f, c);
    assert_memory_equal(a, b, n * sizeof(float));
    assert_memory_not_equal(a, c, n * sizeof(float));
    double mean = 0, lo = 1e9, hi = -1e9;
    for (int i = 0; i < n; i++) {
        assert_true(isfinite(a[i]));
        mean += a[i] / n;
        lo = fmin(lo, a[i]);
        hi = fmax(hi, a[i]);
    }
    assert_true(hi - lo > 0.1); /* there is structure, not just noise */
    assert_true(mean > -0.2 && mean < 1.2);
    free(a);
    free(b);
    free(c);
}

/* The position is a sample index: a start that is no multiple of the batch (a resume at another batch size) reads
 * on from exactly that sample. */
static void test_loader_delivers_batches_in_order_from_any_start(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.model.input_size[0] = cfg.model.input_size[1] = cfg.model.input_size[2] = 8;
    cfg.data.prefetch = 2;
    const int batch = 3, first = 5;
    long vol = 8 * 8 * 8;
    float *want = malloc(vol * sizeof(float));
    Loader l;
    Dataset *ds =
        dataset_open(&cfg.data, cfg.train.seed, cfg.model.in_channels, cfg.model.input_size, cfg.model.input_size, 0);
    loader_start(&l, ds, batch, vol, first, batch, 3, 2, 1, backend_cpu()); /* 2 workers: order is kept */
    for (int k = 0; k < 7; k++) {
        const float *got = loader_next(&l);
        for (int b = 0; b < batch; b++) {
            phantom_generate((uint64_t)cfg.train.seed, (uint64_t)(first + k * batch + b), 8, 8, 8, 1,
                             (float)cfg.data.noise, want);
            assert_memory_equal(got + b * vol, want, vol * sizeof(float));
        }
        loader_release(&l);
    }
    loader_stop(&l);
    dataset_close(ds);
    free(want);
}

/* A sample's reparameterization noise depends on its global index only: sample 6 gets the same noise as the third
 * of a batch of 4 starting at 4 and as the first of a batch of 2 starting at 6. */
static void test_noise_is_keyed_by_the_global_sample(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.model.input_size[0] = cfg.model.input_size[1] = cfg.model.input_size[2] = 8;
    Model *big = model_of(&cfg, 4, backend_cpu()), *small = model_of(&cfg, 2, backend_cpu());
    model_allocate(big);
    model_allocate(small);
    model_init_params(big, 1);
    model_init_params(small, 1);
    memset(model_tensor(big, big->t_input), 0, (size_t)big->tensors[big->t_input].count * sizeof(float));
    memset(model_tensor(small, small->t_input), 0, (size_t)small->tensors[small->t_input].count * sizeof(float));
    model_set_first_sample(big, 4);
    model_forward(big, 1);
    model_set_first_sample(small, 6);
    model_forward(small, 1);
    const long per = big->tensors[big->t_z].count / 4;
    assert_memory_equal(model_noise(big) + 2 * per, model_noise(small), 2 * (size_t)per * sizeof(float));
    /* and another start gives other noise (the test above is not vacuous) */
    model_set_first_sample(small, 5);
    model_forward(small, 1);
    assert_memory_not_equal(model_noise(big) + 2 * per, model_noise(small), (size_t)per * sizeof(float));
    model_free(big);
    model_free(small);
}

/* --device auto on a machine with GPUs that CUDA cannot use (a driver below the build's CUDA major reports none) warns
 * instead of training on the CPU in silence: the GPUs are counted from /dev's device files, not from CUDA. */
static void test_nvidia_device_files_count_the_gpus(void **state) {
    (void)state;
    char dir[] = "/tmp/vx_dev_XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(hw_nvidia_device_files(dir), 0);
    const char *names[] = {"nvidia0", "nvidia1", "nvidia12", "nvidiactl", "nvidia-uvm", "nvidia-modeset", "nvidia",
                           "nvidia3x", "null"};
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
    }
    assert_int_equal(hw_nvidia_device_files(dir), 3);
    assert_int_equal(hw_nvidia_device_files("/nonexistent-dir"), 0);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* Every node has its own name: trace ranges and layer timings are told apart by it (the upsample and the conv
 * after it once shared one). */
static void test_node_names_are_unique(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.model.res_blocks = 2;
    Model *m = model_of(&cfg, 1, backend_cpu());
    for (int i = 0; i < m->n_nodes; i++)
        for (int j = i + 1; j < m->n_nodes; j++)
            if (strcmp(m->nodes[i].name, m->nodes[j].name) == 0) fail_msg("nodes %d and %d are both %s", i, j, m->nodes[i].name);
    model_free(m);
}

/* Untrusted bytes in messages: printable ASCII and valid UTF-8 stay, control characters, escape sequences, C1
 * controls and broken UTF-8 become \xNN. */
static void test_escape_keeps_text_and_neutralizes_control_bytes(void **state) {
    (void)state;
    char out[128];
    assert_string_equal(vx_escape("a/b c.json", out, sizeof out), "a/b c.json");
    assert_string_equal(vx_escape("t\xc3\xa4st \xe2\x82\xac", out, sizeof out), "t\xc3\xa4st \xe2\x82\xac");
    assert_string_equal(vx_escape("\x1b[31mred\nline\x7f", out, sizeof out), "\\x1B[31mred\\x0Aline\\x7F");
    assert_string_equal(vx_escape("\xc2\x9b" "2J \xff \xc3", out, sizeof out), "\\xC2\\x9B2J \\xFF \\xC3");
    assert_string_equal(vx_escape("\xed\xa0\x80", out, sizeof out), "\\xED\\xA0\\x80"); /* a surrogate */
    char tiny[6];
    assert_string_equal(vx_escape("\x01\x02", tiny, sizeof tiny), "\\x01"); /* never a cut escape */
}

/* Refused config texts end through vx_exit: a handler longjmps back here with the code (as the fuzz targets do). */
static jmp_buf refuse_jmp;
static void refuse_exit(int code) { longjmp(refuse_jmp, code); }
static int parse_code(const char *text) {
    Config cfg;
    vx_set_exit_handler(refuse_exit);
    int code = setjmp(refuse_jmp);
    if (code == 0) config_parse_text(&cfg, text, strlen(text), "t.json");
    vx_set_exit_handler(NULL);
    return code;
}

static void test_config_reader_is_strict(void **state) {
    (void)state;
    assert_int_equal(parse_code("{\"train\": {\"steps\": 3}}\n  "), 0);
    assert_int_equal(parse_code("{\"train\": {\"steps\": 3}} // c"), 2);              /* text after the object */
    assert_int_equal(parse_code("{\"train\": {\"steps\": 3}}{}"), 2);
    assert_int_equal(parse_code("{\"train\": {\"steps\": 3, \"steps\": 4}}"), 2);   /* a key twice */
    assert_int_equal(parse_code("{\"train\": {}, \"train\": {}}"), 2);             /* a section twice */
    assert_int_equal(parse_code("{\"train\": {\"beta2\": 0.999999999}}"), 2);      /* 1.0 in float32 */
    assert_int_equal(parse_code("{\"train\": {\"beta2\": 0.9999999}}"), 0);
    assert_int_equal(parse_code("{\"train\": {\"lr\": 1, \"weight_decay\": 1}}"), 2); /* 1 - lr*wd <= 0 */
    Config cfg;
    config_defaults(&cfg);
    vx_set_exit_handler(refuse_exit);
    const char *values[] = {"5abc", "0x10", "1e3x", "", "3 4"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        int code = setjmp(refuse_jmp);
        if (code == 0) {
            config_set(&cfg, "train.steps", values[i], "--steps");
            fail_msg("--steps %s was accepted as %d", values[i], cfg.train.steps);
        }
        assert_int_equal(code, 2);
    }
    vx_set_exit_handler(NULL);
    config_set(&cfg, "train.steps", "17", "--steps");
    assert_int_equal(cfg.train.steps, 17);
}

/* The picture of a 3x4x5 volume: every tile at its place, slices through the middle, error = |in-rec| x gain. */
static void test_tiles_show_the_mid_slices(void **state) {
    (void)state;
    enum { D = 3, H = 4, W = 5, C = 2 };
    float in[D * H * W * C], rec[D * H * W * C];
    for (int i = 0; i < D * H * W * C; i++) {
        in[i] = (float)(i % 37) / 40.0f;
        rec[i] = in[i] * 0.9f;
    }
    int width, height;
    tiles_size(D, H, W, &width, &height);
    assert_int_equal(width, W + W + H + 2 * TILES_GAP);
    assert_int_equal(height, 3 * H + 2 * TILES_GAP);
    uint8_t *px = malloc((size_t)width * height);
    tiles_mid_slices(in, rec, D, H, W, C, px);
#define AT(z, y, x) ((((z) * H + (y)) * W + (x)) * C)
#define BYTE(v) ((v) <= 0 ? 0 : (v) >= 1 ? 255 : (int)lrintf((v) * 255.0f))
    int row = H + TILES_GAP;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) { /* axial: z = D/2 */
            assert_int_equal(px[y * width + x], BYTE(in[AT(D / 2, y, x)]));
            assert_int_equal(px[(row + y) * width + x], BYTE(rec[AT(D / 2, y, x)]));
            float err = fabsf(in[AT(D / 2, y, x)] - rec[AT(D / 2, y, x)]) * TILES_ERROR_GAIN;
            assert_int_equal(px[(2 * row + y) * width + x], BYTE(err));
        }
    for (int z = 0; z < D; z++) {
        for (int x = 0; x < W; x++) /* coronal: y = H/2 */
            assert_int_equal(px[z * width + W + TILES_GAP + x], BYTE(in[AT(z, H / 2, x)]));
        for (int y = 0; y < H; y++) /* sagittal: x = W/2 */
            assert_int_equal(px[z * width + 2 * (W + TILES_GAP) + y], BYTE(in[AT(z, y, W / 2)]));
    }
    for (int x = 0; x < W; x++) assert_int_equal(px[D * width + W + TILES_GAP + x], 0); /* D < H: padded black */
    for (int y = 0; y < height; y++) assert_int_equal(px[y * width + W], TILES_GAP_VALUE); /* column gap */
    for (int x = 0; x < width; x++) assert_int_equal(px[H * width + x], TILES_GAP_VALUE);   /* row gap */
#undef BYTE
#undef AT
    free(px);
}

static void test_param_groups_are_levels_and_heads(void **state) {
    (void)state;
    char g[96];
    train_log_param_group("encoder.down.0.res.0.conv1.weight", g, sizeof g);
    assert_string_equal(g, "encoder.down.0");
    train_log_param_group("decoder.up.12.upsample.bias", g, sizeof g);
    assert_string_equal(g, "decoder.up.12");
    train_log_param_group("decoder.conv_out.bias", g, sizeof g);
    assert_string_equal(g, "decoder.conv_out");
    train_log_param_group("encoder.mu.weight", g, sizeof g);
    assert_string_equal(g, "encoder.mu");
    train_log_param_group("encoder.down.1.res.0.shortcut.weight", g, 8);
    assert_string_equal(g, "encoder"); /* truncated to the buffer, never overrun */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_reuses_dead_memory),
        cmocka_unit_test(test_plan_random_intervals_never_collide),
        cmocka_unit_test(test_model_plan_is_valid_and_saves_memory),
        cmocka_unit_test(test_checkpointed_plan_is_valid_and_smaller),
        cmocka_unit_test(test_padded_input_channels_match_unpadded),
        cmocka_unit_test(test_hardware_plan_on_simulated_gpus),
        cmocka_unit_test(test_seed002_batch_preset),
        cmocka_unit_test(test_vit_diffusion_stages_on_80gb),
        cmocka_unit_test(test_batch_search_plans_exactly_once),
        cmocka_unit_test(test_hardware_plan_switches_checkpointing_on_only_when_needed),
        cmocka_unit_test(test_input_padding_auto_follows_the_storage_type),
        cmocka_unit_test(test_param_pack_round_trip),
        cmocka_unit_test(test_schedule_warmup_then_cosine),
        cmocka_unit_test(test_phantom_is_a_function_of_seed_and_index),
        cmocka_unit_test(test_loader_delivers_batches_in_order_from_any_start),
        cmocka_unit_test(test_noise_is_keyed_by_the_global_sample),
        cmocka_unit_test(test_node_names_are_unique),
        cmocka_unit_test(test_nvidia_device_files_count_the_gpus),
        cmocka_unit_test(test_escape_keeps_text_and_neutralizes_control_bytes),
        cmocka_unit_test(test_config_reader_is_strict),
        cmocka_unit_test(test_tiles_show_the_mid_slices),
        cmocka_unit_test(test_param_groups_are_levels_and_heads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

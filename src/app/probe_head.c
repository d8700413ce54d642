/* probe_head.c: `voxscale probe` for a family with a prediction head (resnet3d): several fixed training forwards and
 * backwards dumped for the MONAI/PyTorch comparison (bench/reference/resnet3d.py, tests/integration/test_monai.py).
 * Step s runs phantom batch s (samples s*batch ..) with its labels: a training forward (batch statistics; the running
 * statistics move), the loss and its backward with the parameters held fixed; after the last, one evaluation forward
 * of batch 0 (running statistics). Files: PREFIX.json (names, shapes, offsets into the .bin, losses, the resolved
 * config) and PREFIX.bin (float32: the initial parameters in the packed layout, each step's input [N][D][H][W][C],
 * targets, outputs and ReLU masks (y > 0, every ReLU in node order), the last step's gradients, the buffers after the
 * steps, the evaluation outputs). VX_PROBE_NODE_GRADS=DIR also writes each node's input gradient of the last step. */
#include "app/probe.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/util.h"
#include "data/phantom.h"

/* VX_PROBE_NODE_GRADS=DIR: after each node's backward in the last step, the gradient of its first input, to
 * DIR/<node index>.bin (float32 of its dtype converted): what finds the first layer two implementations part at */
typedef struct {
    const char *dir;
    int last;
} GradDump;
static GradDump g_dump;
static void dump_node_grad(void *ctx, int node, int phase) {
    Model *m = ctx;
    if (phase != 3 || !g_dump.dir || !g_dump.last) return;
    const int t = m->nodes[node].in[0];
    if (!model_tensor_grad(m, t)) return;
    const Tensor *tn = &m->tensors[t];
    float *h = vx_malloc((size_t)tn->count * sizeof(float));
    void *raw = vx_malloc((size_t)tn->count * dtype_size(tn->dtype));
    m->be->copy_to_host(raw, model_tensor_grad(m, t), (size_t)tn->count * dtype_size(tn->dtype));
    dtype_convert((size_t)tn->count, tn->dtype, raw, DT_F32, h);
    char path[600];
    snprintf(path, sizeof path, "%s/%03d_%s.bin", g_dump.dir, node, m->nodes[node].name);
    FILE *f = fopen(path, "wb");
    if (f) fwrite(h, sizeof(float), (size_t)tn->count, f), fclose(f);
    free(raw);
    free(h);
}

/* Every ReLU's output of a training forward as 0/1 (y > 0), in node order, appended to a host array: the decisions a
 * reference replays (a value within rounding of zero may fall on either side in another implementation, and one
 * such switch moves a small gradient by percents; replaying ours keeps that out of the comparison of the rest) */
typedef struct {
    float *v;
    long n, cap;
    int on;
} Masks;
static Masks g_masks;
static void record_relu(Model *m, int node) {
    const Tensor *t = &m->tensors[m->nodes[node].out];
    if (g_masks.n + t->count > g_masks.cap) {
        g_masks.cap = 2 * (g_masks.n + t->count);
        g_masks.v = realloc(g_masks.v, (size_t)g_masks.cap * sizeof(float));
        if (!g_masks.v) vx_fatal("out of memory recording the ReLU masks");
    }
    model_tensor_to_host(m, m->nodes[node].out, g_masks.v + g_masks.n);
    for (long i = 0; i < t->count; i++) g_masks.v[g_masks.n + i] = g_masks.v[g_masks.n + i] > 0.0f;
    g_masks.n += t->count;
}

static void probe_hook(void *ctx, int node, int phase) {
    Model *m = ctx;
    const Node *nd = &m->nodes[node]; /* a ReLU, or a BatchNorm with its ReLU fused (train.fuse): its output */
    if (phase == 1 && g_masks.on && (nd->kind == OP_RELU || (nd->kind == OP_BATCHNORM && nd->bn.relu)))
        record_relu(m, node);
    if (phase == 3) dump_node_grad(ctx, node, phase);
}

int probe_head(const Config *cfg, Runtime *rt, int steps) {
    Model *m = rt->model;
    const Tensor *in = &m->tensors[m->t_input], *out = &m->tensors[m->t_out];
    const int L = m->labels;
    char path[CONFIG_STR + 16];
    snprintf(path, sizeof path, "%s.bin", cfg->output.dir);
    FILE *f = fopen(path, "wb");
    if (!f) vx_usage_error("probe: cannot create %s", path);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "param_values", (double)probe_append(f, probe_packed_to_host(m, m->param), m->param_count));
    cJSON *js = cJSON_AddArrayToObject(j, "steps");
    for (int s = 0; s < steps; s++) {
        const int64_t first = (int64_t)s * m->batch;
        float *batch = runtime_load_phantom_batch(rt, cfg->train.seed, cfg->data.noise, first);
        float *targets = vx_malloc((size_t)m->batch * L * sizeof(float));
        for (int b = 0; b < m->batch; b++)
            phantom_labels((uint64_t)cfg->train.seed, (uint64_t)(first + b), cfg->model.head.task,
                           cfg->model.head.num_classes, targets + (long)b * L);
        model_set_first_sample(m, (uint64_t)first);
        model_set_targets(m, targets);
        g_masks = (Masks){.on = 1};
        m->node_hook = probe_hook, m->node_hook_ctx = m;
        model_forward(m, 1);
        g_masks.on = 0;
        float *o = vx_malloc((size_t)out->count * sizeof(float));
        model_tensor_to_host(m, m->t_out, o);
        g_dump = (GradDump){getenv("VX_PROBE_NODE_GRADS"), s == steps - 1};
        m->node_hook = probe_hook, m->node_hook_ctx = m;
        model_backward(m, 1.0f, 0.0f, NULL);
        m->node_hook = NULL;
        const Losses l = model_read_losses(m);
        cJSON *st = cJSON_CreateObject();
        cJSON_AddNumberToObject(st, "input", (double)probe_append(f, batch, in->count));
        cJSON_AddNumberToObject(st, "targets", (double)probe_append(f, targets, (long)m->batch * L));
        cJSON_AddNumberToObject(st, "outputs", (double)probe_append(f, o, out->count));
        cJSON_AddNumberToObject(st, "relu_masks_count", (double)g_masks.n);
        cJSON_AddNumberToObject(st, "relu_masks", (double)probe_append(f, g_masks.v, g_masks.n));
        g_masks = (Masks){0};
        cJSON_AddNumberToObject(st, "loss", l.total);
        cJSON_AddItemToArray(js, st);
    }
    cJSON_AddNumberToObject(j, "grad_values", (double)probe_append(f, probe_packed_to_host(m, m->grad), m->param_count));
    float *bufs = vx_malloc((size_t)(m->buffer_floats ? m->buffer_floats : 1) * sizeof(float));
    model_download_buffers(m, bufs);
    cJSON_AddNumberToObject(j, "buffer_values", (double)probe_append(f, bufs, m->buffer_floats));
    float *batch = runtime_load_phantom_batch(rt, cfg->train.seed, cfg->data.noise, 0);
    free(batch);
    model_forward(m, 0);
    float *o = vx_malloc((size_t)out->count * sizeof(float));
    model_tensor_to_host(m, m->t_out, o);
    cJSON_AddNumberToObject(j, "eval_outputs", (double)probe_append(f, o, out->count));
    fclose(f);

    cJSON_AddItemToObject(j, "input_shape", cJSON_CreateIntArray((int[]){in->dims.n, in->dims.d, in->dims.h,
                                                                        in->dims.w, in->dims.c}, 5));
    cJSON_AddNumberToObject(j, "outputs_per_sample", out->dims.c);
    cJSON_AddNumberToObject(j, "labels_per_sample", L);
    probe_params_json(j, m);
    cJSON *bs = cJSON_AddArrayToObject(j, "buffers");
    for (int i = 0; i < m->n_buffers; i++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "name", m->buffers[i].name);
        cJSON_AddNumberToObject(b, "count", (double)m->buffers[i].count);
        cJSON_AddNumberToObject(b, "offset", (double)m->buffers[i].offset);
        cJSON_AddItemToArray(bs, b);
    }
    char *cfg_text = config_to_json(cfg);
    cJSON_AddItemToObject(j, "config", cJSON_Parse(cfg_text));
    free(cfg_text);
    char *text = cJSON_Print(j);
    snprintf(path, sizeof path, "%s.json", cfg->output.dir);
    fs_write_atomic(path, text, strlen(text));
    printf("probe: %d steps of %s (%s), %ld parameters, %ld buffer floats -> %s\n", steps, cfg->model.family,
           cfg->model.head.task, m->param_count, m->buffer_floats, path);
    free(text);
    cJSON_Delete(j);
    return 0;
}

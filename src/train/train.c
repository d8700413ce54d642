/* train.c: the training loop (see train.h). A run first validates everything (config, device, data, memory plan of
 * every stage, checkpoint; with ranks, that they agree), then takes the run directory (run_dir.h), then writes
 * there: a refused run touches nothing. It runs its stages (train_plan.h: one, or train.stages' progressive input sizes) in order; between two
 * the model is rebuilt at the new size, the parameters carry over and the optimizer restarts.
 * One optimizer step, on each of W data-parallel ranks (W = 1 for one process), is enqueued by train_step through
 * the stepper (step.h): for each of grad_accum micro-batches the loader's batch goes in (rank r reads part r of the
 * global micro-batch: samples next_sample + r*batch ..; on a GPU through a double-buffered staging upload, with the
 * flips and rotations of data.augment applied after it), forward, loss and backward run; during the last backward
 * every gradient bucket is all-reduced (summed) as soon as it is complete (parallel/buckets.h); then the optimizer
 * decides on the device (global norm, clip factor, skip of a non-finite step, loss scale) and updates. The
 * outcome is collected after the step, or, with --compile between steps that need nothing from the host, one step
 * late while the next step runs. The losses are summed over ranks and a stop request shared, so every rank takes
 * the same decisions. A non-finite loss, or a non-finite gradient without dynamic loss scaling, ends the run
 * (exit 4); no checkpoint is written for it. Rank 0 alone writes the run directory, validates and logs.
 * Test-only hook: VX_TEST_NONFINITE_GRAD=S[,S...] makes the gradient of those steps non-finite (a NaN written into
 * it before the optimizer), as a float16 overflow would, so the tests can watch a step being skipped. */
#include "train/train.h"
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/stop_signal.h"
#include "core/progress.h"
#include "core/util.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "parallel/buckets.h"
#include "parallel/comm.h"
#include "parallel/launch.h"
#include "ckpt/ckpt.h"
#include "ckpt/weights.h"
#include "tb/tb_writer.h"
#include "trace/gpu_activity.h"
#include "trace/trace.h"
#include "train/evaluate.h"
#include "train/heartbeat.h"
#include "train/metrics.h"
#include "train/param_groups.h"
#include "train/rank_agree.h"
#include "train/run_dir.h"
#include "train/runtime.h"
#include "train/schedule.h"
#include "train/step.h"
#include "train/train_ckpt.h"
#include "train/train_log.h"
#include "train/train_trace.h"
#include "train/zero_plan.h"
#include "elementwise/elementwise.h"
#include "augment/augment.h"
#include "optim/optim.h"

/* model.pos_weight_auto: pos_weight per label = negatives / positives of the training split (masked cells not
 * counted), into head->pos_weight before any model is built; a list given beside it must be that one. */
static void pos_weight_from_counts(const Dataset *ds, HeadConfig *head, int verbose) {
    long pos[CONFIG_MAX_LIST], neg[CONFIG_MAX_LIST];
    const int L = dataset_label_counts(ds, pos, neg);
    if (L == 0)
        vx_usage_error("model.pos_weight_auto counts a manifest's training labels; the phantoms have none to count "
                       "(data.source csv), or give model.pos_weight");
    ConfigList w = {.n = L};
    char line[1024] = "";
    for (int c = 0; c < L; c++) {
        if (pos[c] == 0)
            vx_usage_error("model.pos_weight_auto: label %d has no positive among the %ld known training labels: its "
                           "pos_weight (negatives / positives) is undefined; give model.pos_weight", c, neg[c]);
        w.v[c] = (double)neg[c] / (double)pos[c];
        if (head->pos_weight.n == L && fabs(head->pos_weight.v[c] - w.v[c]) > 1e-6 * w.v[c])
            vx_usage_error("model.pos_weight [..., %g, ...] (label %d) is not the training split's negatives / "
                           "positives (%ld / %ld = %g) that model.pos_weight_auto computes: give one or the other",
                           head->pos_weight.v[c], c, neg[c], pos[c], w.v[c]);
        if (strlen(line) < sizeof line - 32) snprintf(line + strlen(line), sizeof line - strlen(line), " %.4g", w.v[c]);
    }
    head->pos_weight = w;
    if (verbose) vx_log("labels: pos_weight from the training split (negatives / positives per label):%s\n", line);
}

/* SIGINT/SIGTERM (core/stop_signal.h: taken by a thread of their own): the event files' records so far are written
 * at once, on that thread; the loop stops after the step it is in */
static void flush_event_files(int sig) {
    (void)sig;
    tb_writer_flush_all_on_signal();
}


static int every(int interval, int64_t step) { return interval > 0 && step % interval == 0; }

/* The batch just taken from the loader into the model's input. On a GPU it goes to the next staging buffer on the
 * copy stream, which waits only for the step that last read that buffer, so the upload overlaps the step still
 * running; the compute stream then moves it into the input, applying data.augment's flips and rotations there
 * when asked (the loader's workers do those on the CPU path). */
static void upload_batch(Trainer *t, const float *batch, int64_t first) {
    Model *m = t->m;
    const Backend *be = t->be;
    const size_t bytes = (size_t)m->tensors[m->t_input].count * sizeof(float);
    float *input = model_tensor(m, m->t_input);
    if (!t->staging[0]) {
        be->upload_async(input, batch, bytes, NULL); /* the CPU: a copy */
        return;
    }
    const int k = t->staging_next;
    t->staging_next ^= 1;
    be->upload_async(t->staging[k], batch, bytes, t->staging_read[k]); /* pinned slot, copy stream */
    const Dims d = m->tensors[m->t_input].dims;
    const long vol = (long)d.d * d.h * d.w * d.c;
    if (t->cfg->data.augment && dataset_epoch_samples(t->ds) > 0) {
        for (int b = 0; b < m->batch; b++)
            be->augment->apply(d.d, d.h, d.w, d.c, dataset_augment_code(t->ds, first + b), t->staging[k] + b * vol,
                        input + b * vol);
    } else {
        be->elementwise->cast(m->tensors[m->t_input].count, DT_F32, t->staging[k], DT_F32, input); /* a device copy */
    }
    be->event_record(t->staging_read[k]);
}

/* A head's targets of the micro-batch just taken: this rank's labels, or for the Cox loss, which runs over the
 * global batch, every rank's (each rank places its own in a zeroed array and one all-reduce fills in the rest:
 * exact, as every entry is one value plus zeros). */
static void set_targets(Trainer *t, const float *labels) {
    Model *m = t->m;
    const size_t mine = (size_t)m->batch * m->labels;
    if (m->task != TASK_SURVIVAL || t->comm->world == 1) {
        model_set_targets(m, labels);
        return;
    }
    const size_t all = mine * (size_t)t->comm->world;
    if (!t->targets) t->targets = vx_malloc(all * sizeof(float));
    memset(t->targets, 0, all * sizeof(float));
    memcpy(t->targets + mine * (size_t)t->comm->rank, labels, mine * sizeof(float));
    comm_allreduce_host(t->comm, t->targets, all, COMM_SUM, "the survival targets of the global batch");
    model_set_targets(m, t->targets);
}

/* VX_TEST_NONFINITE_GRAD lists step s? (see the file comment) */
static int test_nonfinite_grad(int64_t s) {
    const char *e = getenv("VX_TEST_NONFINITE_GRAD");
    for (const char *p = e; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        char *end;
        if (strtoll(p, &end, 10) == s && (*end == ',' || *end == 0)) return 1;
    }
    return 0;
}

/* Enqueues one optimizer step (see the file comment) and advances t->st past it; its outcome is collected later
 * (stepper_collect). */
static void train_step(Trainer *t) {
    Model *m = t->m;
    const Backend *be = t->be;
    const TrainConfig *cfg = &t->cfg->train;
    const int world = t->comm->world, rank = t->comm->rank;
    const int64_t step1 = t->st.step + 1;
    const double lr = schedule_lr(&t->cur->train, t->st.step - t->cur->first_step) * t->lr_scale;
    const double wait_before = t->loader.wait_seconds;
    stepper_begin(t->stepper, step1);
    for (int micro = 0; micro < cfg->grad_accum; micro++) {
        trace_range_push("data wait", "dataloader");
        const float *batch = loader_next(&t->loader);
        trace_range_pop();
        const int64_t first = t->st.next_sample + (int64_t)rank * m->batch; /* this rank's part */
        trace_range_push("upload batch", "user_annotation");
        upload_batch(t, batch, first);
        if (m->task != TASK_NONE) set_targets(t, loader_labels(&t->loader));
        if (m->cfg.diff.views_given) model_set_views(m, loader_views(&t->loader)); /* data.view_columns' */
        trace_range_pop();
        if (t->samples) fprintf(t->samples, "%lld\t%d\t%lld\t%d\n", (long long)step1, micro, (long long)first, m->batch);
        stepper_micro(t->stepper, micro, first);
        be->upload_wait(); /* the copy has read the loader's slot: only now may the loader refill it */
        loader_release(&t->loader);
        t->st.next_sample += (int64_t)m->batch * world;
    }
    t->wait_s[step1 % 2] = t->loader.wait_seconds - wait_before;
    t->lr[step1 % 2] = lr;
    if (test_nonfinite_grad(step1)) stepper_test_nonfinite_grad(t->stepper);
    trace_range_push("optimizer", "optimizer");
    stepper_end(t->stepper, lr, stop_signal_requested() != 0);
    trace_range_pop();
    t->st.step++;
}

/* ---- the run ------------------------------------------------------------------------------------------------ */

/* The progress line, metrics.jsonl and TensorBoard for the steps since the last log line, at step r->step. */
static void log_progress(Trainer *t, const StepOutcome *r, double ms_window, double wait_window, double comm_window,
                         double slot_window, long window_steps) {
    const TrainConfig *cfg = &t->cfg->train;
    const double dt = ms_window / 1e3 / window_steps, lr = t->lr[r->step % 2];
    const double sps = (double)t->m->batch * cfg->grad_accum * t->comm->world / dt; /* global samples/s */
    const double wait_ms = wait_window * 1e3 / window_steps, comm_ms = comm_window / window_steps;
    const int scaling = strcmp(cfg->loss_scale, "dynamic") == 0;
    const DatasetStats ds = dataset_stats(t->ds); /* rank 0's reads */
    const int bad = ds.skipped > 0 || ds.bad_reads > 0;
    char eta[32], comm[80] = "", scale[64] = "", skipped[80] = "";
    if (bad) snprintf(skipped, sizeof skipped, " | bad volumes %ld (%ld reads moved on)", ds.skipped, ds.bad_reads);
    progress_format_eta(dt * (cfg->steps - r->step), eta, sizeof eta);
    if (t->comm->world > 1)
        snprintf(comm, sizeof comm, isfinite(comm_ms) ? " | comm wait %.1f ms" : " | comm wait in the graphs", comm_ms);
    if (isfinite(slot_window)) /* ZeRO-2 on CPU ranks: backward's waits for staging slots, apart from the above */
        snprintf(comm + strlen(comm), sizeof comm - strlen(comm), " (+ slot wait %.1f ms)", slot_window / window_steps);
    if (scaling) snprintf(scale, sizeof scale, " | loss scale %g (%lld skipped)", r->loss_scale, (long long)r->skipped_total);
    const int diffusion = t->m->family == FAMILY_VIT3D_DIFFUSION, ae = t->m->family == FAMILY_AE3D || diffusion;
    char terms[80] = "";
    if (diffusion) snprintf(terms, sizeof terms, " (diffusion %.6f projection %.6f)", r->recon, r->kl);
    else if (ae) snprintf(terms, sizeof terms, " (recon %.6f kl %.3f)", r->recon, r->kl);
    vx_log("step %5ld/%d | loss %.6f%s | lr %.3e | grad norm %.4f%s | %.2f samples/s | "
           "%.0f ms/step | data wait %.1f ms%s%s | eta %s\n",
           (long)r->step, cfg->steps, r->loss, terms, lr, r->grad_norm, scale, sps, dt * 1e3, wait_ms, comm, skipped,
           eta);
    /* metrics.jsonl and TensorBoard get the same float32 values (9 digits print a float32 exactly); the loss scale
     * and the skipped steps only where dynamic loss scaling runs */
    /* the two terms: ae3d's recon and kl, vit3d_diffusion's diffusion and projection losses */
    const char *const KEYS[] = {"loss", diffusion ? "diffusion" : "recon", diffusion ? "projection" : "kl", "lr", "grad_norm", "samples_per_s", "step_ms",
                                       "data_wait_ms", "comm_wait_ms", "peak_mib", "loss_scale", "skipped_steps"};
    const char *const TAGS[] = {"train/loss", diffusion ? "train/diffusion" : "train/recon",
                                       diffusion ? "train/projection" : "train/kl", "train/lr", "train/grad_norm",
                                       "perf/samples_per_s", "perf/step_ms", "perf/data_wait_ms", "perf/comm_wait_ms",
                                       "memory/peak_mib", "train/loss_scale", "train/skipped_steps"};
    const float values[] = {(float)r->loss, (float)r->recon, (float)r->kl, (float)lr, (float)r->grad_norm,
                            (float)sps, (float)(dt * 1e3), (float)wait_ms, (float)comm_ms,
                            (float)(t->be->peak_bytes() / 1048576.0), (float)r->loss_scale, (float)r->skipped_total};
    const size_t n = sizeof values / sizeof values[0] - (scaling ? 0 : 2);
    fprintf(t->metrics, "{\"step\": %ld", (long)r->step);
    for (size_t i = 0; i < n; i++) {
        if (!ae && (i == 1 || i == 2)) continue; /* the two terms: the autoencoder's and the denoiser's */
        /* JSON has no NaN: a skipped step's gradient norm is written null (TensorBoard takes the NaN) */
        if (isfinite(values[i])) fprintf(t->metrics, ", \"%s\": %.9g", KEYS[i], values[i]);
        else fprintf(t->metrics, ", \"%s\": null", KEYS[i]);
        /* the comm wait is not measured under graphs with ranks (NaN): no point on its curve, rather than a NaN */
        if (isfinite(values[i]) || strcmp(KEYS[i], "comm_wait_ms") != 0)
            train_log_scalar(t->tb, TAGS[i], r->step, values[i]);
    }
    if (isfinite(r->slot_wait_ms)) {
        fprintf(t->metrics, ", \"slot_wait_ms\": %.9g", (float)r->slot_wait_ms);
        train_log_scalar(t->tb, "perf/slot_wait_ms", r->step, (float)r->slot_wait_ms);
    }
    if (bad) { /* data.skip_bad's count, where there is one: the same numbers in all three */
        fprintf(t->metrics, ", \"bad_volumes\": %ld, \"bad_reads\": %ld", ds.skipped, ds.bad_reads);
        train_log_scalar(t->tb, "data/bad_volumes", r->step, (float)ds.skipped);
        train_log_scalar(t->tb, "data/bad_reads", r->step, (float)ds.bad_reads);
    }
    fprintf(t->metrics, "}\n");
    if (fflush(t->metrics) != 0) fs_write_failed("write", "metrics.jsonl in the run directory", errno);
}

/* Opens a file of the run directory for appending, or ends the run (exit 6) saying why. */
static FILE *open_run_file(const char *run_dir, const char *name) {
    char path[CONFIG_STR + 64];
    snprintf(path, sizeof path, "%s/%s", run_dir, name);
    FILE *f = fopen(path, "a");
    if (!f) fs_write_failed("open", path, errno);
    return f;
}

/* Validates everything (device, data headers, the memory plan of every stage, the checkpoint, every data file
 * decoded once), then the ranks meet and agree (rank_agree.h), then rank 0 takes the run directory and writes
 * there; then the ranks start from rank 0's parameters and enter the stage they resume in. */
static void open_run(Trainer *t, const char *config_name, const char *resume_path) {
    Config *cfg = t->cfg;
    dist_detect(&t->env);
    dist_end_on_launcher_sigterm(&t->env); /* (after the event files' flush, registered before) */
    const int world = t->env.world, rank = t->env.rank, rank0 = rank == 0;
    if (world > 1) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "rank %d/%d: ", rank, world);
        vx_set_error_prefix(prefix);
        vx_log_rank = rank;
    }
    TrainConfig *train = &cfg->train;
    const OutputConfig *output = &cfg->output;
    t->lr_scale = train_plan_ranks(train, world);
    int max_size[3] = {cfg->model.input_size[0], cfg->model.input_size[1], cfg->model.input_size[2]};
    for (int k = 0; k < train->n_stages; k++)
        for (int a = 0; a < 3; a++) {
            const Stage st = config_stage(train, cfg->model.input_size, k);
            if (st.input_size[a] > max_size[a]) max_size[a] = st.input_size[a];
        }
    t->ds = dataset_open(&cfg->data, train->seed, cfg->model.in_channels, cfg->model.input_size, max_size, rank0);
    if (config_family_has_head(cfg->model.family)) /* a head's labels; ae3d and vit3d reconstruct */
        dataset_set_labels(t->ds, cfg->model.head.task, cfg->model.head.num_classes, rank0);
    if (cfg->model.head.pos_weight_auto) pos_weight_from_counts(t->ds, &cfg->model.head, rank0);
    /* X-ray views given beside each CT: read from the files, the model renders none (every stage's model is built
     * from cfg->model below) */
    cfg->model.diff.views_given = dataset_set_views(t->ds, cfg->model.diff.img_size, rank0) > 0;
    t->n_stages = train_stages(&cfg->model, train, dataset_epoch_samples(t->ds), world, t->stages);
    train->steps = (int)(t->stages[t->n_stages - 1].first_step + t->stages[t->n_stages - 1].train.steps);
    /* the runtime (device, stage 0's model: what checkpoints are checked against) */
    runtime_open_rank(&t->rt, &t->stages[0].model, &t->stages[0].train, 1, t->env.local_rank, t->env.local_world,
                      world);
    /* the plan's choices for stage 0 are the run's: its accumulation (train.global_batch with an automatic batch) and
     * whether activation checkpointing had to be switched on */
    train->grad_accum = t->stages[0].train.grad_accum;
    train->checkpoint_activations = t->stages[0].train.checkpoint_activations;
    t->m = t->rt.model;
    t->be = t->rt.be;
    for (int k = -1; k < t->n_stages; k++) /* the run's config (config.json) and every stage's say what runs */
        runtime_resolve_precision(k < 0 ? train : &t->stages[k].train, t->be, t->rt.device_reason);
    /* every mode's bytes per rank, and dist.zero auto's choice (written into the config before the ranks compare it) */
    trainer_zero_choose(t);
    trainer_zero_check(&cfg->dist); /* (its refusal came after the run directory was taken, and rewrote config.json) */
    trainer_check_stages(t);
    /* a vit3d whose stages change its patch grid changes its layout (pos_embed), which sharding's shards and the
     * moving of a sharded model between stages (zero_move_to) keep fixed */
    for (int k = 1; k < t->n_stages; k++)
        if (!trainer_stage_keeps_layout(t, k) && zero_stage(&cfg->dist) > 0)
            vx_usage_error("train.stages[%d] changes %s's parameter layout (its positions are resampled to %dx%dx%d's "
                           "patch grid), which sharded data parallelism (dist.zero %s) does not build; use dist.zero 0",
                           k, cfg->model.family, t->stages[k].model.input_size[0], t->stages[k].model.input_size[1],
                           t->stages[k].model.input_size[2], cfg->dist.zero);
    Resume ck = {0};
    /* a checkpoint is read against the model of the stage that wrote it (its positions' grid, for vit3d) */
    const int64_t ck_step = resume_path ? resume_peek_step(resume_path) : -1;
    const int ck_stage = ck_step > 0 && ck_step <= train->steps ? trainer_ckpt_stage(t, ck_step) : 0;
    Model *ck_model = resume_path ? trainer_ckpt_model(t, ck_stage) : NULL;
    if (resume_path) resume_read(resume_path, ck_model, train->steps, &ck);
    /* train.init_from: read and matched here, applied after the seed's initialisation (a checkpoint has it all) */
    WeightsInit init = {0};
    const int init_from = train->init_from[0] && !resume_path;
    if (init_from) weights_read(train->init_from, t->m, train->init_allow, "init-from", rank0, &init);
    else if (train->init_from[0] && rank0)
        vx_log("init-from: not read: the run resumes from %s, which holds its weights\n", resume_path);
    ParamGroups groups; /* train.freeze checked here, before anything is written (the stepper plans them again) */
    param_groups_plan(t->m, train, &groups, 0);
    /* every file decoded once (this rank's share), before any directory exists: damage past a header, a PNG's
     * CRC or non-finite voxels found during training left a run directory behind that blocked the rerun */
    dataset_check_files(t->ds, rank, world, trainer_data_workers(t), rank0);
    stop_signal_honour("the checks before the run", "nothing was written");
    /* the ranks meet, and agree on the device (one line and exit 2 on every rank when they do not), before anything
     * is written: a missing peer or a refused rank leaves no directory */
    t->comm = comm_open(&t->env, strcmp(t->be->name, "cuda") == 0, t->rt.device_reason, cfg->dist.timeout_s);
    /* the first collective, of a fixed size: ranks of different configs or resume states end here (exit 2), not in
     * a bucket all-reduce of another size, and before rank 0 takes the directory */
    rank_agree(t->comm, t->be, cfg, resume_path ? &ck.id : NULL);
    if (rank0) {
        run_dir_take(&cfg->output, config_name, resume_path ? resume_step(&ck) : -1,
                     config_model_fingerprint(&cfg->model), train->seed);
        char path[CONFIG_STR + 64];
        snprintf(path, sizeof path, "%s/config.json", output->dir);
        config_write(cfg, path);
        t->metrics = open_run_file(output->dir, "metrics.jsonl");
        char *json = config_to_json(cfg); /* (TensorBoard shows the resolved config too) */
        t->tb = trainer_open_log(t, json); /* (its HParams metrics: what the family's validation logs) */
        free(json);
        if (t->tb) vx_log("tensorboard: %s (tensorboard --logdir %s)\n", train_log_path(t->tb), output->dir);
    }
    /* a rank that refused to start (rank 0's directory busy, say) ends the run here, not in the first bucket */
    comm_wait(t->comm, comm_barrier(t->comm, "the start of the run"), NULL);
    if (output->sample_log && output->dir[0]) { /* every rank logs what it reads: samples.tsv, samples.rank1.tsv, ... */
        char name[48]; /* (after the barrier: rank 0 has made the directory) */
        snprintf(name, sizeof name, rank0 ? "samples.tsv" : "samples.rank%d.tsv", rank);
        t->samples = open_run_file(output->dir, name);
    }
    if (ck_model) trainer_resume_model(t, ck_stage, ck_model); /* the checkpoint's layout, before it is allocated */
    Model *m = t->m;
    trainer_attach_model(t, m);
    trainer_zero_open(t, m); /* sharded data parallelism: the model's buffers shaped before they exist */
    if (t->zero) t->nonce = train_ckpt_nonce(t->comm);
    if (init_from) { /* after the seed's initialisation; ZeRO's master shard follows below (zero_sync_master) */
        weights_apply(&init, m);
        weights_free(&init);
    }
    if (resume_path) {
        resume_apply(&ck, m, t->zero, &t->st);
        vx_log("resumed: %s (%s checkpoint) at step %ld, sample %lld\n", resume_path, resume_format(&ck),
               (long)t->st.step, (long long)t->st.next_sample);
        resume_free(&ck);
    }
    t->st.world_size = world;
    if (strcmp(t->comm->name, "single") != 0) { /* (VX_COMM runs a communicator for one rank too) */
        char who[160];
        dist_describe(&t->env, who, sizeof who);
        vx_log("ranks: %s, %s communicator; batch %d per rank x %d ranks x %d accumulation = %ld samples per step; "
               "lr x %.3g (train.lr_scaling %s%s)\n", who, t->comm->name, train->batch_size, world, train->grad_accum,
               (long)train->batch_size * world * train->grad_accum, t->lr_scale, train->lr_scaling,
               train->global_batch ? ", not applied with train.global_batch" : "");
        /* every rank starts from rank 0's state, whatever it initialised or read (sharded: each rank's moments are
         * its shard of what every rank read, or zero) */
        float *const state[3] = {m->param, m->adam_m, m->adam_v};
        static const char *const NAME[3] = {"the parameters", "AdamW's first moments", "AdamW's second moments"};
        for (int k = 0; k < (t->zero ? 1 : 3); k++)
            comm_wait(t->comm, comm_broadcast(t->comm, state[k], (size_t)m->param_floats, 0, NAME[k]), NULL);
        if (m->buffer_floats) /* BatchNorm's running statistics too (DDP broadcasts the buffers) */
            comm_wait(t->comm, comm_broadcast(t->comm, m->bufs, (size_t)m->buffer_floats, 0, "the buffers"), NULL);
        if (!t->zero) model_sync_lp(m);
        if (!t->buckets) t->buckets = buckets_plan_model(m, t->comm, cfg->dist.bucket_mb, cfg->dist.first_bucket_mb);
        vx_log("buckets: %d gradient buckets of up to %g MB (the first up to %g MB), %s during backward\n",
               t->buckets->n, cfg->dist.bucket_mb, cfg->dist.first_bucket_mb,
               t->zl.stage >= 2 ? "reduced to their owners (reduce-scatter)" : "all-reduced");
    }
    /* the master shard from the parameters every rank now holds (one rank too: ZeRO-Offload on one GPU keeps its
     * master weights in host memory, which nothing else fills) */
    if (t->zero) zero_sync_master(t->zero);
    trainer_zero_report(t);
    t->stepper = stepper_create(m, train, t->comm, t->buckets);
    stepper_set_zero(t->stepper, t->zero);
    if (resume_path) stepper_set_carry(t->stepper, &t->st.opt);
    t->collected = t->st.step;
    if (rank0) run_dir_write_plan(output->dir); /* (the header's detail: -v prints it) */
    vx_log("run: %s (config.json and the full plan, plan.txt, written there), %d steps, batch %d x %d accumulation\n",
           output->dir, train->steps, m->batch, train->grad_accum);
    const int k = trainer_stage_of(t, t->st.step);
    /* resuming on a stage's first step starts its optimizer afresh, as an uninterrupted run does */
    trainer_enter_stage(t, k, k > 0 && t->st.step == t->stages[k].first_step);
}

/* What the loop keeps between collected steps: the log window and the outcome that asked to stop. */
typedef struct {
    double ms, wait, comm, slot; /* (slot: NaN where not measured) */
    long steps;
    int stopping;
    Heartbeat hb; /* the lines before log_every's first */
} LoopState;

/* One collected step: the divergence checks, the loss scale's news, the running loss and the log window. */
static void handle_outcome(Trainer *t, LoopState *ls, const StepOutcome *r, int rank0) {
    const TrainConfig *cfg = &t->cfg->train;
    if (!isfinite(r->loss)) trainer_diverged(t, r->step, "the loss", r->loss);
    if (r->skipped) {
        if (strcmp(cfg->loss_scale, "dynamic") != 0) trainer_diverged(t, r->step, "the gradient norm", r->grad_norm);
        /* below the floor a float16 loss gradient is zero (optim_loss_scale_floor): end rather than train on it */
        const double least = stepper_loss_scale_floor(t->stepper);
        if (r->loss_scale < least)
            trainer_diverged(t, r->step, least > 0x1p-24 ? "the loss scale (halved at every non-finite gradient, now under the "
                                                   "least at which float16 holds the loss gradient; --amp bf16 has the "
                                                   "range)"
                                                 : "the loss scale (halved at every non-finite gradient)",
                     r->loss_scale);
        vx_log("step %5ld: gradient not finite: update skipped, loss scale now %g (%lld steps skipped so far)\n",
               (long)r->step, r->loss_scale, (long long)r->skipped_total);
    }
    t->st.loss_ema = r->step == 1 ? r->loss : 0.9 * t->st.loss_ema + 0.1 * r->loss;
    t->collected = r->step;
    ls->ms += r->ms;
    ls->wait += t->wait_s[r->step % 2];
    ls->comm += r->comm_wait_ms;
    ls->slot = ls->steps ? ls->slot + r->slot_wait_ms : r->slot_wait_ms;
    ls->steps++;
    const int last = r->step == cfg->steps;
    if (r->step % cfg->log_every == 0 || last) {
        if (rank0) log_progress(t, r, ls->ms, ls->wait, ls->comm, ls->slot, ls->steps);
        heartbeat_stop(&ls->hb);
        ls->ms = ls->wait = ls->comm = 0;
        ls->steps = 0;
    } else if (rank0) {
        heartbeat_step(&ls->hb, r->step, cfg->steps, cfg->log_every, r->loss, r->ms);
    }
    if (r->stop) ls->stopping = 1; /* every rank saw the same flag in the step's all-reduce */
}

/* What the host does with the model right after step s (one table of conditions: the loop drains the steps it ran
 * ahead when any is due, and then does exactly these). Decided from the config alone, so every rank drains at the
 * same steps, though only rank 0 validates, draws, profiles and writes: a rank that drained step s alone would see
 * a stop (or a divergence) one step before the others, leave the loop, and never issue the collectives of step s+1
 * that they had already enqueued (with --compile and ranks: a hang until the watchdog's deadline). `window`: the
 * configured profiler steps (0, 0 for none), the same on every rank. */
enum {
    HOST_VALIDATE = 1 << 0,
    HOST_IMAGES = 1 << 1,
    HOST_HISTOGRAMS = 1 << 2,
    HOST_CHECKPOINT = 1 << 3,
    HOST_BOUNDARY = 1 << 4, /* a stage's or the run's end: the next step may rebuild the model */
    HOST_PROFILE = 1 << 5,  /* a profiled step, or the one before the window: the trace sees each step alone */
};
static int host_work_after(const Trainer *t, const ProfileWindow *window, int64_t s) {
    const TrainConfig *train = &t->cfg->train;
    const OutputConfig *output = &t->cfg->output;
    const int last = s == train->steps;
    const int stage_end = t->stage + 1 < t->n_stages && s == t->stages[t->stage + 1].first_step;
    int work = 0;
    if (last || stage_end) work |= HOST_BOUNDARY;
    if (train->val_samples > 0 && (every(train->val_every, s) || last || stage_end)) work |= HOST_VALIDATE;
    if (every(output->image_every, s)) work |= HOST_IMAGES;
    if (output->tensorboard && every(output->hist_every, s)) work |= HOST_HISTOGRAMS;
    if (every(train->ckpt_every, s) || last) work |= HOST_CHECKPOINT;
    if (window->first > 0 && s + 1 >= window->first && s <= window->last) work |= HOST_PROFILE;
    return work;
}

int train_run(Config *cfg, const char *config_name, const char *resume_path) {
    Trainer t = {.cfg = cfg, .saved_step = -1, .best_metric = -INFINITY};
    /* from here on a signal is a request: honoured after the checks (nothing written) and then at the end of the
     * step it came in (a checkpoint written) */
    stop_signal_catch(1);
    stop_signal_hook(flush_event_files);
    open_run(&t, config_name, resume_path);
    const int rank0 = t.comm->rank == 0;

    ProfileWindow window = {0}, prof = {0};
    if (cfg->output.profile[0]) /* every rank drains around it */
        config_profile_window(&cfg->output, &window.first, &window.last);
    if (rank0) prof = window;                                                       /* rank 0 traces it */
    /* --compile: collect step k while step k+1 runs, unless k needs the host; without it, every step at once */
    const int ahead = cfg->train.compile != 0;
    double t_start = vx_now();
    LoopState ls = {0};
    int exit_code = 0;
    if (t.st.step == 0 && rank0) { /* the untrained baseline that later validations improve on */
        trainer_validate(&t, 0);
        trainer_log_images(&t, 0);
    }
    while (t.st.step < cfg->train.steps && !ls.stopping) {
        if (t.stage + 1 < t.n_stages && t.st.step == t.stages[t.stage + 1].first_step) trainer_enter_stage(&t, t.stage + 1, 1);
        const int64_t step1 = t.st.step + 1;
        profile_step_begin(&prof, cfg->output.dir, &t.rt, step1);
        char step_name[40];
        snprintf(step_name, sizeof step_name, "ProfilerStep#%ld", (long)step1); /* PyTorch's name for a step */
        trace_range_push(step_name, "user_annotation");
        train_step(&t);
        trace_range_pop(); /* ProfilerStep */
        /* the outcomes: the step before this one (running ahead), or everything up to this one */
        const int work = host_work_after(&t, &window, step1);
        const int drain = !ahead || work != 0;
        while (stepper_pending(t.stepper) > (drain ? 0 : 1)) {
            StepOutcome r;
            stepper_collect(t.stepper, &r);
            handle_outcome(&t, &ls, &r, rank0);
        }
        if (!drain) continue;
        trace_buckets(t.buckets);
        /* Validation, images, histograms, checkpoints and trace writing happen outside the steps' timer marks, so
         * they stay out of the step time; they are rank 0's, and none holds a collective. */
        float *grads = NULL; /* ZeRO-2: the gradient shards gathered for the histograms, by every rank */
        if ((work & HOST_HISTOGRAMS) && t.zero && t.zl.stage >= 2) {
            grads = vx_malloc((size_t)t.m->param_floats * sizeof(float));
            zero_gather_grad(t.zero, grads);
        }
        if (rank0) {
            if (work & HOST_VALIDATE) trainer_validate(&t, t.st.step);
            if (work & HOST_IMAGES) trainer_log_images(&t, t.st.step);
            if ((work & HOST_HISTOGRAMS) && t.tb) train_log_histograms(t.tb, t.m, grads, t.st.step);
            if ((work & HOST_CHECKPOINT) && !t.zero) trainer_save_checkpoint(&t, NULL);
        }
        free(grads);
        if (t.zero && (work & HOST_VALIDATE)) trainer_share_pending_checkpoint(&t); /* every rank writes its shard */
        if (t.zero && (work & HOST_CHECKPOINT)) trainer_save_checkpoint(&t, NULL);
        profile_step_end(&prof, t.be, t.st.step, 0);
    }
    while (stepper_pending(t.stepper)) { /* a stop seen one step late: the step after it has run too */
        StepOutcome r;
        stepper_collect(t.stepper, &r);
        handle_outcome(&t, &ls, &r, rank0);
    }
    if (ls.stopping && t.st.step < cfg->train.steps) {
        const int sig = stop_signal_requested() ? stop_signal_requested() : SIGTERM; /* (or another rank's) */
        vx_log("stopping on signal %d (%s) after step %ld\n", sig, stop_signal_name(sig), (long)t.st.step);
        if ((rank0 || t.zero) && t.saved_step != t.st.step) trainer_save_checkpoint(&t, NULL);
        exit_code = VX_EXIT_SIGNAL;
    }
    profile_step_end(&prof, t.be, t.st.step, 1);
    double total = vx_now() - t_start;
    vx_log("done: %ld steps in %.1f s\n", (long)t.st.step, total);
    /* nobody leaves while a rank still writes: the others would see it vanish */
    comm_wait(t.comm, comm_barrier(t.comm, "the end of the run"), NULL);
    loader_stop(&t.loader);
    train_log_close(t.tb, 0);
    if (t.metrics && fclose(t.metrics) != 0) fs_write_failed("write", "metrics.jsonl in the run directory", errno);
    if (t.samples && fclose(t.samples) != 0) fs_write_failed("write", "samples.tsv in the run directory", errno);
    stepper_free(t.stepper);
    zero_free(t.zero);
    buckets_free(t.buckets);
    comm_close(t.comm);
    heldout_free(&t.held);
    free(t.targets);
    trainer_staging_free(&t);
    dataset_close(t.ds);
    runtime_close(&t.rt);
    return exit_code;
}

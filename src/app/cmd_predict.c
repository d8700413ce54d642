/* cmd_predict.c: `voxscale predict --ckpt C | --weights F --data CSV|DIR|FILE --out DIR`: a trained model applied to
 * volumes with the validation transforms (per-volume normalisation, the centred crop of model.input_size, padding),
 * in batches of train.batch_size on the device train would choose, in evaluation mode (BatchNorm's running
 * statistics, no dropout, ae3d's z = mu), or, for vit3d_diffusion, by DDIM sampling from the volume's two views.
 * What it writes is its family's (predict_family.h): predictions.csv and, for ae3d and vit3d_diffusion, NIfTI files. With ranks (mpirun, srun, torchrun) rank r takes volumes r, r + world, ...; their rows are
 * summed into rank 0's table (one value and zeros: exact), which writes predictions.csv in the input's order.
 * Bad input follows training's rules: every volume's header is read, and the weights checked, before anything is
 * written (a missing file, a bad header, a volume smaller than the input without data.pad: one line naming the file
 * and row, exit 2; data.skip_bad leaves them out with a warning); a file found damaged only by decoding it ends the
 * run likewise (the outputs before it complete, no predictions.csv: the rerun in the same --out needs no cleanup),
 * or is left out with data.skip_bad; non-finite voxels follow data.nonfinite. (Training decodes every file once before
 * it writes; predict reads each once, not twice.) Every file is written whole and atomically, and never over anything
 * (core/outguard.h): rank 0 locks --out (its .voxscale.lock, as a run directory's: a second predict there is refused)
 * and refuses, before anything is written, an --out holding any name this predict would write (predictions.csv, each
 * volume's files), unless --overwrite; a name that is one of its inputs (the volumes, --data, the weights, the config)
 * is refused even then. A predict that fails takes the files it wrote back (each rank its own): the rerun in the same
 * --out meets none of them. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli.h"
#include "app/commands.h"
#include "app/predict_family.h"
#include "app/weights_source.h"
#include "core/fsutil.h"
#include "core/outguard.h"
#include "core/stop_signal.h"
#include "core/progress.h"
#include "core/util.h"
#include "elementwise/elementwise.h"
#include "data/manifest.h"
#include "data/resize.h"
#include "data/transform.h"
#include "data/volume.h"
#include "ckpt/ckpt.h"
#include "ckpt/weights.h"
#include "parallel/comm.h"
#include "parallel/launch.h"
#include "train/conv_agree.h"
#include "train/runtime.h"

static const char *HELP =
    "usage: voxscale predict (--ckpt CKPT | --weights FILE.safetensors) --data CSV|DIR|FILE --out DIR\n"
    "                        [--config FILE] [--batch-size N] [--device D] [--threads N] [--amp P] [--set K=V]\n"
    "                        [--sample-steps N] [--sample-seed S] [--overwrite]\n"
    "  applies a trained model to volumes with the validation transforms (normalisation, centred crop of\n"
    "  model.input_size) in evaluation mode. resnet3d: DIR/predictions.csv (path, class probabilities and class,\n"
    "  label probabilities, values, or the survival risk score). ae3d: DIR/<name>_recon.nii.gz and <name>_mu.nii.gz\n"
    "  (the input's header and affine kept) and predictions.csv (path, l1, psnr, the files).\n"
    "  vit3d_diffusion: renders the two views (DRRs) of each input volume as training does, samples a volume from\n"
    "  them with DDIM in diffusion.sample_steps steps (--sample-steps N; the noise from --sample-seed, default\n"
    "  the run's train.seed, and the volume's place in the list) and writes DIR/<name>_sample.nii.gz (the\n"
    "  input's header, the crop's grid) and predictions.csv: the MSE of the sample's DRRs against the views, that of the constant volume at\n"
    "  the input's mean intensity (the baseline), and both volumes' MSE against the input. Views are rendered\n"
    "  from volumes only: DRR images as inputs are not built yet.\n"
    "  --data: a CSV manifest (data.path_column; every row, whatever its split), a folder (data.glob's matches) or\n"
    "  one volume. The config is the checkpoint's run's config.json, or the one voxscale export put in the weights\n"
    "  file, unless --config is given (a file converted from PyTorch needs it); a staged run's checkpoint of a\n"
    "  stage whose model differs from the final one (vit3d) runs at that stage's size. Under mpirun, srun or\n"
    "  torchrun the ranks share the volumes. Bad volumes: exit 2 naming them, or skipped with\n"
    "  --set data.skip_bad=1.\n"
    "  Nothing is overwritten: an --out already holding a file this predict would write is refused (exit 2, before\n"
    "  anything is written) unless --overwrite is given, and an input (a volume, --data, the model, the config) is\n"
    "  never written, --overwrite or not.\n";

/* ---- the volumes ------------------------------------------------------------------------------------------ */

typedef struct {
    Manifest man;
    PredictItem *items;
    int *usable; /* 1: header read and fits; 0: left out (data.skip_bad) */
    int n;
} Inputs;

static int ends_with_ci(const char *s, const char *tail) {
    const size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcasecmp(s + n - t, tail) == 0;
}

/* "scans/ct_001.nii.gz" -> "ct_001": letters, digits, '.', '-', '_' kept, anything else '_' (names in the CSV need
 * no quoting and cannot leave the output folder); a name met before gets its index appended */
static void make_stems(Inputs *in) {
    for (int i = 0; i < in->n; i++) {
        const char *p = in->items[i].path, *slash = strrchr(p, '/');
        char base[CONFIG_STR];
        snprintf(base, sizeof base, "%s", slash && slash[1] ? slash + 1 : p);
        size_t n = strlen(base);
        while (n > 0 && base[n - 1] == '/') base[--n] = 0;
        static const char *const EXT[] = {".nii.gz", ".nii", ".hdr.gz", ".hdr", ".img.gz", ".img", ".jpg", ".jpeg",
                                          ".png"};
        for (size_t e = 0; e < sizeof EXT / sizeof EXT[0]; e++)
            if (ends_with_ci(base, EXT[e])) {
                base[strlen(base) - strlen(EXT[e])] = 0;
                break;
            }
        for (char *c = base; *c; c++)
            if (!isalnum((unsigned char)*c) && *c != '.' && *c != '-' && *c != '_') *c = '_';
        if (!base[0] || base[0] == '.') base[0] = '_';
        char *stem = in->items[i].stem;
        snprintf(stem, CONFIG_STR, "%s", base);
        for (int j = 0; j < i; j++)
            if (strcmp(in->items[j].stem, stem) == 0) {
                snprintf(stem, CONFIG_STR, "%.200s_%d", base, i);
                break;
            }
    }
}

/* Where a volume came from, for error lines: " (list.csv row 4)" or "" */
static const char *row_of(const Inputs *in, int i, char *buf, size_t len) {
    if (in->man.e[i].row > 0) snprintf(buf, len, " (%s row %d)", in->man.origin, in->man.e[i].row);
    else buf[0] = 0;
    return buf;
}

/* A volume that cannot be used: exit 2 naming it, or (data.skip_bad / data.nonfinite=skip) one warning and out */
static void bad(const DataConfig *d, Inputs *in, int i, const char *why, int skip) {
    char row[CONFIG_STR + 64], p[CONFIG_STR];
    vx_escape(in->items[i].path, p, sizeof p);
    if (!d->skip_bad && !skip)
        vx_usage_error("%s%s: %s; fix or remove it, or set data.skip_bad=1 to skip such volumes", p,
                       row_of(in, i, row, sizeof row), why);
    vx_error_line("warning: %s%s: %s; skipped (%s)", p, row_of(in, i, row, sizeof row), why,
                  skip ? "data.nonfinite=skip" : "data.skip_bad");
    in->usable[i] = 0;
}

/* --data as a list: a CSV manifest, a folder (data.glob), or one volume; every header read (exit 2 on a bad one) */
static void list_inputs(const char *data, DataConfig d, const ModelConfig *mc, int64_t seed, Inputs *in) {
    memset(in, 0, sizeof *in);
    char why[512], p[CONFIG_STR];
    int is_dir = 0;
    vx_escape(data, p, sizeof p);
    if (!fs_input_kind(data, 1, &is_dir, why, sizeof why)) vx_usage_error("--data %s: %s", p, why);
    if (is_dir || ends_with_ci(data, ".csv")) {
        snprintf(is_dir ? d.dir : d.csv, CONFIG_STR, "%s", data);
        snprintf(d.source, sizeof d.source, "%s", is_dir ? "dir" : "csv");
        snprintf(d.split_column, sizeof d.split_column, "%s", "\x01"); /* every row: no column is named so */
        d.val_fraction = 0;
        manifest_load(&in->man, &d, seed);
    } else { /* one volume */
        in->man.n = 1;
        in->man.e = vx_calloc(1, sizeof *in->man.e);
        in->man.e[0].path = strdup(data);
        snprintf(in->man.origin, sizeof in->man.origin, "--data");
    }
    in->n = in->man.n;
    if (!is_dir) out_input(data, "--data"); /* (the manifest or the one volume; every volume below) */
    in->items = vx_calloc((size_t)in->n, sizeof *in->items);
    in->usable = vx_malloc((size_t)in->n * sizeof(int));
    for (int i = 0; i < in->n; i++) {
        in->items[i].path = in->man.e[i].path;
        out_input(in->items[i].path, "--data");
        in->items[i].index = i;
        in->usable[i] = 1;
        int dims[4];
        if (!volume_probe(in->items[i].path, mc->in_channels, dims, why, sizeof why)) {
            bad(&d, in, i, why, 0);
            continue;
        }
        resize_target(d.resize, dims[1], dims[2], mc->input_size[1], mc->input_size[2], &dims[1], &dims[2]);
        if (!d.pad && (dims[0] < mc->input_size[0] || dims[1] < mc->input_size[1] || dims[2] < mc->input_size[2])) {
            snprintf(why, sizeof why, "%d x %d x %d is smaller than the input %d x %d x %d and data.pad is 0", dims[0],
                     dims[1], dims[2], mc->input_size[0], mc->input_size[1], mc->input_size[2]);
            bad(&d, in, i, why, 0);
        }
    }
    make_stems(in);
}

/* Decodes volume i into out (the model's input size), as training's validation does: data.nonfinite, then the
 * normalisation, the centred window, padding with the volume's minimum. 0 when it was left out (warned). */
static int load(const DataConfig *d, const ModelConfig *mc, Inputs *in, int i, float *out) {
    Volume v;
    char why[512];
    if (!resize_read(in->items[i].path, mc->in_channels, d->resize, mc->input_size[1], mc->input_size[2], &v, why,
                     sizeof why)) {
        bad(d, in, i, why, 0);
        return 0;
    }
    if (v.nonfinite) {
        const int64_t n = (int64_t)v.d * v.h * v.w * v.c;
        snprintf(why, sizeof why, "%lld of its %lld voxels are not finite (NaN or +-Inf, in the file or beyond "
                 "float32 once scaled by scl_slope)", (long long)v.nonfinite, (long long)n);
        if (strcmp(d->nonfinite, "zero") != 0) {
            volume_free(&v);
            if (strcmp(d->nonfinite, "skip") != 0 && !d->skip_bad) {
                char p[CONFIG_STR], row[CONFIG_STR + 64];
                vx_usage_error("%s%s: %s; fix the file, or set data.nonfinite=zero (they become 0) or skip (the volume "
                               "is left out)", vx_escape(in->items[i].path, p, sizeof p), row_of(in, i, row, sizeof row),
                               why);
            }
            bad(d, in, i, why, strcmp(d->nonfinite, "skip") == 0);
            return 0;
        }
        for (int64_t k = 0; k < n; k++)
            if (!isfinite(v.v[k])) v.v[k] = 0.0f;
        vx_error_line("warning: %s: %s; set to 0 (data.nonfinite=zero)", in->items[i].path, why);
    }
    transform_normalize(&v, d->normalize, d->clip_low, d->clip_high);
    const float pad = transform_min(&v);
    transform_window(&v, mc->input_size, NULL, in->items[i].off);
    transform_crop(&v, in->items[i].off, mc->input_size, pad, out);
    volume_free(&v);
    return 1;
}

/* ---- the run ---------------------------------------------------------------------------------------------- */

static void csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* rank 0: predictions.csv from the gathered rows (column 0 of each: 1 when the volume was predicted) */
static void write_csv(const char *out_dir, const PredictFamily *fam, const Model *m, const Inputs *in,
                      const float *rows, int width, int overwrite) {
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/predictions.csv", out_dir);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) vx_fatal("open_memstream: %s", strerror(errno));
    fputs("path", f);
    fam->header(m, f);
    fputc('\n', f);
    for (int i = 0; i < in->n; i++) {
        const float *r = rows + (long)i * width;
        if (r[0] != 1.0f) continue; /* left out */
        csv_field(f, in->items[i].path);
        fam->format(m, &in->items[i], r + 1, f);
        fputc('\n', f);
    }
    fclose(f);
    out_write(path, text, len, overwrite, "predict --out");
    free(text);
}

/* What check_outputs found so far: how many names exist, the first of them, and why the predict is refused. */
typedef struct {
    int there;
    char first[CONFIG_STR * 2];
    char why[CONFIG_STR * 4 + 600];
} OutputCheck;

/* One name this predict would write in --out: an input is refused at once, an existing file counted. */
static void check_name(const char *out_dir, const char *name, OutputCheck *c) {
    char path[CONFIG_STR * 3], p[600];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    const char *input = out_input_of(path);
    if (input)
        snprintf(c->why, sizeof c->why, "predict --out %s: %s, a file it would write, is this command's input (%s): "
                 "it is never overwritten, --overwrite or not; choose another --out", vx_escape(out_dir, p, sizeof p),
                 name, input);
    else if (out_exists(path) && !c->there++)
        snprintf(c->first, sizeof c->first, "%s", name);
}

/* Rank 0, holding --out's lock, before anything is written there: every name this predict would write
 * (predictions.csv, then each usable volume's files) that is one of its inputs is refused, and without --overwrite
 * every one that exists (the first named). It overwrote <name>_recon/_mu/_sample.nii.gz, and an input volume of
 * --data when --out was the input folder. */
static void check_outputs(const char *out_dir, const PredictFamily *fam, const Inputs *in, int overwrite,
                          OutLock *lock) {
    OutputCheck c = {0};
    char name[CONFIG_STR * 2], p[600];
    check_name(out_dir, "predictions.csv", &c);
    for (int i = 0; i < in->n && !c.why[0]; i++)
        for (int k = 0; in->usable[i] && fam->files[k] && !c.why[0]; k++) {
            snprintf(name, sizeof name, "%s%s", in->items[i].stem, fam->files[k]);
            check_name(out_dir, name, &c);
        }
    if (!c.why[0] && c.there && !overwrite)
        snprintf(c.why, sizeof c.why, "--out %s already holds %s%s: nothing is overwritten; choose another --out, "
                 "move them away, or pass --overwrite to replace them", vx_escape(out_dir, p, sizeof p), c.first,
                 c.there > 1 ? " (and other files this predict would write)" : "");
    if (!c.why[0]) return;
    out_lock_refused(lock); /* (the lock file too, when this predict made it) */
    vx_usage_error("%s", c.why);
}

int cmd_predict(int argc, char **argv) {
    CliArgs a;
    cli_parse_from(argc, argv, &a, HELP,
                   ",config,ckpt,weights,data,out,batch-size,device,threads,amp,set,sample-steps,sample-seed,"
                   "overwrite,",
                   weights_config_source);
    if (!a.ckpt == !a.weights) vx_usage_error("predict: give the model with --ckpt CHECKPOINT or --weights FILE (one)");
    if (!a.data) vx_usage_error("predict: --data CSV|DIR|FILE is required (see --help)");
    if (!a.out) vx_usage_error("predict: --out DIR is required (see --help)");
    Config *cfg = &a.cfg;
    stop_signal_catch(1); /* SIGINT/SIGTERM: exit 130 before the next batch (core/stop_signal.h) */
    if (a.ckpt) weights_ckpt_stage(cfg, a.ckpt, "predict"); /* a stage's best of a staged run: that stage's size */
    DistEnv env;
    dist_detect(&env);
    dist_end_on_launcher_sigterm(&env);
    const int world = env.world, rank = env.rank, rank0 = rank == 0;
    if (world > 1) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "rank %d/%d: ", rank, world);
        vx_set_error_prefix(prefix);
        vx_log_rank = rank;
    }
    char csv[CONFIG_STR + 32];
    snprintf(csv, sizeof csv, "%s/predictions.csv", a.out);
    out_input(a.ckpt, "--ckpt");
    out_input(a.weights, "--weights");
    if (a.config_given) out_input(a.config_path, "--config");
    Inputs in;
    list_inputs(a.data, cfg->data, &cfg->model, cfg->train.seed, &in);
    if (cfg->train.batch_size == 0) cfg->train.batch_size = 1; /* (the automatic batch plans training's memory) */
    cfg->train.inference = 1; /* the plan and the model: the forward's memory only, no gradients or AdamW state */
    Runtime rt;
    runtime_open_rank(&rt, &cfg->model, &cfg->train, rank0, env.local_rank, env.local_world, world);
    Model *m = rt.model;
    const PredictFamily *fam = predict_family(m);
    Ckpt ck = {0};
    WeightsInit wi = {0};
    ckpt_set_reader("--ckpt", "give --ckpt another checkpoint");
    weights_check_ckpt_config(&a, m);
    if (a.ckpt) ckpt_read(a.ckpt, m, (int64_t)CONFIG_MAX_STEPS + 1, &ck);
    else weights_read(a.weights, m, cfg->train.init_allow, "weights", rank0, &wi);
    Comm *comm = comm_open(&env, strcmp(rt.be->name, "cuda") == 0, rt.device_reason, cfg->dist.timeout_s);
    OutLock lock = {.fd = -1};
    if (rank0) { /* its lock held until the end: a second predict into it is refused, not the last writer's */
        fs_mkdirs(a.out);
        out_lock(a.out, "predict --out", &lock);
        check_outputs(a.out, fam, &in, a.overwrite, &lock);
        out_lock_claim(&lock);
    }
    comm_wait(comm, comm_barrier(comm, "the start of predict"), NULL); /* (rank 0 made the folder) */
    out_track(); /* a failed predict takes its files back */
    /* every rank convolves with rank 0's kernels: ranks that timed them at once could choose differently, and a
     * volume's bytes would then depend on the rank it fell to */
    conv_agree(comm, rt.be, m);
    model_allocate(m);
    model_init_params(m, (uint64_t)cfg->train.seed);
    if (a.ckpt) {
        CkptState st;
        ckpt_apply(&ck, m, &st);
        ckpt_free(&ck);
    } else {
        weights_apply(&wi, m);
        weights_free(&wi);
    }
    float *ema = model_ema(m);
    if (ema) { /* a run with train.ema_decay: its weights' moving average is what a diffusion sampler runs (DiT's) */
        rt.be->elementwise->accumulate(DT_F32, m->param_floats, ema, m->param, 0.0f);
        model_sync_lp(m);
        if (rank0) vx_log("predict: with the weights' moving average (train.ema_decay %g)\n", cfg->train.ema_decay);
    }
    if (a.sample_seed >= 0) m->seed = a.sample_seed; /* a sampler's noise (after the checkpoint checked train.seed) */
    const int width = 1 + fam->row_floats(m); /* [predicted, the family's floats] */
    float *rows = vx_calloc((size_t)in.n * width, sizeof(float));
    const long per_batch = m->tensors[m->t_input].count, vol = per_batch / m->batch;
    float *batch = vx_calloc((size_t)per_batch, sizeof(float));
    float *out = vx_malloc((size_t)m->batch * width * sizeof(float));
    PredictItem *items = vx_malloc((size_t)m->batch * sizeof(PredictItem));
    int *index = vx_malloc((size_t)m->batch * sizeof(int));
    int mine = 0, done = 0, left_out = 0;
    for (int i = rank; i < in.n; i += world) mine++;
    vx_log("predict: %d volumes%s, batch %d, from %s\n", in.n, world > 1 ? " shared by the ranks" : "", m->batch,
           a.ckpt ? a.ckpt : a.weights);
    const double t0 = vx_now();
    double last = t0;
    int next = rank;
    while (next < in.n) {
        stop_signal_honour("predict", "the files it wrote are taken back");
        int used = 0;
        for (; next < in.n && used < m->batch; next += world) {
            if (!in.usable[next] || !load(&cfg->data, &cfg->model, &in, next, batch + (long)used * vol)) {
                left_out++;
                continue;
            }
            items[used] = in.items[next];
            index[used++] = next;
        }
        if (used == 0) continue;
        if (used < m->batch) memset(batch + (long)used * vol, 0, (size_t)(m->batch - used) * vol * sizeof(float));
        if (!fam->samples) { /* (a sampler runs its own forwards) */
            rt.be->copy_to_device(model_tensor(m, m->t_input), batch, (size_t)per_batch * sizeof(float));
            model_forward(m, 0);
        }
        const PredictBatch b = {.m = m, .out_dir = a.out, .overwrite = a.overwrite, .items = items, .used = used,
                                .inputs = batch};
        char why[512];
        const int got = fam->batch(&b, out, why, sizeof why);
        if (got <= 0) vx_exit_error(got < 0 ? VX_EXIT_DIVERGED : VX_EXIT_STORAGE, "predict: %s", why);
        for (int k = 0; k < used; k++) {
            float *r = rows + (long)index[k] * width;
            r[0] = 1.0f;
            memcpy(r + 1, out + (long)k * (width - 1), (size_t)(width - 1) * sizeof(float));
        }
        done += used;
        const double now = vx_now();
        if (now - last >= 1.0 || done + left_out == mine) {
            char eta[32];
            const double rate = done / (now - t0);
            progress_format_eta(rate > 0 ? (mine - done - left_out) / rate : 0, eta, sizeof eta);
            vx_log("predict: %d/%d volumes%s | %.2f volumes/s | eta %s\n", done + left_out, mine,
                   world > 1 ? " (rank 0's share)" : "", rate, eta);
            last = now;
        }
    }
    const double secs = vx_now() - t0;
    comm_allreduce_host(comm, rows, (size_t)in.n * width, COMM_SUM, "the predictions");
    int total = 0;
    for (int i = 0; i < in.n; i++) total += rows[(long)i * width] == 1.0f;
    if (rank0) {
        write_csv(a.out, fam, m, &in, rows, width, a.overwrite);
        vx_log("predict: %d volumes in %.1f s (%.2f volumes/s%s)%s -> %s\n", total, secs, done / (secs > 0 ? secs : 1),
               world > 1 ? " on rank 0" : "", total < in.n ? ", the others left out (warned above)" : "", csv);
    }
    comm_wait(comm, comm_barrier(comm, "the end of predict"), NULL);
    out_done(); /* (every rank's files are written: they stay) */
    comm_close(comm);
    free(items);
    free(index);
    free(out);
    free(batch);
    free(rows);
    free(in.items);
    free(in.usable);
    manifest_free(&in.man);
    runtime_close(&rt);
    return 0;
}

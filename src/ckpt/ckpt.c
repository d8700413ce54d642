/* ckpt.c: atomic, checksummed checkpoints, verified field by field on load (see ckpt.h). */
#include "ckpt/ckpt.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <zlib.h>

#include "core/fsutil.h"
#include "core/util.h"
#include "optim/optim.h"

/* The most samples one optimizer step of one rank can consume: the schema's largest batch times accumulation. */
#define CKPT_MAX_SAMPLES_PER_RANK_STEP (4096LL * 1024LL)

static uint32_t crc_of(const unsigned char *p, size_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) { /* zlib's crc32 takes a uInt length: feed it in 1 GiB pieces */
        uInt piece = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, piece);
        p += piece;
        n -= piece;
    }
    return (uint32_t)crc;
}

uint32_t ckpt_crc32(const void *p, size_t n) { return crc_of(p, n); }

CkptExpect ckpt_expect(const Model *m, int64_t steps) {
    return (CkptExpect){.param_count = (uint64_t)m->param_count,
                        .buffer_count = (uint64_t)m->buffer_floats,
                        .model_fingerprint = config_model_fingerprint(&m->cfg),
                        .seed = m->seed,
                        .steps = steps};
}

static size_t file_bytes(size_t header_bytes, uint64_t param_count, uint64_t buffer_count) {
    return header_bytes + (3 * (size_t)param_count + (size_t)buffer_count) * sizeof(float) + sizeof(uint32_t);
}
/* version 2 without buffers (what ae3d's checkpoints have always been), 3 with */
static size_t header_bytes_for(uint64_t buffer_count) { return buffer_count ? sizeof(CkptHeader) : CKPT_V2_HEADER_BYTES; }
size_t ckpt_file_bytes(uint64_t param_count, uint64_t buffer_count) {
    return file_bytes(header_bytes_for(buffer_count), param_count, buffer_count);
}

/* Who reads checkpoints in this process, for the messages: train's --resume by default (ckpt_set_reader). */
static const char *reader_flag = "--resume", *reader_next = "resume from an earlier checkpoint";

void ckpt_set_reader(const char *flag, const char *instead) {
    reader_flag = flag;
    reader_next = instead;
}
const char *ckpt_reader_next(void) { return reader_next; }

void ckpt_verify(const unsigned char *buf, size_t len, const CkptExpect *want, const char *origin, CkptHeader *out) {
    CkptHeader h;
    memset(&h, 0, sizeof h);
    if (len < CKPT_V1_HEADER_BYTES + sizeof(uint32_t) || memcmp(buf, CKPT_MAGIC, 8) != 0)
        vx_usage_error("%s: not a voxscale checkpoint (bad magic or too short)", origin);
    memcpy(&h, buf, CKPT_V1_HEADER_BYTES);
    if (h.version < 1 || h.version > CKPT_VERSION)
        vx_usage_error("%s: checkpoint format version %u is not supported by this build (it reads versions 1 to %d)",
                       origin, h.version, CKPT_VERSION);
    const size_t hb = h.version == 1 ? CKPT_V1_HEADER_BYTES : h.version == 2 ? CKPT_V2_HEADER_BYTES : sizeof h;
    if (h.header_bytes != hb)
        vx_usage_error("%s: checkpoint header says it is %u bytes, version %u headers are %zu: the file is corrupted",
                       origin, h.header_bytes, h.version, hb);
    if (len < hb + sizeof(uint32_t)) vx_usage_error("%s: not a voxscale checkpoint (too short)", origin);
    memcpy(&h, buf, hb);
    /* the size the header implies, computed without overflow before it is compared */
    const uint64_t largest = (SIZE_MAX - hb) / (4 * sizeof(float)) - 1;
    if (h.param_count > largest || h.buffer_count > largest || len != file_bytes(hb, h.param_count, h.buffer_count))
        vx_usage_error("%s: checkpoint is %zu bytes, its header's parameter and buffer counts (%llu, %llu) imply "
                       "another size: the file is truncated or corrupted", origin, len,
                       (unsigned long long)h.param_count, (unsigned long long)h.buffer_count);
    uint32_t stored;
    memcpy(&stored, buf + len - sizeof stored, sizeof stored);
    if (crc_of(buf, len - sizeof stored) != stored)
        vx_usage_error("%s: checkpoint checksum mismatch: the file is corrupted; %s", origin, reader_next);
    /* The checksum only says the bytes are the ones written; every field is still checked before it is used. */
    ckpt_check_header(&h, want, origin);
    if (out) *out = h;
}

void ckpt_check_header(CkptHeader *hp, const CkptExpect *want, const char *origin) {
    CkptHeader h = *hp;
    if (h.param_count != want->param_count || h.buffer_count != want->buffer_count ||
        h.model_fingerprint != want->model_fingerprint) {
        char detail[200];
        if (h.param_count != want->param_count || h.buffer_count != want->buffer_count)
            snprintf(detail, sizeof detail, "%llu parameters and %llu buffer floats in it, %llu and %llu in the "
                     "config's model", (unsigned long long)h.param_count, (unsigned long long)h.buffer_count,
                     (unsigned long long)want->param_count, (unsigned long long)want->buffer_count);
        else /* ("11321 parameters than the config (11321)" said nothing) */
            snprintf(detail, sizeof detail, "the same %llu parameters in another architecture (its model fingerprint "
                     "%016llx, the config's %016llx: the model section's shape keys differ)",
                     (unsigned long long)h.param_count, (unsigned long long)h.model_fingerprint,
                     (unsigned long long)want->model_fingerprint);
        vx_usage_error("%s: checkpoint holds a different model than the config: %s; use the config it was trained "
                       "with", origin, detail);
    }
    if (h.seed != want->seed) {
        if (strcmp(reader_flag, "--resume") == 0)
            vx_usage_error("%s: checkpoint was trained with seed %lld but the config says %lld; pass --seed %lld to "
                           "resume", origin, (long long)h.seed, (long long)want->seed, (long long)h.seed);
        vx_usage_error("%s: checkpoint was trained with seed %lld but the config it is read with says %lld; give it "
                       "the run's config, or --set train.seed=%lld", origin, (long long)h.seed, (long long)want->seed,
                       (long long)h.seed);
    }
    if (h.world_size < 1 || h.world_size > CKPT_MAX_WORLD)
        vx_usage_error("%s: checkpoint says it was written by %lld ranks, outside 1..%d: the file is corrupted", origin,
                       (long long)h.world_size, CKPT_MAX_WORLD);
    if (h.step < 0 || h.step > 1000000000)
        vx_usage_error("%s: checkpoint step %lld is outside 0..1e9 (train.steps' range): the file is corrupted", origin,
                       (long long)h.step);
    if (h.step >= want->steps)
        vx_usage_error("%s: checkpoint is at step %lld, train.steps is %lld: nothing is left to train; pass a larger "
                       "--steps to continue", origin, (long long)h.step, (long long)want->steps);
    /* every step consumed at least one sample and at most the largest batch x accumulation on every rank */
    const double most = (double)h.step * (double)CKPT_MAX_SAMPLES_PER_RANK_STEP * (double)h.world_size;
    if (h.next_sample < h.step || (double)h.next_sample > most)
        vx_usage_error("%s: checkpoint's data position (sample %lld) cannot follow %lld steps of %lld rank(s): the "
                       "file is corrupted", origin, (long long)h.next_sample, (long long)h.step,
                       (long long)h.world_size);
    if (!isfinite(h.loss_ema))
        vx_usage_error("%s: checkpoint's running loss is %g: the file is corrupted", origin, h.loss_ema);
    if (h.version == 1) { /* before the optimizer's state was stored: AdamW counted every step, the scale starts over */
        h.adam_step = h.step;
        h.skipped_steps = h.growth_tracker = 0;
        h.loss_scale = 0;
    }
    int exp2;
    if (h.adam_step < 0 || h.adam_step > h.step || h.skipped_steps < 0 || h.skipped_steps > h.step ||
        h.growth_tracker < 0 || h.growth_tracker > h.step ||
        !(h.loss_scale == 0 || (h.loss_scale > 0 && h.loss_scale <= 3.0e38 && frexp(h.loss_scale, &exp2) == 0.5)))
        vx_usage_error("%s: checkpoint's optimizer state (AdamW step %lld, %lld skipped, loss scale %g after %lld "
                       "good steps) cannot follow %lld steps: the file is corrupted", origin, (long long)h.adam_step,
                       (long long)h.skipped_steps, h.loss_scale, (long long)h.growth_tracker, (long long)h.step);
    *hp = h;
}

CkptId ckpt_id(const Ckpt *c) {
    CkptId id = {.step = c->header.step, .next_sample = c->header.next_sample};
    memcpy(&id.crc, c->file + c->bytes - sizeof id.crc, sizeof id.crc);
    return id;
}

void ckpt_read(const char *path, const Model *m, int64_t steps, Ckpt *out) {
    memset(out, 0, sizeof *out);
    const CkptExpect want = ckpt_expect(m, steps); /* the run's steps, over all its stages */
    /* one byte more than a checkpoint of this model can hold: a longer file is refused by size, not read whole */
    const size_t most = ckpt_file_bytes(want.param_count, want.buffer_count);
    unsigned char *buf = (unsigned char *)fs_read_file(path, most + 1, &out->bytes);
    /* (a version 1 checkpoint is shorter: its header lacks the optimizer state) */
    if (!buf) {
        if (errno == EFBIG)
            vx_usage_error("%s: larger than a checkpoint of this model (%zu bytes): not a checkpoint of it; use the "
                           "config it was trained with", path, most);
        vx_usage_error("%s: cannot read the checkpoint (%s); check the path given to %s", path, strerror(errno),
                       reader_flag);
    }
    out->file = buf;
    ckpt_verify(buf, out->bytes, &want, path, &out->header);
}

void ckpt_apply(const Ckpt *c, Model *m, CkptState *st) {
    const size_t pbytes = (size_t)c->header.param_count * sizeof(float);
    float *const dst[3] = {m->param, m->adam_m, m->adam_v};
    const unsigned char *data = c->file + c->header.header_bytes;
    for (int k = 0; k < 3; k++) /* (a model built for inference has no AdamW state to take the moments) */
        if (dst[k]) model_upload_packed(m, (const float *)(data + k * pbytes), dst[k]);
    if (c->header.buffer_count) model_upload_buffers(m, (const float *)(data + 3 * pbytes));
    model_sync_lp(m);
    st->step = c->header.step;
    st->next_sample = c->header.next_sample;
    st->loss_ema = c->header.loss_ema;
    st->opt = (OptimCarry){.loss_scale = c->header.loss_scale, .adam_step = c->header.adam_step,
                           .skipped_steps = c->header.skipped_steps, .growth_tracker = c->header.growth_tracker};
}

void ckpt_unpack(const Ckpt *c, const Model *m, float *param, float *adam_m, float *adam_v, float *bufs, CkptState *st) {
    const size_t pbytes = (size_t)c->header.param_count * sizeof(float);
    float *const dst[3] = {param, adam_m, adam_v};
    const unsigned char *data = c->file + c->header.header_bytes;
    float *packed = vx_malloc(pbytes ? pbytes : 1); /* (the file's bytes need not be float-aligned) */
    for (int k = 0; k < 3; k++) {
        if (!dst[k]) continue;
        memcpy(packed, data + k * pbytes, pbytes);
        model_unpack_params(m, packed, dst[k]);
    }
    free(packed);
    if (bufs && c->header.buffer_count) memcpy(bufs, data + 3 * pbytes, c->header.buffer_count * sizeof(float));
    if (st) {
        st->step = c->header.step;
        st->next_sample = c->header.next_sample;
        st->loss_ema = c->header.loss_ema;
        st->world_size = c->header.world_size;
        st->opt = (OptimCarry){.loss_scale = c->header.loss_scale, .adam_step = c->header.adam_step,
                               .skipped_steps = c->header.skipped_steps, .growth_tracker = c->header.growth_tracker};
    }
}

void ckpt_free(Ckpt *c) {
    free(c->file);
    memset(c, 0, sizeof *c);
}

/* Index of the first non-finite value of x[n], or -1. */
static long first_nonfinite(const float *x, long n) {
    for (long i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

unsigned char *ckpt_bytes(const CkptContent *c, size_t *len) {
    const size_t pbytes = (size_t)c->param_count * sizeof(float);
    const uint64_t nbuf = c->buffer_count;
    const size_t total = ckpt_file_bytes(c->param_count, nbuf), hb = header_bytes_for(nbuf);
    const CkptState *st = &c->st;
    unsigned char *buf = vx_malloc(total);
    CkptHeader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = nbuf ? 3 : 2;
    h.header_bytes = (uint32_t)hb;
    h.buffer_count = nbuf;
    h.param_count = c->param_count;
    h.model_fingerprint = c->model_fingerprint;
    h.step = st->step;
    h.next_sample = st->next_sample;
    h.seed = c->seed;
    h.world_size = st->world_size > 0 ? st->world_size : 1;
    h.loss_ema = st->loss_ema;
    h.adam_step = st->opt.adam_step;
    h.skipped_steps = st->opt.skipped_steps;
    h.growth_tracker = st->opt.growth_tracker;
    h.loss_scale = st->opt.loss_scale;
    memcpy(buf, &h, hb);
    /* the packed layout: the file does not depend on the device buffers' alignment padding */
    const float *const src[3] = {c->param, c->adam_m, c->adam_v};
    static const char *const WHAT[3] = {"parameter", "AdamW first moment", "AdamW second moment"};
    for (int k = 0; k < 3; k++) {
        const long bad = first_nonfinite(src[k], (long)c->param_count);
        if (bad >= 0) {
            const double value = src[k][bad];
            free(buf);
            vx_exit_error(VX_EXIT_DIVERGED, "training diverged: %s %ld is %g after step %lld, so no checkpoint is "
                          "written (the last one stays); lower train.lr or set train.grad_clip", WHAT[k], bad, value,
                          (long long)st->step);
        }
        memcpy(buf + hb + k * pbytes, src[k], pbytes);
    }
    if (nbuf) {
        const long bad = first_nonfinite(c->bufs, (long)nbuf);
        if (bad >= 0) {
            const double value = c->bufs[bad];
            free(buf);
            vx_exit_error(VX_EXIT_DIVERGED, "training diverged: buffer value %ld (a BatchNorm running statistic) is %g "
                          "after step %lld, so no checkpoint is written (the last one stays); lower train.lr",
                          bad, value, (long long)st->step);
        }
        memcpy(buf + hb + 3 * pbytes, c->bufs, (size_t)nbuf * sizeof(float));
    }
    uint32_t crc = crc_of(buf, total - sizeof crc);
    memcpy(buf + total - sizeof crc, &crc, sizeof crc);
    *len = total;
    return buf;
}

void ckpt_write(const char *path, const CkptContent *c) {
    size_t len;
    unsigned char *buf = ckpt_bytes(c, &len);
    fs_write_atomic(path, buf, len);
    free(buf);
}

void ckpt_save(const char *path, const Model *m, const CkptState *st) {
    const size_t pbytes = (size_t)m->param_count * sizeof(float);
    float *packed[3];
    float *const src[3] = {m->param, m->adam_m, m->adam_v};
    for (int k = 0; k < 3; k++) {
        packed[k] = vx_malloc(pbytes ? pbytes : 1);
        model_download_packed(m, src[k], packed[k]);
    }
    float *bufs = vx_malloc((size_t)(m->buffer_floats ? m->buffer_floats : 1) * sizeof(float));
    model_download_buffers(m, bufs);
    const CkptContent c = {.param_count = (uint64_t)m->param_count, .buffer_count = (uint64_t)m->buffer_floats,
                           .model_fingerprint = config_model_fingerprint(&m->cfg), .seed = m->seed, .st = *st,
                           .param = packed[0], .adam_m = packed[1], .adam_v = packed[2], .bufs = bufs};
    ckpt_write(path, &c);
    for (int k = 0; k < 3; k++) free(packed[k]);
    free(bufs);
}

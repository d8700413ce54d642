/* ckpt.c: atomic, checksummed checkpoints (see ckpt.h). */
#include "ckpt.h"

#include <errno.h>
#include <string.h>
#include <zlib.h>

#include "fsutil.h"
#include "util.h"

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

void ckpt_save(const char *path, const Model *m, const CkptState *st) {
    size_t pbytes = (size_t)m->param_count * sizeof(float);
    size_t total = sizeof(CkptHeader) + 3 * pbytes + sizeof(uint32_t);
    unsigned char *buf = vx_malloc(total);
    CkptHeader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = CKPT_VERSION;
    h.header_bytes = sizeof h;
    h.param_count = (uint64_t)m->param_count;
    h.model_fingerprint = config_model_fingerprint(&m->cfg);
    h.step = st->step;
    h.next_sample = st->next_sample;
    h.seed = m->cfg.seed;
    h.world_size = 1;
    h.loss_ema = st->loss_ema;
    memcpy(buf, &h, sizeof h);
    /* the packed layout: the file does not depend on the device buffers' alignment padding */
    const float *const src[3] = {m->param, m->adam_m, m->adam_v};
    for (int k = 0; k < 3; k++) model_download_packed(m, src[k], (float *)(buf + sizeof h + k * pbytes));
    uint32_t crc = crc_of(buf, total - sizeof crc);
    memcpy(buf + total - sizeof crc, &crc, sizeof crc);
    fs_write_atomic(path, buf, total);
    free(buf);
}

void ckpt_load(const char *path, Model *m, CkptState *st) {
    size_t len = 0;
    unsigned char *buf = (unsigned char *)fs_read_file(path, &len);
    if (!buf) vx_usage_error("%s: cannot read the checkpoint (%s); check the path given to --resume", path, strerror(errno));
    CkptHeader h;
    if (len < sizeof h + sizeof(uint32_t) || memcmp(buf, CKPT_MAGIC, 8) != 0)
        vx_usage_error("%s: not a voxscale checkpoint (bad magic or too short)", path);
    memcpy(&h, buf, sizeof h);
    if (h.version != CKPT_VERSION || h.header_bytes != sizeof h)
        vx_usage_error("%s: checkpoint version %u is not supported by this build (expects %d)", path, h.version, CKPT_VERSION);
    size_t pbytes = (size_t)h.param_count * sizeof(float);
    size_t want = sizeof h + 3 * pbytes + sizeof(uint32_t);
    if (len != want)
        vx_usage_error("%s: checkpoint is %zu bytes, its header says %zu: the file is truncated or corrupted", path, len, want);
    uint32_t stored;
    memcpy(&stored, buf + len - sizeof stored, sizeof stored);
    if (crc_of(buf, len - sizeof stored) != stored)
        vx_usage_error("%s: checkpoint checksum mismatch: the file is corrupted; resume from an earlier checkpoint", path);
    if ((long)h.param_count != m->param_count || h.model_fingerprint != config_model_fingerprint(&m->cfg))
        vx_usage_error("%s: checkpoint holds a different model (%llu parameters) than the config (%ld); "
                       "use the config it was trained with",
                       path, (unsigned long long)h.param_count, m->param_count);
    if (h.seed != m->cfg.seed)
        vx_usage_error("%s: checkpoint was trained with seed %lld but the config says %lld; pass --seed %lld to resume",
                       path, (long long)h.seed, (long long)m->cfg.seed, (long long)h.seed);
    float *const dst[3] = {m->param, m->adam_m, m->adam_v};
    for (int k = 0; k < 3; k++) model_upload_packed(m, (const float *)(buf + sizeof h + k * pbytes), dst[k]);
    st->step = h.step;
    st->next_sample = h.next_sample;
    st->loss_ema = h.loss_ema;
    free(buf);
}

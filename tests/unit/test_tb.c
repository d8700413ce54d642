/* test_tb.c: unit tests of the TensorBoard event writer: CRC-32C (both paths), TFRecord framing and the strict
 * reader on damaged files, event file naming and buffering, signal/exit flushing, histograms and PNG encoding.
 * Event contents are checked by unpacking them with the same protoc-c code; tests/integration checks them
 * against TensorBoard itself. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "core/util.h"

#include "tb/crc32c.h"
#include "tb/histogram.h"
#include "tb/png_encode.h"
#include "tb/proto/event.pb-c.h"
#include "tb/proto/hparams_plugin_data.pb-c.h"
#include "tb/tb_writer.h"
#include "tb/tfrecord.h"

/* ---- helpers ------------------------------------------------------------------------------------------------ */

static char *path_join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_file(const char *path, const uint8_t *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static off_t file_size(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* Unpacked events of a file, collected by the strict reader. */
typedef struct {
    Vxtb__Event *ev[256];
    size_t offsets[257]; /* offsets[i]: where record i starts; offsets[n]: end of the last good record */
    size_t n;
} Events;

static int collect_event(const uint8_t *data, size_t n, void *ctx) {
    Events *e = ctx;
    assert_true(e->n < 256);
    e->ev[e->n] = vxtb__event__unpack(NULL, n, data);
    assert_non_null(e->ev[e->n]);
    e->n++;
    e->offsets[e->n] = e->offsets[e->n - 1] + n + TFRECORD_OVERHEAD;
    return 0;
}

static TfRecordScan read_events(const char *path, Events *e) {
    memset(e, 0, sizeof *e);
    TfRecordScan s;
    assert_int_equal(tfrecord_scan_file(path, collect_event, e, &s), 0);
    assert_int_equal(s.records, e->n);
    return s;
}

static void free_events(Events *e) {
    for (size_t i = 0; i < e->n; i++) vxtb__event__free_unpacked(e->ev[i], NULL);
    e->n = 0;
}

static const Vxtb__Summary__Value *event_value(const Events *e, size_t i) {
    assert_true(i < e->n);
    assert_int_equal(e->ev[i]->what_case, VXTB__EVENT__WHAT_SUMMARY);
    assert_int_equal(e->ev[i]->summary->n_value, 1);
    return e->ev[i]->summary->value[0];
}

/* ---- CRC-32C ------------------------------------------------------------------------------------------------ */

typedef uint32_t (*CrcFn)(uint32_t, const void *, size_t);

static void check_vectors(CrcFn fn) {
    uint8_t zeros[32] = {0}, ones[32], up[32], down[32];
    for (int i = 0; i < 32; i++) {
        ones[i] = 0xff;
        up[i] = (uint8_t)i;
        down[i] = (uint8_t)(31 - i);
    }
    /* RFC 3720 (iSCSI) appendix B.4 and the common "123456789" check value. */
    assert_int_equal(fn(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(fn(0, zeros, 32), 0x8A9136AAu);
    assert_int_equal(fn(0, ones, 32), 0x62A8AB43u);
    assert_int_equal(fn(0, up, 32), 0x46DD794Eu);
    assert_int_equal(fn(0, down, 32), 0x113FDB5Cu);
    assert_int_equal(fn(0, "", 0), 0u);
    /* Extending in two pieces equals one pass. */
    assert_int_equal(fn(fn(0, "1234", 4), "56789", 5), 0xE3069283u);
}

static void test_crc32c_vectors_table(void **state) {
    (void)state;
    check_vectors(crc32c_extend_sw);
}

static void test_crc32c_vectors_hardware(void **state) {
    (void)state;
    if (!crc32c_hw_available()) skip();
    check_vectors(crc32c_extend_hw);
    assert_int_equal(crc32c("123456789", 9), 0xE3069283u);
}

static void test_crc32c_paths_agree(void **state) {
    (void)state;
    if (!crc32c_hw_available()) skip();
    enum { MAX = 4096 + 64 };
    uint8_t *buf = malloc(MAX);
    for (size_t i = 0; i < MAX; i++) buf[i] = (uint8_t)rng_u32();
    /* Every length up to 300 at every alignment 0..15 (the hardware path changes stride at 8 and 4 bytes),
     * then some long random slices. */
    for (size_t align = 0; align < 16; align++)
        for (size_t len = 0; len <= 300; len++)
            assert_int_equal(crc32c_extend_hw(0, buf + align, len), crc32c_extend_sw(0, buf + align, len));
    for (int k = 0; k < 200; k++) {
        size_t off = rng_u32() % 64, len = rng_u32() % 4096;
        uint32_t seed = rng_u32();
        assert_int_equal(crc32c_extend_hw(seed, buf + off, len), crc32c_extend_sw(seed, buf + off, len));
    }
    free(buf);
}

static void test_crc32c_mask(void **state) {
    (void)state;
    /* Expected values from TensorBoard's own Python implementation (tensorflow_stub masked_crc32c). */
    assert_int_equal(crc32c_mask(crc32c("123456789", 9)), 0xc78ab0e5u);
    uint8_t zero_len[8] = {0};
    assert_int_equal(crc32c_mask(crc32c(zero_len, 8)), 0x07980329u);
    for (int k = 0; k < 1000; k++) {
        uint32_t c = rng_u32();
        assert_int_equal(crc32c_unmask(crc32c_mask(c)), c);
        assert_int_not_equal(crc32c_mask(c), c);
    }
}

/* ---- TFRecord ----------------------------------------------------------------------------------------------- */

static void test_tfrecord_round_trip(void **state) {
    char *path = path_join(*state, "records");
    size_t lens[] = {0, 1, 7, 1000, 70000};
    size_t total = 0;
    for (size_t i = 0; i < 5; i++) total += lens[i] + TFRECORD_OVERHEAD;
    uint8_t *file = malloc(total), *data = malloc(70000);
    for (size_t i = 0; i < 70000; i++) data[i] = (uint8_t)rng_u32();
    size_t off = 0;
    for (size_t i = 0; i < 5; i++) off += tfrecord_frame(file + off, data, lens[i]);
    assert_int_equal(off, total);
    write_file(path, file, total);

    size_t pos = 0, n, i = 0;
    const uint8_t *rec;
    TfRecordStatus st;
    while ((st = tfrecord_next(file, total, &pos, &rec, &n)) == TFRECORD_OK) {
        assert_int_equal(n, lens[i]);
        if (n) assert_memory_equal(rec, data, n);
        i++;
    }
    assert_int_equal(st, TFRECORD_END);
    assert_int_equal(i, 5);

    TfRecordScan s;
    assert_int_equal(tfrecord_scan_file(path, NULL, NULL, &s), 0);
    assert_int_equal(s.records, 5);
    assert_int_equal(s.good_bytes, total);
    assert_int_equal(s.stop, TFRECORD_END);
    free(file);
    free(data);
    free(path);
}

/* Writes an event file with a few scalars and returns its path and record offsets. */
static char *write_sample_events(const char *dir, Events *e) {
    TbWriter *w;
    assert_int_equal(tb_writer_open(&w, dir, NULL), TB_OK);
    for (int step = 0; step < 6; step++) assert_int_equal(tb_writer_add_scalar(w, "loss", step, 1.0 / (step + 1), 0), 0);
    char *path = strdup(tb_writer_path(w));
    assert_int_equal(tb_writer_close(w), TB_OK);
    TfRecordScan s = read_events(path, e);
    assert_int_equal(s.stop, TFRECORD_END);
    assert_int_equal(e->n, 7);
    return path;
}

static void test_tfrecord_damaged_files(void **state) {
    Events e;
    char *path = write_sample_events(*state, &e);
    size_t len;
    uint8_t *orig = read_file(path, &len);
    assert_int_equal(len, e.offsets[e.n]);
    char *copy = path_join(*state, "damaged");
    TfRecordScan s;
    Events got;

    /* Truncated inside record 4 (in its header, data and footer), and exactly at its start. */
    size_t r4 = e.offsets[4], r5 = e.offsets[5];
    size_t cuts[] = {r4 + 3, r4 + TFRECORD_HEADER_BYTES + 2, r5 - 1};
    for (size_t k = 0; k < 3; k++) {
        write_file(copy, orig, cuts[k]);
        s = read_events(copy, &got);
        assert_int_equal(s.records, 4);
        assert_int_equal(s.good_bytes, r4);
        assert_int_equal(s.stop, TFRECORD_TRUNCATED);
        free_events(&got);
    }
    write_file(copy, orig, r4);
    s = read_events(copy, &got);
    assert_int_equal(s.records, 4);
    assert_int_equal(s.stop, TFRECORD_END);
    free_events(&got);

    /* Zero-filled from record 3 on (what a file system can leave after a crash), and zeros appended. */
    uint8_t *buf = malloc(len + 64);
    memcpy(buf, orig, len);
    memset(buf + e.offsets[3], 0, len - e.offsets[3]);
    write_file(copy, buf, len);
    s = read_events(copy, &got);
    assert_int_equal(s.records, 3);
    assert_int_equal(s.good_bytes, e.offsets[3]);
    assert_int_equal(s.stop, TFRECORD_BAD_LENGTH_CRC);
    free_events(&got);
    memcpy(buf, orig, len);
    memset(buf + len, 0, 64);
    write_file(copy, buf, len + 64);
    s = read_events(copy, &got);
    assert_int_equal(s.records, 7);
    assert_int_equal(s.stop, TFRECORD_BAD_LENGTH_CRC);
    free_events(&got);

    /* One flipped bit in record 2's data, then in its length. */
    memcpy(buf, orig, len);
    buf[e.offsets[2] + TFRECORD_HEADER_BYTES + 3] ^= 0x10;
    write_file(copy, buf, len);
    s = read_events(copy, &got);
    assert_int_equal(s.records, 2);
    assert_int_equal(s.good_bytes, e.offsets[2]);
    assert_int_equal(s.stop, TFRECORD_BAD_DATA_CRC);
    free_events(&got);
    memcpy(buf, orig, len);
    buf[e.offsets[2] + 1] ^= 0x01;
    write_file(copy, buf, len);
    s = read_events(copy, &got);
    assert_int_equal(s.records, 2);
    assert_int_equal(s.stop, TFRECORD_BAD_LENGTH_CRC);
    free_events(&got);

    free(buf);
    free(orig);
    free(copy);
    free(path);
    free_events(&e);
}

/* ---- event file --------------------------------------------------------------------------------------------- */

static void test_writer_file_name_and_first_record(void **state) {
    char *run = path_join(*state, "runs/exp1"); /* parents are created */
    TbWriter *w;
    assert_int_equal(tb_writer_open(&w, run, NULL), TB_OK);
    const char *path = tb_writer_path(w);
    char host[256];
    gethostname(host, sizeof host);
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/events.out.tfevents.", run);
    assert_int_equal(strncmp(path, prefix, strlen(prefix)), 0);
    const char *rest = path + strlen(prefix);
    for (int i = 0; i < 10; i++) assert_true(rest[i] >= '0' && rest[i] <= '9');
    char tail[512];
    snprintf(tail, sizeof tail, ".%s.%ld.0", host, (long)getpid());
    assert_string_equal(rest + 10, tail);
    /* The version record is on disk as soon as the writer is open. */
    Events e;
    read_events(path, &e);
    assert_int_equal(e.n, 1);
    assert_int_equal(e.ev[0]->what_case, VXTB__EVENT__WHAT_FILE_VERSION);
    assert_string_equal(e.ev[0]->file_version, "brain.Event:2");
    assert_true(e.ev[0]->wall_time > 1.5e9);
    free_events(&e);
    tb_writer_close(w);
    free(run);
}

static void test_writer_never_appends(void **state) {
    TbWriter *w;
    assert_int_equal(tb_writer_open(&w, *state, NULL), TB_OK);
    tb_writer_add_scalar(w, "a", 1, 1.0, 0);
    char *first = strdup(tb_writer_path(w));
    tb_writer_close(w);
    size_t len1;
    uint8_t *before = read_file(first, &len1);

    /* A restart in the same second: same time, host and pid, so only the counter tells the files apart. */
    assert_int_equal(tb_writer_open(&w, *state, NULL), TB_OK);
    assert_string_not_equal(tb_writer_path(w), first);
    tb_writer_add_scalar(w, "a", 2, 2.0, 0);
    tb_writer_close(w);
    size_t len2;
    uint8_t *after = read_file(first, &len2);
    assert_int_equal(len1, len2);
    assert_memory_equal(before, after, len1);
    free(before);
    free(after);
    free(first);
}

static void test_writer_one_per_directory(void **state) {
    TbWriter *w, *w2;
    assert_int_equal(tb_writer_open(&w, *state, NULL), TB_OK);
    assert_int_equal(tb_writer_open(&w2, *state, NULL), TB_ERR_BUSY);
    tb_writer_close(w);
    assert_int_equal(tb_writer_open(&w2, *state, NULL), TB_OK);
    tb_writer_close(w2);
}

static void test_writer_bad_arguments(void **state) {
    TbWriter *w;
    assert_int_equal(tb_writer_open(NULL, *state, NULL), TB_ERR_ARG);
    assert_int_equal(tb_writer_open(&w, NULL, NULL), TB_ERR_ARG);
    assert_int_equal(tb_writer_open(&w, "", NULL), TB_ERR_ARG);
    assert_int_equal(tb_writer_open(&w, *state, NULL), TB_OK);
    uint8_t px[12] = {0};
    float v[2] = {1, 2};
    assert_int_equal(tb_writer_add_scalar(NULL, "x", 0, 1, 0), TB_ERR_ARG);
    assert_int_equal(tb_writer_add_scalar(w, "", 0, 1, 0), TB_ERR_ARG);
    assert_int_equal(tb_writer_add_scalar(w, NULL, 0, 1, 0), TB_ERR_ARG);
    assert_int_equal(tb_writer_add_image(w, "img", 0, px, 2, 2, 2), TB_ERR_ARG);
    assert_int_equal(tb_writer_add_image(w, "img", 0, px, 0, 2, 3), TB_ERR_ARG);
    assert_int_equal(tb_writer_add_image(w, "img", 0, NULL, 2, 2, 3), TB_ERR_ARG);
    assert_int_equal(tb_writer_add_histogram(w, "h", 0, v, 0), TB_ERR_ARG);
    assert_int_equal(tb_writer_add_histogram(w, "h", 0, NULL, 2), TB_ERR_ARG);
    assert_int_equal(tb_writer_add_text(w, "t", 0, NULL), TB_ERR_ARG);
    TbHParam dup[2] = {TB_HPARAM_NUM("lr", 1), TB_HPARAM_NUM("lr", 2)};
    assert_int_equal(tb_writer_add_hparams(w, dup, 2, NULL, 0), TB_ERR_ARG);
    TbHParam nostr = TB_HPARAM_STR("opt", NULL);
    assert_int_equal(tb_writer_add_hparams(w, &nostr, 1, NULL, 0), TB_ERR_ARG);
    assert_int_equal(tb_writer_end_session(w, TB_SESSION_SUCCESS), TB_ERR_STATE);
    assert_int_equal(tb_writer_close(NULL), TB_ERR_ARG);
    char *path = strdup(tb_writer_path(w));
    tb_writer_close(w);
    /* The rejected calls wrote nothing: the file holds the version record only. */
    Events e;
    read_events(path, &e);
    assert_int_equal(e.n, 1);
    free_events(&e);
    free(path);
}

static void test_writer_buffers_until_flush(void **state) {
    TbWriter *w;
    TbWriterOptions opts = {.flush_secs = 1000};
    assert_int_equal(tb_writer_open(&w, *state, &opts), TB_OK);
    off_t empty = file_size(tb_writer_path(w));
    tb_writer_add_scalar(w, "x", 1, 1.0, 0);
    assert_int_equal(file_size(tb_writer_path(w)), empty);
    assert_int_equal(tb_writer_flush(w), TB_OK);
    assert_true(file_size(tb_writer_path(w)) > empty);

    /* flush_secs elapsed: the next add writes through. */
    TbWriter *w2;
    char *dir2 = path_join(*state, "fast");
    opts.flush_secs = 0.05;
    assert_int_equal(tb_writer_open(&w2, dir2, &opts), TB_OK);
    off_t base = file_size(tb_writer_path(w2));
    usleep(60000);
    tb_writer_add_scalar(w2, "x", 1, 1.0, 0);
    assert_true(file_size(tb_writer_path(w2)) > base);
    tb_writer_close(w2);
    tb_writer_close(w);
    free(dir2);
}

/* A child buffers records (flush_secs far away) and dies by a signal (how > 0), exit() (0) or vx_exit_now (-1);
 * the records must be on disk. */
static void run_child_and_check(const char *dir, int how) {
    char path_file[4096];
    snprintf(path_file, sizeof path_file, "%s/path.txt", dir);
    fflush(NULL); /* or the child's exit() would print the parent's buffered output a second time */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        TbWriter *w;
        TbWriterOptions opts = {.flush_secs = 1000};
        if (tb_writer_open(&w, dir, &opts) != TB_OK) _exit(10);
        FILE *f = fopen(path_file, "w");
        fprintf(f, "%s", tb_writer_path(w));
        fclose(f);
        for (int i = 0; i < 20; i++) tb_writer_add_scalar(w, "loss", i, i * 0.5, 0);
        if (how == 0) exit(0); /* no close: the atexit flush must save the records */
        if (how == -1) vx_exit_now(3); /* the quick way out after an aborted collective: at_quick_exit's flush */
        /* the signal's default first: the writer gives an inherited disposition back after its flush, and a run
         * started in the background without job control (nohup, `cmd &` in a script) inherits SIGINT ignored, where
         * the re-raised signal would not end the child */
        signal(how, SIG_DFL);
        tb_writer_install_signal_handlers();
        raise(how);
        _exit(11); /* not reached: the re-raised signal ends the child */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (how <= 0) {
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), how == 0 ? 0 : 3);
    } else {
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), how);
    }
    size_t len;
    char *path = (char *)read_file(path_file, &len);
    path[len] = '\0';
    Events e;
    TfRecordScan s = read_events(path, &e);
    assert_int_equal(s.stop, TFRECORD_END);
    assert_int_equal(e.n, 21);
    assert_float_equal(event_value(&e, 20)->simple_value, 9.5, 0);
    free_events(&e);
    free(path);
    unlink(path_file);
}

static void test_writer_flushes_on_signal_and_exit(void **state) {
    char *d1 = path_join(*state, "term"), *d2 = path_join(*state, "int"), *d3 = path_join(*state, "exit");
    char *d4 = path_join(*state, "quick");
    run_child_and_check(d1, SIGTERM);
    run_child_and_check(d2, SIGINT);
    run_child_and_check(d3, 0);
    run_child_and_check(d4, -1); /* vx_exit_now: no atexit handlers, but the records still reach the disk */
    free(d1);
    free(d2);
    free(d3);
    free(d4);
}

/* ---- event contents ----------------------------------------------------------------------------------------- */

static void test_writer_scalars_and_text(void **state) {
    TbWriter *w;
    assert_int_equal(tb_writer_open(&w, *state, NULL), TB_OK);
    assert_int_equal(tb_writer_add_scalar(w, "loss", 0, 0.0, 1234.5), TB_OK);
    assert_int_equal(tb_writer_add_scalar(w, "loss", 1, 0.25, 0), TB_OK);
    assert_int_equal(tb_writer_add_scalar(w, "lr", -3, 1e-3, 0), TB_OK);
    assert_int_equal(tb_writer_add_text(w, "notes", 5, "# hi\n*md*"), TB_OK);
    assert_int_equal(tb_writer_add_text(w, "notes", 6, ""), TB_OK);
    char *path = strdup(tb_writer_path(w));
    tb_writer_close(w);

    Events e;
    read_events(path, &e);
    assert_int_equal(e.n, 6);
    /* A zero scalar is still present: simple_value sits in a oneof, which proto3 always writes. */
    const Vxtb__Summary__Value *v = event_value(&e, 1);
    assert_string_equal(v->tag, "loss");
    assert_int_equal(v->value_case, VXTB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
    assert_true(v->simple_value == 0.0f);
    assert_true(e.ev[1]->wall_time == 1234.5);
    assert_int_equal(e.ev[1]->step, 0);
    assert_non_null(v->metadata);
    assert_string_equal(v->metadata->plugin_data->plugin_name, "scalars");
    assert_int_equal(v->metadata->data_class, VXTB__DATA_CLASS__DATA_CLASS_SCALAR);
    v = event_value(&e, 2);
    assert_true(v->simple_value == 0.25f);
    assert_null(v->metadata); /* metadata only with a tag's first value */
    v = event_value(&e, 3);
    assert_int_equal(e.ev[3]->step, -3);
    assert_true(v->simple_value == 1e-3f);
    assert_non_null(v->metadata);

    v = event_value(&e, 4);
    assert_int_equal(v->value_case, VXTB__SUMMARY__VALUE__VALUE_TENSOR);
    assert_int_equal(v->tensor->dtype, VXTB__DATA_TYPE__DT_STRING);
    assert_int_equal(v->tensor->n_string_val, 1);
    assert_int_equal(v->tensor->string_val[0].len, strlen("# hi\n*md*"));
    assert_memory_equal(v->tensor->string_val[0].data, "# hi\n*md*", strlen("# hi\n*md*"));
    assert_string_equal(v->metadata->plugin_data->plugin_name, "text");
    v = event_value(&e, 5);
    assert_int_equal(v->tensor->n_string_val, 1);
    assert_int_equal(v->tensor->string_val[0].len, 0);
    free_events(&e);
    free(path);
}

static void test_writer_hparams(void **state) {
    TbWriter *w;
    assert_int_equal(tb_writer_open(&w, *state, NULL), TB_OK);
    TbHParam hp[] = {TB_HPARAM_NUM("lr", 3e-4), TB_HPARAM_NUM("zero", 0), TB_HPARAM_STR("optimizer", "adamw"),
                     TB_HPARAM_BOOL("amp", false)};
    const char *metrics[] = {"loss/train", "loss/val"};
    assert_int_equal(tb_writer_add_hparams(w, hp, 4, metrics, 2), TB_OK);
    assert_int_equal(tb_writer_add_hparams(w, hp, 4, metrics, 2), TB_ERR_STATE);
    char *path = strdup(tb_writer_path(w));
    tb_writer_close(w);

    Events e;
    read_events(path, &e);
    assert_int_equal(e.n, 4);
    const char *tags[] = {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"};
    Vxtb__HParamsPluginData *pd[3];
    for (int i = 0; i < 3; i++) {
        const Vxtb__Summary__Value *v = event_value(&e, 1 + i);
        assert_string_equal(v->tag, tags[i]);
        assert_string_equal(v->metadata->plugin_data->plugin_name, "hparams");
        assert_int_equal(v->value_case, VXTB__SUMMARY__VALUE__VALUE_TENSOR);
        assert_int_equal(v->tensor->dtype, VXTB__DATA_TYPE__DT_FLOAT);
        const ProtobufCBinaryData *c = &v->metadata->plugin_data->content;
        pd[i] = vxtb__hparams_plugin_data__unpack(NULL, c->len, c->data);
        assert_non_null(pd[i]);
        assert_int_equal(pd[i]->version, 0);
    }
    assert_int_equal(pd[0]->data_case, VXTB__HPARAMS_PLUGIN_DATA__DATA_EXPERIMENT);
    Vxtb__Experiment *x = pd[0]->experiment;
    assert_int_equal(x->n_hparam_infos, 4);
    assert_string_equal(x->hparam_infos[2]->name, "optimizer");
    assert_int_equal(x->hparam_infos[2]->type, VXTB__HPARAM_DATA_TYPE__DATA_TYPE_STRING);
    assert_int_equal(x->hparam_infos[3]->type, VXTB__HPARAM_DATA_TYPE__DATA_TYPE_BOOL);
    assert_int_equal(x->n_metric_infos, 2);
    assert_string_equal(x->metric_infos[1]->name->tag, "loss/val");

    assert_int_equal(pd[1]->data_case, VXTB__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO);
    Vxtb__SessionStartInfo *s = pd[1]->session_start_info;
    assert_int_equal(s->n_hparams, 4);
    assert_string_equal(s->hparams[0]->key, "lr");
    assert_true(s->hparams[0]->value->number_value == 3e-4);
    /* 0 and false keep their kind (oneof), or the dashboard would show them as missing. */
    assert_int_equal(s->hparams[1]->value->kind_case, VXTB__VALUE__KIND_NUMBER_VALUE);
    assert_string_equal(s->hparams[2]->value->string_value, "adamw");
    assert_int_equal(s->hparams[3]->value->kind_case, VXTB__VALUE__KIND_BOOL_VALUE);
    assert_false(s->hparams[3]->value->bool_value);

    assert_int_equal(pd[2]->data_case, VXTB__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO);
    assert_int_equal(pd[2]->session_end_info->status, VXTB__STATUS__STATUS_SUCCESS);
    for (int i = 0; i < 3; i++) vxtb__hparams_plugin_data__free_unpacked(pd[i], NULL);
    free_events(&e);
    free(path);
}

/* ---- histograms --------------------------------------------------------------------------------------------- */

static void test_histogram_counts(void **state) {
    (void)state;
    enum { N = 10000 };
    float *v = malloc(N * sizeof *v);
    size_t nonfinite = 0;
    for (int i = 0; i < N; i++) {
        v[i] = (float)((int)(rng_u32() % 20001) - 10000) * 1e-3f;
        if (i % 97 == 0) v[i] = NAN, nonfinite++;
        else if (i % 89 == 0) v[i] = (i & 1) ? INFINITY : -INFINITY, nonfinite++;
        else if (i % 83 == 0) v[i] = 0.0f;
    }
    TbHistogram h;
    assert_int_equal(tb_histogram_build(&h, v, N), 0);
    assert_int_equal(h.nonfinite, nonfinite);
    assert_true(h.num == (double)(N - nonfinite));
    double total = 0;
    for (size_t i = 0; i < h.n_buckets; i++) {
        total += h.counts[i];
        if (i) assert_true(h.limits[i] > h.limits[i - 1]);
        if (i) assert_false(h.counts[i] == 0 && h.counts[i - 1] == 0); /* empty runs are merged */
    }
    assert_true(total == h.num);
    assert_true(h.n_buckets < 1000);

    /* Recount by brute force against the merged edges: bucket i is [limits[i-1], limits[i]). */
    double min = INFINITY, max = -INFINITY, sum = 0;
    for (size_t b = 0; b < h.n_buckets; b++) {
        double lo = b ? h.limits[b - 1] : -INFINITY, hi = h.limits[b], c = 0;
        for (int i = 0; i < N; i++)
            if (isfinite(v[i]) && v[i] >= lo && v[i] < hi) c++;
        assert_true(c == h.counts[b]);
    }
    for (int i = 0; i < N; i++) {
        if (!isfinite(v[i])) continue;
        min = fmin(min, v[i]);
        max = fmax(max, v[i]);
        sum += v[i];
    }
    assert_true(h.min == min && h.max == max);
    assert_float_equal(h.sum, sum, 1e-6);
    tb_histogram_free(&h);

    /* Only non-finite values: an empty histogram. */
    float bad[3] = {NAN, INFINITY, -INFINITY};
    assert_int_equal(tb_histogram_build(&h, bad, 3), 0);
    assert_int_equal(h.nonfinite, 3);
    assert_true(h.num == 0);
    double t = 0;
    for (size_t i = 0; i < h.n_buckets; i++) t += h.counts[i];
    assert_true(t == 0);
    tb_histogram_free(&h);

    size_t n;
    const double *lim = tb_histogram_default_limits(&n);
    assert_true(n > 1500 && n < 1600);
    assert_true(lim[n / 2 - 1] == 0.0 || lim[n / 2] == 0.0);
    free(v);
}

static void test_writer_histogram_nonfinite(void **state) {
    TbWriter *w;
    assert_int_equal(tb_writer_open(&w, *state, NULL), TB_OK);
    float clean[4] = {1, 2, 3, 4}, dirty[5] = {1, NAN, 2, INFINITY, 3};
    assert_int_equal(tb_writer_add_histogram(w, "w", 0, clean, 4), 0);
    assert_int_equal(tb_writer_add_histogram(w, "w", 1, dirty, 5), 2);
    assert_int_equal(tb_writer_add_histogram(w, "w", 2, clean, 4), 0);
    char *path = strdup(tb_writer_path(w));
    tb_writer_close(w);

    Events e;
    read_events(path, &e);
    /* version, histo 0, histo 1 + nonfinite 2, histo 2 + nonfinite 0 (logged from the first non-finite on) */
    assert_int_equal(e.n, 6);
    const Vxtb__Summary__Value *v = event_value(&e, 2);
    assert_int_equal(v->value_case, VXTB__SUMMARY__VALUE__VALUE_HISTO);
    double total = 0;
    for (size_t i = 0; i < v->histo->n_bucket; i++) total += v->histo->bucket[i];
    assert_true(total == 3 && v->histo->num == 3);
    assert_int_equal(v->histo->n_bucket, v->histo->n_bucket_limit);
    v = event_value(&e, 3);
    assert_string_equal(v->tag, "w/nonfinite");
    assert_true(v->simple_value == 2.0f);
    v = event_value(&e, 5);
    assert_string_equal(v->tag, "w/nonfinite");
    assert_true(v->simple_value == 0.0f);
    free_events(&e);
    free(path);
}

/* ---- PNG ---------------------------------------------------------------------------------------------------- */

static void check_png_round_trip(int width, int height, int channels) {
    size_t n = (size_t)width * height * channels;
    uint8_t *px = malloc(n);
    for (size_t i = 0; i < n; i++) px[i] = (uint8_t)(i * 7 + (i / 3) * 13);
    uint8_t *png;
    size_t png_len;
    assert_int_equal(tb_png_encode(px, width, height, channels, &png, &png_len), 0);
    assert_memory_equal(png, "\x89PNG\r\n\x1a\n", 8);

    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_memory(&img, png, png_len));
    assert_int_equal(img.width, (png_uint_32)width);
    assert_int_equal(img.height, (png_uint_32)height);
    img.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    uint8_t *out = malloc(PNG_IMAGE_SIZE(img));
    assert_int_equal(PNG_IMAGE_SIZE(img), n);
    assert_true(png_image_finish_read(&img, NULL, out, 0, NULL));
    assert_memory_equal(out, px, n);
    free(out);
    free(png);
    free(px);
}

static void test_png_round_trip(void **state) {
    (void)state;
    check_png_round_trip(1, 1, 1);
    check_png_round_trip(37, 19, 1);
    check_png_round_trip(64, 48, 3);
    uint8_t *png;
    size_t len;
    uint8_t px[4] = {0};
    assert_int_equal(tb_png_encode(px, 2, 1, 2, &png, &len), -1);
    assert_int_equal(tb_png_encode(px, 0, 1, 1, &png, &len), -1);
    assert_int_equal(tb_png_encode(NULL, 1, 1, 1, &png, &len), -1);
}

static void test_writer_image(void **state) {
    TbWriter *w;
    assert_int_equal(tb_writer_open(&w, *state, NULL), TB_OK);
    uint8_t px[6 * 4 * 3];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 5);
    assert_int_equal(tb_writer_add_image(w, "recon", 3, px, 6, 4, 3), TB_OK);
    char *path = strdup(tb_writer_path(w));
    tb_writer_close(w);
    Events e;
    read_events(path, &e);
    const Vxtb__Summary__Value *v = event_value(&e, 1);
    assert_int_equal(v->value_case, VXTB__SUMMARY__VALUE__VALUE_IMAGE);
    assert_int_equal(v->image->width, 6);
    assert_int_equal(v->image->height, 4);
    assert_int_equal(v->image->colorspace, 3);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_memory(&img, v->image->encoded_image_string.data,
                                                 v->image->encoded_image_string.len));
    img.format = PNG_FORMAT_RGB;
    uint8_t out[sizeof px];
    assert_true(png_image_finish_read(&img, NULL, out, 0, NULL));
    assert_memory_equal(out, px, sizeof px);
    free_events(&e);
    free(path);
}

/* A description rides on the tag's first value only (an image's with the images plugin and its data class, so that
 * TensorBoard's data server keeps it); describing a tag that has a value already is refused. */
static void test_writer_describe(void **state) {
    TbWriter *w;
    assert_int_equal(tb_writer_open(&w, *state, NULL), TB_OK);
    uint8_t px[2 * 2] = {0, 64, 128, 255};
    assert_int_equal(tb_writer_describe(w, "grid", "rows: input, reconstruction"), TB_OK);
    assert_int_equal(tb_writer_describe(w, "val/auroc", "macro one-vs-rest"), TB_OK);
    assert_int_equal(tb_writer_add_image(w, "grid", 0, px, 2, 2, 1), TB_OK);
    assert_int_equal(tb_writer_add_image(w, "grid", 1, px, 2, 2, 1), TB_OK);
    assert_int_equal(tb_writer_add_image(w, "plain", 0, px, 2, 2, 1), TB_OK);
    assert_int_equal(tb_writer_add_scalar(w, "val/auroc", 0, 0.5, 0), TB_OK);
    assert_int_equal(tb_writer_describe(w, "grid", "too late"), TB_ERR_STATE);
    assert_int_equal(tb_writer_describe(w, NULL, "x"), TB_ERR_ARG);
    char *path = strdup(tb_writer_path(w));
    tb_writer_close(w);
    Events e;
    read_events(path, &e);
    const Vxtb__Summary__Value *first = event_value(&e, 1), *second = event_value(&e, 2), *plain = event_value(&e, 3);
    assert_non_null(first->metadata);
    assert_string_equal(first->metadata->summary_description, "rows: input, reconstruction");
    assert_string_equal(first->metadata->plugin_data->plugin_name, "images");
    assert_int_equal(first->metadata->data_class, VXTB__DATA_CLASS__DATA_CLASS_BLOB_SEQUENCE);
    assert_null(second->metadata);
    assert_null(plain->metadata); /* an image without a description stays as it was */
    assert_string_equal(event_value(&e, 4)->metadata->summary_description, "macro one-vs-rest");
    free_events(&e);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors_table),
        cmocka_unit_test(test_crc32c_vectors_hardware),
        cmocka_unit_test(test_crc32c_paths_agree),
        cmocka_unit_test(test_crc32c_mask),
        cmocka_unit_test_setup_teardown(test_tfrecord_round_trip, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_tfrecord_damaged_files, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_file_name_and_first_record, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_never_appends, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_one_per_directory, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_bad_arguments, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_buffers_until_flush, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_flushes_on_signal_and_exit, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_scalars_and_text, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_hparams, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test(test_histogram_counts),
        cmocka_unit_test_setup_teardown(test_writer_histogram_nonfinite, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test(test_png_round_trip),
        cmocka_unit_test_setup_teardown(test_writer_image, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_describe, tmpdir_setup, tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

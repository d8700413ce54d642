/* test_safetensors.c: the safetensors reader and writer (core/safetensors.h): a written file read back (names,
 * dtypes, shapes, metadata, data 8-byte aligned), float16 / bfloat16 / float64 widened exactly, and each kind of
 * damage refused with exit 2 (header length, JSON, text after it, dtype, shape against bytes, overlap, a hole,
 * out of the file, a name twice). The files the reference implementation writes are read in
 * tests/integration/test_safetensors.py. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/safetensors.h"
#include "core/util.h"

static jmp_buf jmp;
static void exit_to_test(int code) { longjmp(jmp, code == 0 ? 256 : code); }

/* st_parse of a file made of header text + `data` bytes of zeros: its exit code (0 when accepted) */
static int parse_code(const char *header, size_t data) {
    const size_t hl = strlen(header), len = 8 + hl + data;
    unsigned char *buf = calloc(1, len);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    StFile f;
    memset(&f, 0, sizeof f);
    vx_set_exit_handler(exit_to_test);
    int code = setjmp(jmp);
    if (code == 0) st_parse(buf, len, "t.safetensors", &f);
    vx_set_exit_handler(NULL);
    st_free(&f);
    free(buf);
    return code;
}

static void test_roundtrip(void **state) {
    (void)state;
    StWriter *w = st_writer_new();
    const float a[6] = {1, -2, 3.5f, 0, 1e-30f, 65504};
    const int64_t sa[2] = {2, 3}, sb[1] = {3}, s0[1] = {0};
    const uint16_t half[3] = {0x3C00, 0xC000, 0x0001}; /* 1, -2, the smallest subnormal */
    const uint16_t bf[3] = {0x3F80, 0x4049, 0xFF80};   /* 1, 3.140625, -inf */
    const int64_t n = 7;
    st_writer_meta(w, "format", "pt");
    st_writer_add(w, "layer.weight", ST_F32, 2, sa, a);
    st_writer_add(w, "h", ST_F16, 1, sb, half);
    st_writer_add(w, "b", ST_BF16, 1, sb, bf);
    st_writer_add(w, "empty", ST_F32, 1, s0, NULL);
    st_writer_add(w, "bn.num_batches_tracked", ST_I64, 0, NULL, &n);
    size_t len;
    unsigned char *buf = st_writer_bytes(w, &len);
    st_writer_free(w);
    StFile f;
    st_parse(buf, len, "mem", &f);
    assert_int_equal(f.n, 5);
    assert_int_equal(f.data_at % 8, 0);
    assert_string_equal(st_meta(&f, "format"), "pt");
    const StTensor *t = st_find(&f, "layer.weight");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[1], 3);
    float out[6];
    st_to_f32(&f, t, out);
    assert_memory_equal(out, a, sizeof a);
    st_to_f32(&f, st_find(&f, "h"), out);
    assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0x1p-24f);
    st_to_f32(&f, st_find(&f, "b"), out);
    assert_true(out[0] == 1.0f && out[1] == 3.140625f && out[2] == -INFINITY);
    const StTensor *c = st_find(&f, "bn.num_batches_tracked");
    assert_int_equal(c->dtype, ST_I64);
    assert_int_equal(c->ndim, 0);
    assert_int_equal(st_count(c), 1);
    assert_null(st_find(&f, "nope"));
    st_free(&f);
    free(buf);
}

static void test_refused(void **state) {
    (void)state;
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    assert_int_equal(parse_code(ok, 8), 0);
    assert_int_equal(parse_code("{}", 0), 0);
    assert_int_equal(parse_code(ok, 12), 2);                                  /* bytes after the last tensor */
    assert_int_equal(parse_code(ok, 4), 2);                                   /* the tensor ends past the file */
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8), 2);
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}  ", 8), 2);
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8), 2);
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8), 2);
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8), 2);
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8), 2);
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8), 2);
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8), 2);
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8), 2);
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12), 2); /* overlap */
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", 16), 2); /* a hole */
    assert_int_equal(parse_code("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8), 2); /* twice */
    assert_int_equal(parse_code("{\"__metadata__\":{\"k\":1}}", 0), 2);
    assert_int_equal(parse_code("[1]", 0), 2);
    assert_int_equal(parse_code("{\"a\":", 0), 2);
    assert_int_equal(parse_code("{\"\xff\":{}}", 0), 2); /* not UTF-8 */
    /* a header length beyond the file */
    unsigned char tiny[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    StFile f;
    vx_set_exit_handler(exit_to_test);
    int code = setjmp(jmp);
    if (code == 0) st_parse(tiny, sizeof tiny, "t", &f);
    if (code == 0) code = setjmp(jmp) == 0 ? (st_parse(tiny, 5, "t", &f), 0) : 2;
    vx_set_exit_handler(NULL);
    assert_int_equal(code, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_refused)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_trace_cxx.c: trace.h must stay usable from C++: mk/trace.mk compiles this file as CUDA C++ with nvcc in CUDA
 * builds (where trace.h also pulls in NVTX) and as C++ with the host compiler otherwise. The test records ranges
 * through the inline push/pop from C++ and checks that the trace file appears. (tmpdir.h is C only, so the test
 * makes and removes its own directory.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" { /* cmocka.h declares its functions without C linkage for C++ */
#include <cmocka.h>
}

#include "trace/trace.h"

#ifndef __cplusplus
#error "test_trace_cxx.c is compiled as C++ (see mk/trace.mk)"
#endif

static void test_trace_from_cxx(void **) {
    char dir[] = "/tmp/voxscale_test_cxx.XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(trace_begin(dir, 0), TRACE_OK);
    trace_range_push("outer", "cxx");
    trace_range_push("inner", "cxx");
    trace_range_pop();
    trace_range_pop();
    assert_true(trace_now_us() > 0);
    assert_int_equal(trace_end(), TRACE_OK);
    const char *path = trace_last_file();
    assert_true(strstr(path, ".pt.trace.json.gz") != nullptr);
    assert_int_equal(access(path, R_OK), 0);
    char traces[4096];
    snprintf(traces, sizeof traces, "%s/traces", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(traces), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_trace_from_cxx)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* fuzz_harness.h: what the libFuzzer targets of voxscale share (tests/fuzz/fuzz_*.c, built and run by ci/fuzz.sh).
 * voxscale ends on bad input (vx_usage_error -> vx_exit(2)); inside a target vx_exit longjmps back instead, so a
 * refused input is an ordinary outcome and the fuzzer goes on. What must never happen is a crash, a sanitizer
 * report, a hang, or an internal error: vx_fatal (exit 1) on input that is merely bad aborts here, so libFuzzer
 * keeps the input as a finding. Error messages go to stderr, which ci/fuzz.sh closes (-close_fd_mask). */
#pragma once
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/util.h"

static jmp_buf fuzz_jmp;

static void fuzz_exit(int code) {
    if (code == VX_EXIT_FAIL) abort(); /* an internal error on bad input is a bug */
    longjmp(fuzz_jmp, code == 0 ? 256 : code);
}

/* Runs `body` with voxscale's exits caught; evaluates to 0 when body returned, else the exit code (256 for 0). */
#define FUZZ_CATCH(body)                                                                                      \
    ({                                                                                                        \
        vx_set_exit_handler(fuzz_exit);                                                                       \
        int fuzz_code_ = setjmp(fuzz_jmp);                                                                    \
        if (fuzz_code_ == 0) { body; }                                                                        \
        vx_set_exit_handler(NULL);                                                                            \
        fuzz_code_;                                                                                           \
    })

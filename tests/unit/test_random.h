/* test_random.h: random inputs for the op tests: a splitmix64 stream with a fixed seed per test file (define
 * TEST_RNG_SEED before including; include after cmocka.h), and float buffers filled from it. */
#pragma once
#include <stdint.h>
#include <stdlib.h>

static uint64_t test_rng = TEST_RNG_SEED;

static double urand(void) { /* uniform [0, 1) from splitmix64 */
    test_rng += 0x9E3779B97F4A7C15ull;
    uint64_t z = test_rng;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}

static float *fnew(long n) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    assert_non_null(p);
    return p;
}

static float *frand(long n, double lo, double hi) {
    float *p = fnew(n);
    for (long i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * urand());
    return p;
}

/* test_select.h: the command line of the GPU tests: `--list` prints their names and fnmatch patterns choose which
 * run, so that ci/gpu can run each test in its own process (under compute-sanitizer, with its own time limit). */
#pragma once
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

/* Fills chosen (room for n_all) with the tests that argv's patterns match, all of them without patterns, and sets
 * *n. Returns -1 when those tests should run, or the exit code: 0 after `--list`, 2 when no test matches. */
static inline int select_tests(const char *prog, int argc, char **argv, const struct CMUnitTest *all, size_t n_all,
                               struct CMUnitTest *chosen, size_t *n) {
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n_all; i++) printf("%s\n", all[i].name);
        return 0;
    }
    *n = 0;
    for (size_t i = 0; i < n_all; i++) {
        int match = argc < 2;
        for (int a = 1; a < argc && !match; a++) match = fnmatch(argv[a], all[i].name, 0) == 0;
        if (match) chosen[(*n)++] = all[i];
    }
    if (*n == 0) {
        fprintf(stderr, "%s: no test matches the given patterns; --list prints the names\n", prog);
        return 2;
    }
    return -1;
}

/* tmpdir.h: cmocka setup/teardown that give each test a fresh temporary directory as its state and remove it
 * (recursively) afterwards. Header-only: each unit test binary includes it once. */
#pragma once
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int tmpdir_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int tmpdir_setup(void **state) {
    char *dir = strdup("/tmp/voxscale_test.XXXXXX");
    if (!dir || !mkdtemp(dir)) return -1;
    *state = dir;
    return 0;
}

static int tmpdir_teardown(void **state) {
    nftw(*state, tmpdir_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(*state);
    return 0;
}

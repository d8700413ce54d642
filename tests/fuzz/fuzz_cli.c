/* fuzz_cli.c: the command-line parser (cli_parse with train's options): the input is split at NUL bytes into
 * arguments. Runs from the repository root, so the default config and --config paths of the seed corpus resolve;
 * inputs naming device files are skipped (/dev/stdin would wait for input, which no user's command line does
 * unnoticed). Every input must parse or be refused with exit 2 (--help exits 0). */
#include <string.h>

#include "app/cli.h"
#include "fuzz_harness.h"

#define MAX_ARGS 32

static const char *const ALLOWED =
    ",config,steps,batch-size,lr,device,seed,threads,out,resume,set,help-config,profile,deterministic,gpus,lr-scaling,";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    char *argv[MAX_ARGS + 2] = {"train"};
    int argc = 1;
    for (char *p = text; p < text + size && argc <= MAX_ARGS; p += strlen(p) + 1) argv[argc++] = p;
    for (int i = 1; i < argc; i++)
        if (strstr(argv[i], "/dev") || strstr(argv[i], "/proc") || strstr(argv[i], "/sys")) {
            free(text);
            return 0;
        }
    argv[argc] = NULL;
    static CliArgs a; /* static: the longjmp of a refused input must not leave it in a dead frame */
    const int code = FUZZ_CATCH(cli_parse(argc, argv, &a, "", ALLOWED));
    if (code != 0 && code != VX_EXIT_USAGE && code != 256) abort();
    free(text);
    return 0;
}

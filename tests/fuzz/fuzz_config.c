/* fuzz_config.c: the config reader (config_parse_text: JSON syntax, the schema table, ranges, cross-key checks).
 * Every input must be accepted or refused with exit 2; an accepted config must survive a round trip through the
 * resolved-config writer unchanged (what config.json promises: it is itself a valid config of the same run). */
#include <string.h>

#include "core/config.h"
#include "fuzz_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Config cfg, again;
    const int code = FUZZ_CATCH(config_parse_text(&cfg, (const char *)data, size, "fuzz.json"));
    if (code != 0) {
        if (code != VX_EXIT_USAGE) abort();
        return 0;
    }
    char *json = config_to_json(&cfg);
    if (FUZZ_CATCH(config_parse_text(&again, json, strlen(json), "resolved")) != 0) abort();
    char *json2 = config_to_json(&again);
    if (strcmp(json, json2) != 0) abort();
    free(json);
    free(json2);
    return 0;
}

/* build_version.c: see build_version.h. The only file besides app/version.c that reads vx_build_info.h, which the
 * Makefile rewrites only when the build's facts change (a new commit recompiles these two and relinks). */
#include "core/build_version.h"

#include "vx_build_info.h"

const char *build_version(void) { return VX_VERSION; }

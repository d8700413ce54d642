/* build_version.h: the commit this binary was built from, as the build recorded it ($(BUILD)/gen/vx_build_info.h):
 * `git describe --always --dirty` of the tree at build time, VX_VERSION's value, or "unknown" (a copy without .git).
 * Low in the layers so that results (bench's JSON "commit") name the binary that produced them, not the checkout
 * the command happens to run in. */
#pragma once

/* "2453eb1", "2453eb1-dirty", a tag's describe, VX_VERSION's value, or "unknown" */
const char *build_version(void);

#!/bin/sh
# docker/entrypoint.sh: the trainer image's entrypoint; runs voxscale (or VOXSCALE_PROGRAM: the report image's
# voxscale-report) with the arguments given, as the owner of the output directory mounted from the host
# (VOXSCALE_OUTPUT, default /work/runs).
# Why: a fixed account in the image cannot write a host directory owned by someone else, and running as root
# leaves root-owned files in the user's checkout. Matching the owner gives both: runs/ from a clone belongs to the
# user, so voxscale runs as that user; a directory Docker created itself (root's) is written as root, as Docker
# made it. The image's own runs/ belongs to the non-root account voxscale, used when nothing is mounted.
set -eu
out=${VOXSCALE_OUTPUT:-/work/runs}
prog=${VOXSCALE_PROGRAM:-voxscale}
if [ "$(id -u)" = 0 ] && [ -d "$out" ]; then
    uid=$(stat -c %u "$out")
    gid=$(stat -c %g "$out")
    if [ "$uid" != 0 ]; then
        exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$prog" "$@"
    fi
fi
exec "$prog" "$@"

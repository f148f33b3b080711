#!/bin/sh
# The container's entrypoint: runs its arguments (the server) as uid 10001, never as root.
#
# Started as root (docker's default), it first makes the data directory writable for that user: a bind mount
# that the docker daemon creates on a fresh host (`-v "$PWD/data:/data"`) is owned by root, and a host directory
# may belong to another user. Only the mount point itself changes owner, and only when uid 10001 cannot write
# to it; nothing under it is touched. A named volume is created from the image's /data (already uid 10001).
# Started as another user (`docker run --user …`), it runs the arguments as they are.
set -eu

SERVER_UID=10001
SERVER_HOME=/home/destination
DATA_DIR="${RECORDS_DESTINATION_DATA:-/data}"

# setpriv (util-linux, in every Debian base) switches user with no setuid helper or shell in between;
# --clear-groups: the server's user needs no supplementary groups (and keeps none of root's)
DROP_TO_SERVER="--reuid=$SERVER_UID --regid=$SERVER_UID --clear-groups"

if [ "$(id -u)" != 0 ]; then
    exec "$@"
fi
# shellcheck disable=SC2086  # DROP_TO_SERVER is a list of options
if [ -d "$DATA_DIR" ] && ! setpriv $DROP_TO_SERVER -- test -w "$DATA_DIR"; then
    echo "entrypoint: $DATA_DIR is not writable by uid $SERVER_UID: making that user its owner" >&2
    # a read-only or root-squashed mount refuses: the server still starts (an S3 root needs no /data)
    chown "$SERVER_UID:$SERVER_UID" "$DATA_DIR" || echo "entrypoint: cannot change the owner of $DATA_DIR;" \
        "make it writable for uid $SERVER_UID on the host (e.g. sudo chown $SERVER_UID <dir>)" >&2
fi
# exec: the server replaces this shell, so it is PID 1 and receives docker's SIGTERM
# shellcheck disable=SC2086
exec setpriv $DROP_TO_SERVER -- env HOME="$SERVER_HOME" USER=destination "$@"

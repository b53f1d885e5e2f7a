#!/bin/sh
# Entrypoint of the zipmoe image: creates the run directory and the Prometheus file_sd directory
# (the shared volume may have been created empty by another container), makes sure a service finds the
# deployment's CURVE key in it (below), records its pid for the healthcheck (docker/healthcheck.sh:
# exec keeps the pid, so it is zipmoe's), then runs zipmoe with the container's arguments, e.g.
# `service decompressor`. exec keeps zipmoe the signal receiver.
#
# The key (docs/messaging.md "Link security"): the first service container to start writes a key pair
# to $ZIPMOE_LINK_SECURITY_KEY_FILE (default <run dir>/link.key, mode 0600) and every later one keeps
# it (`zipmoe keygen --if-missing`: the file is linked into place, so racing containers end up with one
# key). Only a service whose endpoints carry CURVE reads it (tcp:// off loopback with the default
# ZIPMOE_LINK_SECURITY_MODE=auto); `docker compose down -v` discards it with the volume. A key placed
# there (or mounted and named) beforehand is kept; a loose or malformed one stops the container.
set -e
mkdir -p "${ZIPMOE_RUN_DIR:-/run/zipmoe}"
if [ -n "${ZIPMOE_METRICS_SD_DIR:-}" ]; then mkdir -p "$ZIPMOE_METRICS_SD_DIR"; fi
if [ "${1:-}" = service ] && [ "${ZIPMOE_LINK_SECURITY_MODE:-auto}" != off ]; then
  /usr/local/bin/zipmoe keygen --if-missing \
    --out "${ZIPMOE_LINK_SECURITY_KEY_FILE:-${ZIPMOE_RUN_DIR:-/run/zipmoe}/link.key}"
fi
echo $$ > "${ZIPMOE_PID_FILE:-/tmp/zipmoe-main.pid}" 2>/dev/null || true   # best effort (read-only root fs)
exec /usr/local/bin/zipmoe "$@"

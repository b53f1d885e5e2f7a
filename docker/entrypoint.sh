#!/bin/sh
# Entrypoint of the zipmoe image: creates the run directory and the Prometheus file_sd directory
# (the shared volume may have been created empty by another container), records its pid for the
# healthcheck (docker/healthcheck.sh: exec keeps the pid, so it is zipmoe's), then runs zipmoe with
# the container's arguments, e.g. `service decompressor`. exec keeps zipmoe the signal receiver.
set -e
mkdir -p "${ZIPMOE_RUN_DIR:-/run/zipmoe}"
if [ -n "${ZIPMOE_METRICS_SD_DIR:-}" ]; then mkdir -p "$ZIPMOE_METRICS_SD_DIR"; fi
echo $$ > "${ZIPMOE_PID_FILE:-/tmp/zipmoe-main.pid}" 2>/dev/null || true   # best effort (read-only root fs)
exec /usr/local/bin/zipmoe "$@"

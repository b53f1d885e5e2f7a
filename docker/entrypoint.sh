#!/bin/sh
# Entrypoint of the zipmoe image: creates the run directory and the Prometheus file_sd directory
# (the shared volume may have been created empty by another container), then runs zipmoe with the
# container's arguments, e.g. `service decompressor`. exec keeps zipmoe the signal receiver.
set -e
mkdir -p "${ZIPMOE_RUN_DIR:-/run/zipmoe}"
if [ -n "${ZIPMOE_METRICS_SD_DIR:-}" ]; then mkdir -p "$ZIPMOE_METRICS_SD_DIR"; fi
exec /usr/local/bin/zipmoe "$@"

#!/bin/sh
# Healthcheck of a zipmoe container (compose.yaml: `healthcheck: test: [CMD, zipmoe-healthcheck]`),
# installed as /usr/local/bin/zipmoe-healthcheck. Exit 0 = healthy, 1 = unhealthy (reason on stdout,
# shown by `docker inspect --format '{{json .State.Health}}' CONTAINER`).
#
# The container's zipmoe process is the one the entrypoint exec'd: its pid is in $ZIPMOE_PID_FILE
# (docker/entrypoint.sh writes it; the same pid namespace as this check, also under `pid: host`).
#   service front      GET /health on the HTTP API (ZIPMOE_HTTP_HOST/ZIPMOE_HTTP_PORT) must answer 200:
#                      the front answers the executor's health (503 while the model loads or the
#                      executor restarts: compose's start_period covers the first load)
#   service executor   GET /health must answer 200: on the loopback address it wrote to
#                      $ZIPMOE_RUN_DIR/executor.http behind a front (ZIPMOE_HTTP_FRONT, default true),
#                      else on ZIPMOE_HTTP_HOST/ZIPMOE_HTTP_PORT
#   other services     the process's own file_sd file $ZIPMOE_METRICS_SD_DIR/<service>-<pid>.json
#                      names its /metrics address (decompressor replicas probe for a free port, so
#                      only that file knows it); GET /metrics there must answer 200
#   anything else      (no sd dir, another command) the process must be alive
# Needs curl (docker/install-runtime.sh installs it).
set -u
pid_file=${ZIPMOE_PID_FILE:-/tmp/zipmoe-main.pid}
fail() { echo "unhealthy: $*"; exit 1; }

[ -r "$pid_file" ] || fail "no pid file $pid_file (not started by zipmoe-entrypoint?)"
pid=$(cat "$pid_file")
[ -d "/proc/$pid" ] || fail "zipmoe (pid $pid) is not running"
# argv of the process, one word per line: `zipmoe service NAME ...` -> NAME
service=$(tr '\0' '\n' < "/proc/$pid/cmdline" | awk 'prev == "service" { print; exit } { prev = $0 }')

get() {  # url -> 0 if it answers 2xx within 4 s
  curl -fsS -o /dev/null --max-time 4 "$1" 2>&1 || fail "GET $1 failed"
}

front_on() { case "${ZIPMOE_HTTP_FRONT:-true}" in 0|false|no|off) return 1 ;; esac; return 0; }
if [ "$service" = executor ] && front_on; then
  address_file="${ZIPMOE_RUN_DIR:-/tmp/zipmoe}/executor.http"
  [ -r "$address_file" ] || fail "no $address_file (the executor is not listening yet)"
  get "http://$(head -n 1 "$address_file")/health"
  echo "healthy: executor /health 200 at $(head -n 1 "$address_file")"
  exit 0
fi
if [ "$service" = executor ] || [ "$service" = front ]; then
  host=${ZIPMOE_HTTP_HOST:-127.0.0.1}
  case "$host" in 0.0.0.0|""|::|"[::]") host=127.0.0.1 ;; esac
  case "$host" in *:*) case "$host" in \[*) ;; *) host="[$host]" ;; esac ;; esac  # IPv6 literal
  get "http://$host:${ZIPMOE_HTTP_PORT:-8080}/health"
  echo "healthy: $service /health 200"
  exit 0
fi
if [ -n "$service" ] && [ -n "${ZIPMOE_METRICS_SD_DIR:-}" ]; then
  sd="$ZIPMOE_METRICS_SD_DIR/$service-$pid.json"
  [ -r "$sd" ] || fail "no file_sd file $sd (still starting, or no /metrics endpoint: see the service's log)"
  target=$(sed -n 's/.*"targets":[[:space:]]*\[[[:space:]]*"\([^"]*\)".*/\1/p' "$sd")
  [ -n "$target" ] || fail "no target in $sd"
  get "http://$target/metrics"
  echo "healthy: $service /metrics at $target"
  exit 0
fi
echo "healthy: zipmoe (pid $pid) is running"

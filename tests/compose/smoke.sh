#!/usr/bin/env bash
# End-to-end smoke test of the docker compose deployment (not part of ctest). Debian 12, as root:
#   tests/compose/smoke.sh
# 1. installs docker.io, docker-compose, debootstrap, prometheus (promtool), curl when missing and
#    starts dockerd (vfs, no iptables, no bridge) when no engine answers;
# 2. builds zipmoe-base:bookworm with debootstrap (cached), the zipmoe image from the host binary
#    (docker/build-image.sh prebuilt) and the Debian Prometheus image;
# 3. synthesizes + compresses a tiny model with the host binary (cached in the work dir);
# 4. brings up cache-manager (arena owner), scheduler, storage, 2 decompressors, executor, the HTTP front and Prometheus (no
#    Grafana: not packaged in Debian), waits for /health and for every container's healthcheck,
#    checks that a temperature-0 completion
#    equals `zipmoe generate` on the host, scales out to 3 decompressors (file_sd must list the new
#    replica), scrapes every service's /metrics (promtool check metrics,
#    every metric family of docs/metrics.md present), generates load, and runs every PromQL
#    expression of grafana/dashboards/*.json against Prometheus (each must return data; the
#    `instance` variable at All);
# 5. tears the stack down (docker-compose down -v) and prints the total duration.
# On failure it prints the containers' state and logs. Environment (defaults in brackets):
#   ZIPMOE_BIN [build/bin/zipmoe]  SMOKE_WORK [/var/tmp/zipmoe-smoke]  SMOKE_DECOMPRESSORS [2]
#   SMOKE_ARCH [qwen2_moe]  SMOKE_PRESET [tiny]  SMOKE_BUDGET [30%]  SMOKE_MAX_TOKENS [8]
#   SMOKE_PROMPT ["The quick brown fox"]  SMOKE_HEALTH_TIMEOUT [300 s]  SMOKE_LOAD_SECONDS [40]
#   SMOKE_RATE_WINDOW [1m]: replaces Grafana's $__rate_interval; SMOKE_HTTP_PORT [18080]
#   SMOKE_PROMETHEUS_PORT [19090]  SMOKE_METRICS_PORT_BASE [19470]: metrics ports base+1..base+6,
#   decompressors from base+10 (away from the defaults, which a host `zipmoe up` may hold)
#   SMOKE_COMPOSE_FILES [compose.yaml]: compose files, relative to the repository root (Jetson: add
#   docker/compose.jetson.yaml)  SMOKE_KEEP [0]: 1 leaves the stack up on failure  SMOKE_COMPOSE: compose command (default
#   `docker compose` when the v2 plugin works, else docker-compose)  SMOKE_SKIP_INSTALL [0]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
T0=$(date +%s)

ZIPMOE_BIN=${ZIPMOE_BIN:-build/bin/zipmoe}
WORK=${SMOKE_WORK:-/var/tmp/zipmoe-smoke}
N_DEC=${SMOKE_DECOMPRESSORS:-2}
ARCH=${SMOKE_ARCH:-qwen2_moe}
PRESET=${SMOKE_PRESET:-tiny}
BUDGET=${SMOKE_BUDGET:-30%}
MAX_TOKENS=${SMOKE_MAX_TOKENS:-8}
PROMPT=${SMOKE_PROMPT:-The quick brown fox}
HEALTH_TIMEOUT=${SMOKE_HEALTH_TIMEOUT:-300}
LOAD_SECONDS=${SMOKE_LOAD_SECONDS:-40}
RATE_WINDOW=${SMOKE_RATE_WINDOW:-1m}
HTTP_PORT=${SMOKE_HTTP_PORT:-18080}
PROM_PORT=${SMOKE_PROMETHEUS_PORT:-19090}
MPORT=${SMOKE_METRICS_PORT_BASE:-19470}
PROJECT=zipmoe-smoke

say()  { printf '[smoke %4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
fail() { say "FAIL: $*"; exit 1; }
mkdir -p "$WORK"
[ "$(id -u)" -eq 0 ] || fail "run as root (installs packages, starts dockerd)"
[ -x "$ZIPMOE_BIN" ] || fail "no zipmoe binary at $ZIPMOE_BIN (scripts/build.sh, or set ZIPMOE_BIN)"
ZIPMOE_BIN=$(readlink -f "$ZIPMOE_BIN")

# ---- 1. tools and engine ------------------------------------------------------------------------
if [ "${SMOKE_SKIP_INSTALL:-0}" != 1 ]; then
  need=()
  for pair in dockerd:docker.io docker-compose:docker-compose debootstrap:debootstrap \
              promtool:prometheus curl:curl python3:python3; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
  done
  if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${need[@]}" > "$WORK/apt.log" 2>&1 \
      || { tail -n 30 "$WORK/apt.log"; fail "apt-get install ${need[*]}"; }
  fi
fi
if ! timeout 20 docker info >/dev/null 2>&1; then
  say "no docker engine answers: starting dockerd (vfs, --iptables=false, --bridge=none), log $WORK/dockerd.log"
  nohup dockerd --storage-driver=vfs --iptables=false --bridge=none > "$WORK/dockerd.log" 2>&1 &
  echo $! > "$WORK/dockerd.pid"
  for _ in $(seq 60); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 1; done
  timeout 20 docker info >/dev/null 2>&1 || { tail -n 20 "$WORK/dockerd.log"; fail "dockerd did not start"; }
fi
if [ -n "${SMOKE_COMPOSE:-}" ]; then
  read -r -a COMPOSE <<< "$SMOKE_COMPOSE"
elif docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
else
  COMPOSE=(docker-compose)
fi
say "engine $(docker version -f '{{.Server.Version}}' 2>/dev/null), compose: ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null || echo '?'))"

# ---- 2. images ----------------------------------------------------------------------------------
t=$(date +%s)
docker/build-base.sh zipmoe-base:bookworm
T_BASE=$(( $(date +%s) - t ))
export BASE_IMAGE=zipmoe-base:bookworm ZIPMOE_IMAGE=zipmoe:smoke PROMETHEUS_IMAGE=zipmoe-prometheus:bookworm
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}   # the classic builder needs no buildx plugin
t=$(date +%s)
say "building $ZIPMOE_IMAGE from $ZIPMOE_BIN (prebuilt target)"
nice -n 10 docker/build-image.sh prebuilt "$ZIPMOE_BIN" > "$WORK/build-zipmoe.log" 2>&1 \
  || { tail -n 40 "$WORK/build-zipmoe.log"; fail "zipmoe image build (log $WORK/build-zipmoe.log)"; }
T_IMAGE=$(( $(date +%s) - t ))
t=$(date +%s)
nice -n 10 docker/build-image.sh prometheus > "$WORK/build-prometheus.log" 2>&1 \
  || { tail -n 40 "$WORK/build-prometheus.log"; fail "prometheus image build (log $WORK/build-prometheus.log)"; }
T_PROM=$(( $(date +%s) - t ))
say "images: base ${T_BASE}s, zipmoe ${T_IMAGE}s, prometheus ${T_PROM}s"

# ---- 3. model and the host reference ------------------------------------------------------------
HF="$WORK/$ARCH-$PRESET"
MODEL="$WORK/$ARCH-$PRESET.zstd"
if [ ! -f "$HF/config.json" ]; then
  say "synthesizing $HF"
  nice -n 10 "$ZIPMOE_BIN" synth --arch "$ARCH" --preset "$PRESET" --out "$HF" > "$WORK/synth.log" 2>&1 \
    || { tail -n 20 "$WORK/synth.log"; fail "zipmoe synth"; }
fi
if [ ! -f "$MODEL/manifest.bin" ]; then
  say "compressing into $MODEL"
  nice -n 10 "$ZIPMOE_BIN" compress "$HF" "$MODEL" --force > "$WORK/compress.log" 2>&1 \
    || { tail -n 20 "$WORK/compress.log"; fail "zipmoe compress"; }
fi
say "host reference: zipmoe generate --max-new-tokens $MAX_TOKENS"
"$ZIPMOE_BIN" generate --model "$MODEL" --prompt "$PROMPT" --max-new-tokens "$MAX_TOKENS" --json \
  > "$WORK/reference.json" 2> "$WORK/reference.log" || { tail -n 20 "$WORK/reference.log"; fail "zipmoe generate"; }
REF_TEXT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"], end="")' "$WORK/reference.json")

# ---- 4. the stack -------------------------------------------------------------------------------
export ZIPMOE_MODEL="$MODEL" ZIPMOE_RESTART=no ZIPMOE_MEMORY_BUDGET="$BUDGET" ZIPMOE_HTTP_PORT="$HTTP_PORT" \
       ZIPMOE_SHM_NAME=/zipmoe-smoke-arena PROMETHEUS_PORT="$PROM_PORT" \
       ZIPMOE_METRICS_PORT_STORAGE=$((MPORT + 1)) ZIPMOE_METRICS_PORT_DECOMPRESSOR=$((MPORT + 10)) \
       ZIPMOE_METRICS_PORT_CACHE_MANAGER=$((MPORT + 3)) ZIPMOE_METRICS_PORT_SCHEDULER=$((MPORT + 4)) \
       ZIPMOE_METRICS_PORT_EXECUTOR=$((MPORT + 5)) ZIPMOE_METRICS_PORT_FRONT=$((MPORT + 6))
# Compose files (-f each), e.g. SMOKE_COMPOSE_FILES="compose.yaml docker/compose.jetson.yaml" on Jetson.
read -r -a COMPOSE_FILES <<< "${SMOKE_COMPOSE_FILES:-compose.yaml}"
COMPOSE_ARGS=()
for f in "${COMPOSE_FILES[@]}"; do COMPOSE_ARGS+=(-f "$f"); done
dc() { timeout "${DC_TIMEOUT:-300}" "${COMPOSE[@]}" -p "$PROJECT" --project-directory "$REPO" "${COMPOSE_ARGS[@]}" "$@"; }
PROM="http://127.0.0.1:$PROM_PORT"
API="http://127.0.0.1:$HTTP_PORT"

STATUS=fail
on_exit() {
  local rc=$?
  if [ "$STATUS" != pass ]; then
    say "---- failure diagnostics (exit $rc) ----"
    dc ps -a 2>&1 || true
    for s in "${SERVICES[@]}" prometheus; do
      echo "======== logs: $s ========"
      dc logs --no-color --tail 150 "$s" 2>&1 || true
    done
    if [ -f "$WORK/dockerd.log" ]; then echo "======== dockerd (tail) ========"; tail -n 20 "$WORK/dockerd.log"; fi
  fi
  if [ "$STATUS" != pass ] && [ "${SMOKE_KEEP:-0}" = 1 ]; then
    say "SMOKE_KEEP=1: stack left up (${COMPOSE[*]} -p $PROJECT down -v)"
  else
    say "tearing down"
    dc down -v --remove-orphans > "$WORK/down.log" 2>&1 || { cat "$WORK/down.log"; say "WARNING: down failed"; }
  fi
  say "total $(( $(date +%s) - T0 )) s: $( [ "$STATUS" = pass ] && echo PASS || echo FAIL )"
}

# The zipmoe services: every compose service but the monitoring ones; one file_sd target each,
# N_DEC for the decompressor.
mapfile -t SERVICES < <(dc config --services | grep -vxE 'prometheus|grafana')
[ "${#SERVICES[@]}" -gt 0 ] || fail "no services in compose.yaml"
N_TARGETS=$(( ${#SERVICES[@]} - 1 + N_DEC ))
dc down -v --remove-orphans > /dev/null 2>&1 || true   # leftovers of an interrupted run
trap on_exit EXIT
t=$(date +%s)
say "up: ${SERVICES[*]} (decompressor x$N_DEC) + prometheus; model $MODEL, budget $BUDGET"
dc up -d --scale decompressor="$N_DEC" "${SERVICES[@]}" prometheus > "$WORK/up.log" 2>&1 \
  || { cat "$WORK/up.log"; fail "compose up"; }

# Any container of the project that exited, e.g. a service that crashed while we wait.
exited() { docker ps -a --filter "label=com.docker.compose.project=$PROJECT" --filter status=exited \
                 --format '{{.Names}} ({{.Status}})'; }

deadline=$(( $(date +%s) + HEALTH_TIMEOUT ))
code=000
while :; do
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$API/health" || true)
  [ "$code" = 200 ] && break
  dead=$(exited)
  [ -z "$dead" ] || fail "container(s) exited while waiting for /health: $dead"
  [ "$(date +%s)" -lt "$deadline" ] || fail "/health not 200 after ${HEALTH_TIMEOUT}s (last: $code)"
  sleep 2
done
T_HEALTH=$(( $(date +%s) - t ))
say "/health 200 after ${T_HEALTH}s"

# ---- every container's compose healthcheck (docker/healthcheck.sh, Prometheus /-/healthy) ------
health_states() {  # "<name> <health status>" per container of the project
  docker ps -a -q --filter "label=com.docker.compose.project=$PROJECT" | xargs -r docker inspect \
    -f '{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}no-healthcheck{{end}}'
}
deadline=$(( $(date +%s) + 120 ))
while :; do
  unhealthy=$(health_states | grep -v ' healthy$' || true)
  [ -z "$unhealthy" ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then
    for c in $(echo "$unhealthy" | awk '{ print $1 }'); do
      docker inspect -f '{{.Name}}: {{if .State.Health}}{{range .State.Health.Log}}{{.Output}}{{end}}{{end}}' "${c#/}" || true
    done
    fail "containers not healthy after 120 s: $(echo "$unhealthy" | tr '\n' ' ')"
  fi
  sleep 3
done
say "healthchecks: $(health_states | wc -l) containers healthy"

# ---- completion equals the host's `zipmoe generate` ---------------------------------------------
complete() {  # prompt max_tokens -> response body on stdout
  python3 - "$1" "$2" <<'EOF' | curl -sS --max-time 300 -H 'Content-Type: application/json' -d @- "$API/v1/completions"
import json, sys
print(json.dumps({"prompt": sys.argv[1], "max_tokens": int(sys.argv[2]), "temperature": 0}))
EOF
}
complete "$PROMPT" "$MAX_TOKENS" > "$WORK/completion.json" || fail "POST /v1/completions"
GOT_TEXT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"], end="")' \
           "$WORK/completion.json") || { cat "$WORK/completion.json"; fail "no choices[0].text in the reply"; }
if [ "$GOT_TEXT" != "$REF_TEXT" ]; then
  say "host:    $(printf '%q' "$REF_TEXT")"
  say "service: $(printf '%q' "$GOT_TEXT")"
  fail "completion text differs from zipmoe generate"
fi
say "completion equals zipmoe generate: $(printf '%q' "$GOT_TEXT")"
curl -sf --max-time 10 "$API/v1/models" > /dev/null || fail "GET /v1/models"

# ---- scale out by one replica, then every service's /metrics ----------------------------------
sd_targets() {  # the targets of every file_sd file in the run-dir volume, one per line
  dc exec -T prometheus sh -c 'cat /run/zipmoe/sd/*.json 2>/dev/null' 2>/dev/null | python3 -c '
import json, re, sys
text, dec, i = sys.stdin.read(), json.JSONDecoder(), 0
while True:  # the files are concatenated: decode one JSON document after another
    m = re.compile(r"\S").search(text, i)
    if not m: break
    doc, i = dec.raw_decode(text, m.start())
    for group in (doc if isinstance(doc, list) else [doc]):
        for t in group.get("targets", []): print(t)' || true
}
wait_targets() {  # want: wait until file_sd lists `want` targets
  local want=$1 deadline=$(( $(date +%s) + 60 ))
  while :; do
    mapfile -t SD_TARGETS < <(sd_targets)
    [ "${#SD_TARGETS[@]}" -eq "$want" ] && return 0
    if [ "$(date +%s)" -ge "$deadline" ]; then
      dc logs --no-color 2>&1 | grep -F 'no /metrics endpoint' | sort -u | head -n 8 || true
      fail "file_sd lists ${#SD_TARGETS[@]} targets (${SD_TARGETS[*]:-none}), want $want"
    fi
    sleep 2
  done
}
wait_targets "$N_TARGETS"
N_DEC=$((N_DEC + 1)); N_TARGETS=$((N_TARGETS + 1))
say "scaling out: --scale decompressor=$N_DEC"
dc up -d --no-deps --no-recreate --scale decompressor="$N_DEC" decompressor > "$WORK/scale.log" 2>&1 \
  || { cat "$WORK/scale.log"; fail "compose up --scale decompressor=$N_DEC"; }
wait_targets "$N_TARGETS"
say "file_sd targets: ${SD_TARGETS[*]}"
mkdir -p "$WORK/metrics"
rm -f "$WORK"/metrics/*
for target in "${SD_TARGETS[@]}"; do
  f="$WORK/metrics/${target//[:\/]/_}.txt"
  curl -sSf --max-time 10 "http://$target/metrics" > "$f" || fail "GET http://$target/metrics"
  if ! lint=$(promtool check metrics < "$f" 2>&1); then
    echo "$lint"
    fail "promtool check metrics: http://$target/metrics"
  fi
done
# Every metric family of docs/metrics.md is exported by some service.
missing=$(python3 - "$REPO/docs/metrics.md" "$WORK"/metrics/*.txt <<'EOF'
import re, sys
want = sorted(set(re.findall(r"^\| `(zipmoe_[a-z_]+)`", open(sys.argv[1]).read(), re.M)))
have = set()
for f in sys.argv[2:]:
    for line in open(f):
        m = re.match(r"# TYPE (\S+) ", line)
        if m: have.add(m.group(1))
print(" ".join(n for n in want if n not in have))
EOF
)
[ -z "$missing" ] || fail "metric families of docs/metrics.md exported by no service: $missing"
say "promtool check metrics: ${#SD_TARGETS[@]} targets clean, every docs/metrics.md family present"

# ---- load, then every dashboard expression ------------------------------------------------------
say "load: completions for ${LOAD_SECONDS}s"
load_end=$(( $(date +%s) + LOAD_SECONDS ))
n=0
while [ "$(date +%s)" -lt "$load_end" ] || [ "$n" -lt 3 ]; do
  complete "$PROMPT $n" 16 > "$WORK/load.json" || fail "load request $n"
  n=$((n + 1))
done
curl -s -o /dev/null --max-time 5 "$API/no-such-route" || true   # one non-200 code
say "load: $n requests"

deadline=$(( $(date +%s) + 90 ))
while :; do
  up=$(curl -sf --max-time 5 --get --data-urlencode 'query=sum(up{job="zipmoe"})' "$PROM/api/v1/query" \
       | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)' \
       || echo 0)
  [ "$up" -ge "$N_TARGETS" ] && break
  [ "$(date +%s)" -lt "$deadline" ] || fail "Prometheus: $up of $N_TARGETS targets up"
  sleep 3
done
promq() {  # instant query -> first sample's value (or "none")
  curl -sf --max-time 5 --get --data-urlencode "query=$1" "$PROM/api/v1/query" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "none")' \
    || echo none
}
deadline=$(( $(date +%s) + 30 ))
while [ "$(promq 'max(zipmoe_scheduler_decompressors)')" != "$N_DEC" ]; do
  [ "$(date +%s)" -lt "$deadline" ] \
    || fail "zipmoe_scheduler_decompressors = $(promq 'max(zipmoe_scheduler_decompressors)'), want $N_DEC"
  sleep 3
done
sleep 12   # two more scrapes after the load
say "Prometheus scrapes $up targets; running the dashboards' PromQL (\$__rate_interval = $RATE_WINDOW)"
if ! python3 - "$PROM" "$RATE_WINDOW" "$REPO"/grafana/dashboards/*.json <<'EOF'
import json, sys, urllib.parse, urllib.request
prom, window, files = sys.argv[1], sys.argv[2], sys.argv[3:]
subst = {"$__rate_interval": window, "${__rate_interval}": window, "$__interval": "15s",
         "${__interval}": "15s", "$__range": "10m", "${__range}": "10m",
         "${instance}": ".*", "$instance": ".*"}   # the instance variable at All
def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))
bad, n = [], 0
for f in files:
    for p in panels(json.load(open(f)).get("panels", [])):
        for t in p.get("targets", []):
            expr = t.get("expr")
            if not expr: continue
            for k, v in subst.items(): expr = expr.replace(k, v)
            if "$" in expr:
                bad.append((p["title"], expr, "unsubstituted variable")); continue
            n += 1
            url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            try:
                r = json.load(urllib.request.urlopen(url, timeout=20))
            except Exception as e:
                bad.append((p["title"], expr, f"query error: {e}")); continue
            res = r.get("data", {}).get("result", [])
            vals = [s["value"][1] for s in res]
            ok = [v for v in vals if v not in ("NaN", "+Inf", "-Inf")]
            line = ", ".join(f'{s["metric"]}={s["value"][1]}' for s in res[:6])
            print(f'  {"ok  " if ok else "FAIL"} {p["title"]}: {" ".join(expr.split())}\n         -> {line or "(empty)"}')
            if not ok:
                bad.append((p["title"], expr, "no data" if not res else "only NaN/Inf"))
print(f"{n} expressions, {len(bad)} without data")
for title, expr, why in bad:
    print(f"  NO DATA [{why}] {title}: {' '.join(expr.split())}")
sys.exit(1 if bad else 0)
EOF
then
  fail "dashboard expressions without data"
fi

STATUS=pass
say "PASS (images: base ${T_BASE}s, zipmoe ${T_IMAGE}s, prometheus ${T_PROM}s; healthy after ${T_HEALTH}s)"

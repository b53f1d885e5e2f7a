#!/bin/bash
# Soak test (issue 15; not CI): bench/load.py at concurrency 16 for 30 min against `zipmoe serve` and
# `zipmoe up` in a memory cap, one random service SIGKILLed every 5 min under `up`. Arguments are
# bench/soak.py's (--minutes, --mode, --kill-every, --cap, --model, ...); results: out/soak/soak.json
# and a markdown table on stdout for docs/reliability.md. Needs a built tree (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 bench/soak.py "$@"

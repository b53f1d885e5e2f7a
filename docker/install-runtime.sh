#!/usr/bin/env bash
# Installs a stage made by collect-runtime.sh into the runtime image:
#   install-runtime.sh STAGE_DIR [--packages-only]
# apt-installs the packages of STAGE_DIR/packages.txt and curl (the compose healthchecks,
# docker/healthcheck.sh) that are not installed yet, copies the unpackaged
# libraries to /opt/zipmoe/lib (registered with ldconfig) and the binary to /usr/local/bin/zipmoe,
# then checks that every library resolves. Leaves no apt lists or caches behind. --packages-only
# stops after apt (a separate, cacheable image layer: the package list changes less than the binary).
set -euo pipefail

STAGE=${1:?usage: install-runtime.sh STAGE_DIR [--packages-only]}
export DEBIAN_FRONTEND=noninteractive
[ -f "$STAGE/packages.txt" ] || { echo "install-runtime: no $STAGE/packages.txt" >&2; exit 1; }

missing=()
while read -r p; do
  [ -n "$p" ] || continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done < <(cat "$STAGE/packages.txt"; echo curl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-runtime: installing ${#missing[@]} packages"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" > /tmp/apt.log 2>&1 \
    || { tail -n 40 /tmp/apt.log >&2; exit 1; }
  rm -f /tmp/apt.log
  apt-get clean
  rm -rf /var/lib/apt/lists/*
fi
if [ "${2:-}" = --packages-only ]; then exit 0; fi

mkdir -p /opt/zipmoe/lib
if [ -n "$(ls -A "$STAGE/lib" 2>/dev/null)" ]; then
  cp -a "$STAGE/lib/." /opt/zipmoe/lib/
fi
echo /opt/zipmoe/lib > /etc/ld.so.conf.d/zipmoe.conf
ldconfig
install -m 0755 "$STAGE/bin/zipmoe" /usr/local/bin/zipmoe
if ldd /usr/local/bin/zipmoe | grep 'not found'; then
  echo "install-runtime: unresolved libraries above" >&2
  exit 1
fi
echo "install-runtime: /usr/local/bin/zipmoe ready"

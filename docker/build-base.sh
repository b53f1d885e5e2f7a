#!/usr/bin/env bash
# Builds a local Debian 12 base image with debootstrap, for machines that can reach a Debian mirror
# but no container registry:  docker/build-base.sh [IMAGE_TAG]   (default zipmoe-base:bookworm)
#
# Skips the work when the image already exists (set ZIPMOE_BASE_REBUILD=1 to rebuild).
# The mirror is taken from ZIPMOE_DEBIAN_MIRROR, else from this machine's /etc/apt/sources.list*,
# else http://deb.debian.org/debian. Needs root, debootstrap and a running docker engine.
set -euo pipefail

TAG="${1:-zipmoe-base:bookworm}"
SUITE="${ZIPMOE_DEBIAN_SUITE:-bookworm}"

if [ "${ZIPMOE_BASE_REBUILD:-0}" != 1 ] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "build-base: $TAG exists, skipping (ZIPMOE_BASE_REBUILD=1 rebuilds)"
  exit 0
fi

# First Debian mirror URI found in the host's apt sources (deb822 "URIs:" or one-line "deb URL").
find_mirror() {
  local f uri
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    uri=$(grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' "$f" \
          | grep -oE '[a-z]+://[^[:space:]]+' | head -n1 || true)
    if [ -n "$uri" ]; then echo "${uri%/}"; return; fi
  done
  echo "http://deb.debian.org/debian"
}

MIRROR="${ZIPMOE_DEBIAN_MIRROR:-$(find_mirror)}"
# Security updates live beside the main archive on deb.debian.org-like mirrors.
SECURITY="${ZIPMOE_DEBIAN_SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}"

command -v debootstrap >/dev/null || { echo "build-base: debootstrap missing (apt-get install debootstrap)" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/zipmoe-base.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOTFS="$WORK/rootfs"

start=$(date +%s)
echo "build-base: debootstrap --variant=minbase $SUITE from $MIRROR (security: $SECURITY)"
nice -n 10 debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOTFS" "$MIRROR" \
  > "$WORK/debootstrap.log" 2>&1 || { tail -n 30 "$WORK/debootstrap.log" >&2; exit 1; }

cat > "$ROOTFS/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
EOF
# Keep the image small: no apt caches, no docs/man pages from later installs.
cat > "$ROOTFS/etc/apt/apt.conf.d/90zipmoe-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
EOF
cat > "$ROOTFS/etc/dpkg/dpkg.cfg.d/90zipmoe-nodoc" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
rm -rf "${ROOTFS:?}"/var/cache/apt/archives/*.deb "${ROOTFS:?}"/var/lib/apt/lists/* "${ROOTFS:?}"/usr/share/doc/* \
       "${ROOTFS:?}"/usr/share/man/* "${ROOTFS:?}"/tmp/* "${ROOTFS:?}"/dev/*

tar --numeric-owner -C "$ROOTFS" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV LANG=C.UTF-8' -c 'CMD ["/bin/bash"]' - "$TAG" >/dev/null
echo "build-base: $TAG built in $(( $(date +%s) - start )) s ($(docker image inspect -f '{{.Size}}' "$TAG") bytes)"

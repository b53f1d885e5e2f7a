# Prometheus from Debian's package, for machines that reach a Debian mirror but no container registry
# (the compose file's default, prom/prometheus, needs Docker Hub). Same interface as prom/prometheus:
# entrypoint = the prometheus binary, data in /prometheus, config in /etc/prometheus/prometheus.yml,
# promtool on PATH, runs as nobody; wget for the compose healthcheck (prom/prometheus has busybox wget).
#   docker build -f docker/prometheus.Dockerfile --build-arg BASE_IMAGE=zipmoe-base:bookworm \
#     -t zipmoe-prometheus:bookworm .
#   PROMETHEUS_IMAGE=zipmoe-prometheus:bookworm docker compose up -d
ARG BASE_IMAGE=debian:bookworm
FROM ${BASE_IMAGE}
RUN export DEBIAN_FRONTEND=noninteractive \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends prometheus wget > /tmp/apt.log 2>&1 || { tail -n 40 /tmp/apt.log; exit 1; } \
 && rm -f /tmp/apt.log && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /prometheus /etc/prometheus \
 && chown -R nobody:nogroup /prometheus \
 && prometheus --version
COPY docker/prometheus/prometheus.yml /etc/prometheus/prometheus.yml
USER nobody
EXPOSE 9090
VOLUME ["/prometheus"]
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]

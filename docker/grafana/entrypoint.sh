#!/bin/sh
# Entrypoint wrapper of the compose `grafana` service (mounted read-only; runs Grafana's own /run.sh).
# Grafana's default admin/admin is never used:
#   ZIPMOE_GRAFANA_PASSWORD set    it becomes the admin password (GF_SECURITY_ADMIN_PASSWORD)
#   unset                          a random password is generated once, kept in the grafana-data
#                                  volume ($PASSWORD_FILE, mode 600) and reused on later starts; read it
#                                  with `docker compose exec grafana cat /var/lib/grafana/zipmoe-admin-password`
# Grafana applies GF_SECURITY_ADMIN_PASSWORD only when it creates its database (first start on an empty
# grafana-data volume); to change it later: `docker compose exec grafana grafana cli admin
# reset-admin-password NEW` (docs/deploy.md).
set -eu
PASSWORD_FILE=/var/lib/grafana/zipmoe-admin-password
if [ -n "${ZIPMOE_GRAFANA_PASSWORD:-}" ]; then
  GF_SECURITY_ADMIN_PASSWORD=$ZIPMOE_GRAFANA_PASSWORD
else
  if [ ! -s "$PASSWORD_FILE" ]; then
    (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=\n' | head -c 24 > "$PASSWORD_FILE.tmp" \
       && mv "$PASSWORD_FILE.tmp" "$PASSWORD_FILE")
    echo "zipmoe: ZIPMOE_GRAFANA_PASSWORD is not set: generated an admin password (user admin), read it with" \
         "docker compose exec grafana cat $PASSWORD_FILE" >&2
  fi
  GF_SECURITY_ADMIN_PASSWORD=$(cat "$PASSWORD_FILE")
fi
[ -n "$GF_SECURITY_ADMIN_PASSWORD" ] || { echo "zipmoe: empty Grafana admin password" >&2; exit 1; }
export GF_SECURITY_ADMIN_PASSWORD
unset ZIPMOE_GRAFANA_PASSWORD
exec /run.sh "$@"

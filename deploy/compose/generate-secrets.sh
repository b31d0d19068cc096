#!/usr/bin/env bash
# Writes fresh random secrets for deploy/compose.yaml into deploy/compose/secrets/, which git ignores:
# no working secret is ever committed. Run it once before `docker compose up`; files already there are
# kept (their values are in the volumes: PostgreSQL's and ClickHouse's passwords are set at the first
# start only), --force replaces them all (then remove the volumes: docker compose down -v).
#
# usage: deploy/compose/generate-secrets.sh [--force]
set -euo pipefail

dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/secrets
force=0
case ${1:-} in
--force) force=1 ;;
"") ;;
*)
	sed -n '2,/^set/{/^set/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
	exit 2
	;;
esac
# The folder is the owner's only; the files are readable by all, because compose bind-mounts each
# into its container, where walhouse runs as user 65532, not as the owner.
mkdir -p "$dir"
chmod 700 "$dir"
umask 022

# random: 32 random bytes as 43 URL-safe characters (no quote, no slash: safe in SQL and URLs).
random() { head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }

# put NAME VALUE: writes the secret NAME unless it is there already.
put() {
	if [[ -s $dir/$1 && $force == 0 ]]; then
		printf 'kept      %s\n' "$1"
		return
	fi
	printf '%s\n' "$2" >"$dir/$1"
	printf 'generated %s\n' "$1"
}

put pg_password "$(random)"
# ClickHouse: the administrator (used only to create the others at the first start), the sink
# (writes its database) and serve (reads it, and erases: docs/security.md, "Deployment").
put clickhouse_admin_password "$(random)"
put clickhouse_sink_password "$(random)"
put clickhouse_serve_password "$(random)"
put cursor_secret "$(random)"
# The key of the HMAC that export audit entries record instead of the subject (serve
# --audit-key-file): its own secret, not derived from another.
put audit_key "$(random)"
# The erasure key, the same for the sink and serve (docs/erasure.md).
put erasure_key "$(random)"
put grafana_admin_password "$(random)"
# serve's admin API key: Prometheus sends it to scrape /metrics; the keys file holds its hash.
if [[ ! -s $dir/admin_key || ! -s $dir/api_keys.json || $force == 1 ]]; then
	admin="wh_$(random)"
	printf '%s\n' "$admin" >"$dir/admin_key"
	hash=$(printf '%s' "$admin" | sha256sum | cut -d' ' -f1)
	printf '[{"id":"compose-admin","hash":"%s","scopes":["admin"]}]\n' "$hash" >"$dir/api_keys.json"
	printf 'generated admin_key, api_keys.json\n'
else
	printf 'kept      admin_key, api_keys.json\n'
fi
printf 'Grafana: http://localhost:3000, user admin, password in %s/grafana_admin_password\n' "$dir"

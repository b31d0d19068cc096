#!/usr/bin/env bash
# Local services for walhouse's tests, demo and CI: PostgreSQL, Kafka, Redis and
# ClickHouse (the embedded engine behind `walhouse chdb`), each on loopback with its own
# port and its data under the repo's ignored .local/ (or $WALHOUSE_LOCAL_DIR).
# No Docker needed. See deploy/local/README.md.
#
# usage: deploy/local/services.sh COMMAND [service...]
#   install   install what is missing (apt, Maven Central, npm; cached, no network on rerun)
#   start     install if needed, start what is not running, wait until ready, write .local/env
#   stop      stop gracefully (data kept)
#   restart   stop then start (e.g. `restart kafka` in fault tests)
#   status    one line per service; exit status 3 if any of them is not running
#   env       print .local/env (source it: `. .local/env`)
#   logs      [-f] [-n LINES] service...: tail the services' logs
#   clean     stop and delete the data dirs (downloads and build cache are kept)
#   kafka     TOOL [ARGS...]: run a Kafka CLI against the local broker, TOOL as in the
#             release's bin/kafka-TOOL.sh: topics, console-producer, console-consumer,
#             consumer-groups, broker-api-versions, get-offsets, metadata-quorum, configs
#             (e.g. `services.sh kafka topics --list`)
# services: postgres kafka redis clickhouse (default: all)
#
# Ports (env): PG_PORT=55432 KAFKA_PORT=59092 KAFKA_CONTROLLER_PORT=59093 KAFKA_SASL_PORT=59094
# KAFKA_TLS_PORT=59095 REDIS_PORT=56379 CH_PORT=58123 (the SASL and TLS listeners default to
# KAFKA_PORT+2 and +3). Timeouts (s): WALHOUSE_START_TIMEOUT=120 WALHOUSE_STOP_TIMEOUT=60.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=lib/common.sh
. "$_here/lib/common.sh"
# shellcheck source=lib/postgres.sh
. "$_here/lib/postgres.sh"
# shellcheck source=lib/kafka.sh
. "$_here/lib/kafka.sh"
# shellcheck source=lib/redis.sh
. "$_here/lib/redis.sh"
# shellcheck source=lib/clickhouse.sh
. "$_here/lib/clickhouse.sh"

# Start order; stop goes the other way.
ALL_SERVICES=(postgres redis kafka clickhouse)

usage() {
	sed -n '2,/^[^#]/{/^#/!d;/shellcheck/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

# canonical NAME: the service's name, accepting a few aliases.
canonical() {
	case $1 in
	postgres | postgresql | pg) echo postgres ;;
	kafka) echo kafka ;;
	redis) echo redis ;;
	clickhouse | ch | chdb) echo clickhouse ;;
	*) die "unknown service '$1' (known: ${ALL_SERVICES[*]})" ;;
	esac
}

# select_services ARGS...: sets SERVICES to the named services in start order (all if none).
select_services() {
	local want=() s name
	for s in "$@"; do
		want+=("$(canonical "$s")")
	done
	SERVICES=()
	for name in "${ALL_SERVICES[@]}"; do
		if [[ ${#want[@]} -eq 0 || " ${want[*]} " == *" $name "* ]]; then
			SERVICES+=("$name")
		fi
	done
}

reversed() {
	local i
	for ((i = ${#SERVICES[@]} - 1; i >= 0; i--)); do
		printf '%s\n' "${SERVICES[i]}"
	done
}

# One start/stop/install at a time per LOCAL_DIR (make targets may run in parallel).
# The lock is fd 9: every daemon we start must close it (9>&-), or it would hold the
# lock for as long as it runs.
take_lock() {
	command -v flock >/dev/null 2>&1 || return 0
	exec 9>"$LOCAL_DIR/.services.lock"
	if ! flock -n 9; then
		log "waiting for another services.sh on $LOCAL_DIR"
		flock -w 900 9 || die "another services.sh still holds $LOCAL_DIR/.services.lock after 900s"
	fi
}

write_env() {
	local tmp=$ENV_FILE.tmp
	{
		echo "# Written by deploy/local/services.sh start. Use: . $ENV_FILE"
		echo "export WALHOUSE_PG_URL=postgres://postgres@127.0.0.1:$(postgres_port)/walhouse?sslmode=disable"
		echo "export WALHOUSE_PG_MAJOR=$(pg_data_major || echo "$PG_MAJOR")"
		echo "export WALHOUSE_KAFKA_BROKERS=127.0.0.1:$(kafka_port)"
		# A broker started before its SASL listener existed has no sasl_port.
		if [[ -s $KAFKA_ROOT/sasl_port ]]; then
			echo "export WALHOUSE_KAFKA_SASL_BROKERS=127.0.0.1:$(<"$KAFKA_ROOT/sasl_port")"
		fi
		# Likewise for the TLS listener. Its CA goes in a variable of its own: the
		# name WALHOUSE_KAFKA_TLS_CA is walhouse's --kafka-tls-ca, which would turn on
		# TLS towards WALHOUSE_KAFKA_BROKERS (plaintext) in every sourcing shell.
		if [[ -s $KAFKA_ROOT/tls_port && -s $KAFKA_TLS_CA ]]; then
			echo "export WALHOUSE_KAFKA_TLS_BROKERS=127.0.0.1:$(<"$KAFKA_ROOT/tls_port")"
			echo "export WALHOUSE_KAFKA_TLS_BROKERS_CA=$KAFKA_TLS_CA"
		fi
		echo "export WALHOUSE_REDIS_ADDR=127.0.0.1:$(redis_port)"
		# The TLS listener, under names of its own: WALHOUSE_REDIS_TLS_CA and the like
		# are walhouse's --dedup-tls-* flags, which would turn on TLS towards
		# WALHOUSE_REDIS_ADDR (plain) in every sourcing shell.
		if [[ -s $REDIS_ROOT/tls_port && -s $REDIS_TLS_CA ]]; then
			echo "export WALHOUSE_REDIS_TLS_SERVER=127.0.0.1:$(<"$REDIS_ROOT/tls_port")"
			echo "export WALHOUSE_REDIS_TLS_SERVER_CA=$REDIS_TLS_CA"
			echo "export WALHOUSE_REDIS_TLS_SERVER_CLIENT_CERT=$REDIS_TLS_DIR/client.crt"
			echo "export WALHOUSE_REDIS_TLS_SERVER_CLIENT_KEY=$REDIS_TLS_DIR/client.key"
		fi
		echo "export WALHOUSE_CLICKHOUSE_URL=http://127.0.0.1:$(clickhouse_port)"
		echo "export WALHOUSE_CHDB_LIB=$CHDB_LIB"
	} >"$tmp"
	mv -f "$tmp" "$ENV_FILE"
}

cmd_install() {
	local s
	for s in "${SERVICES[@]}"; do
		"${s}_install"
	done
}

cmd_start() {
	local s t0=$SECONDS
	reserve_ports "$PG_PORT" $((PG_PORT + 1)) $((PG_PORT + 2)) "$REDIS_PORT" "$REDIS_TLS_PORT" \
		"$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_PORT" "$KAFKA_TLS_PORT" "$CH_PORT"
	for s in "${SERVICES[@]}"; do
		"${s}_start"
	done
	write_env
	log "ready: ${SERVICES[*]} ($((SECONDS - t0))s); environment in $ENV_FILE"
}

cmd_stop() {
	local s
	for s in $(reversed); do
		"${s}_stop"
	done
}

cmd_status() {
	local s pid rc=0
	for s in "${SERVICES[@]}"; do
		if pid=$("${s}_pid"); then
			printf '%-10s  running  port %-5s  pid %s\n' "$s" "$("${s}_port")" "$pid"
		else
			printf '%-10s  stopped  port %-5s  pid -\n' "$s" "$("${s}_port")"
			rc=3
		fi
	done
	return "$rc"
}

cmd_env() {
	[[ -r $ENV_FILE ]] || die "no $ENV_FILE yet: run deploy/local/services.sh start"
	cat "$ENV_FILE"
}

cmd_logs() {
	local follow=0 lines=100 s files=()
	while [[ $# -gt 0 ]]; do
		case $1 in
		-f | --follow) follow=1 ;;
		-n) lines=${2:?-n needs a number}; shift ;;
		*) break ;;
		esac
		shift
	done
	select_services "$@"
	for s in "${SERVICES[@]}"; do
		files+=("$("${s}_log")")
	done
	if ((follow)); then
		exec tail -n "$lines" -F "${files[@]}"
	fi
	for s in "${!files[@]}"; do
		if [[ -r ${files[s]} ]]; then
			((${#files[@]} == 1)) || printf '==> %s <==\n' "${files[s]}"
			tail -n "$lines" "${files[s]}"
		else
			log "no log yet: ${files[s]}"
		fi
	done
}

cmd_clean() {
	local s
	cmd_stop
	for s in "${SERVICES[@]}"; do
		log "$s: deleting its data"
		"${s}_clean"
	done
	[[ ${#SERVICES[@]} -ne ${#ALL_SERVICES[@]} ]] || rm -f "$ENV_FILE"
}

main() {
	local cmd=${1:-}
	[[ $# -eq 0 ]] || shift
	case $cmd in
	install | start | stop | restart | clean) select_services "$@"; take_lock ;;
	status) select_services "$@" ;;
	env) ;;
	logs) cmd_logs "$@"; return ;;
	kafka) kafka_tool "$@"; return ;;
	-h | --help | help) usage; return ;;
	"") usage >&2; exit 2 ;;
	*) log "unknown command '$cmd'"; usage >&2; exit 2 ;;
	esac
	case $cmd in
	install) cmd_install ;;
	start) cmd_start ;;
	stop) cmd_stop ;;
	restart) cmd_stop; cmd_start ;;
	status) cmd_status ;;
	env) cmd_env ;;
	clean) cmd_clean ;;
	esac
}

main "$@"

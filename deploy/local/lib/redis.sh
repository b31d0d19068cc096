# shellcheck shell=bash disable=SC2153 # the *_PORT settings are defined in common.sh
# Redis (Debian's redis-server) on loopback, no persistence: walhouse uses it for leases
# and dedup keys (SET NX EX), the same commands and protocol as Valkey.
#
# Layout: $LOCAL_DIR/redis/{data/ (working dir), redis.pid, redis.log, port}

REDIS_ROOT=$LOCAL_DIR/redis
REDIS_PIDFILE=$REDIS_ROOT/redis.pid
REDIS_LOG=$REDIS_ROOT/redis.log

redis_log() { printf '%s\n' "$REDIS_LOG"; }

redis_install() {
	command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && return 0
	apt_install redis-server
	command -v redis-server >/dev/null 2>&1 || die "redis: redis-server missing after installing redis-server"
}

redis_pid() {
	pidfile_pid "$REDIS_PIDFILE" redis-server
}

redis_port() {
	if redis_pid >/dev/null && [[ -s $REDIS_ROOT/port ]]; then
		cat "$REDIS_ROOT/port"
	else
		printf '%s\n' "$REDIS_PORT"
	fi
}

redis_ready() {
	[[ $(redis-cli -h 127.0.0.1 -p "$(redis_port)" ping 2>/dev/null) == PONG ]]
}

redis_start() {
	local pid spawned=0
	if pid=$(redis_pid); then
		log "redis: already running (pid $pid, port $(redis_port))"
	else
		redis_install
		check_port_free redis "$REDIS_PORT"
		mkdir -p "$REDIS_ROOT/data"
		rm -f "$REDIS_PIDFILE"
		printf '%s\n' "$REDIS_PORT" >"$REDIS_ROOT/port"
		log "redis: starting on 127.0.0.1:$REDIS_PORT"
		log_mark redis "$REDIS_LOG"
		spawned=1
		# --save "" and --appendonly no: nothing is persisted, a restart starts empty.
		redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
			--save "" --appendonly no \
			--daemonize yes --pidfile "$REDIS_PIDFILE" --logfile "$REDIS_LOG" \
			--dir "$REDIS_ROOT/data" </dev/null 9>&- ||
			{ show_log_tail "$REDIS_LOG"; die "redis: redis-server failed to start; read $REDIS_LOG"; }
		# The daemonized server writes its pid file shortly after forking.
		local deadline=$((SECONDS + 10))
		until redis_pid >/dev/null; do
			if ((SECONDS >= deadline)); then
				show_log_tail "$REDIS_LOG"
				die "redis: no live process behind $REDIS_PIDFILE; read $REDIS_LOG"
			fi
			sleep 0.1
		done
	fi
	wait_ready redis "$REDIS_LOG" redis_pid redis_ready || start_failed redis redis_stop "$spawned"
}

redis_stop() {
	local pid
	pid=$(redis_pid) || return 0
	log "redis: stopping (pid $pid)"
	redis-cli -h 127.0.0.1 -p "$(redis_port)" shutdown nosave >/dev/null 2>&1 || true
	if ! wait_exit "$pid" "$STOP_TIMEOUT"; then
		stop_pid redis "$pid"
	fi
	rm -f "$REDIS_PIDFILE"
}

redis_clean() {
	rm -rf "$REDIS_ROOT"
}

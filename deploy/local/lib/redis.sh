# shellcheck shell=bash disable=SC2153 # the *_PORT settings are defined in common.sh
# Redis (Debian's redis-server) on loopback, no persistence: walhouse uses it for leases
# and dedup keys (SET NX EX), the same commands and protocol as Valkey.
#
# A second listener on REDIS_TLS_PORT speaks TLS with a certificate from a throwaway CA
# (clients may present the client certificate signed by it), and an ACL user walhouse
# with the password walhouse-local exists besides the default user (which stays
# password-less, so the plain port needs no AUTH): the tests of the dedup store's
# AUTH and TLS use them.
#
# Layout: $LOCAL_DIR/redis/{data/ (working dir), tls/ (ca.pem, server.crt/.key,
#         client.crt/.key), redis.pid, redis.log, port, tls_port}

REDIS_ROOT=$LOCAL_DIR/redis
REDIS_PIDFILE=$REDIS_ROOT/redis.pid
REDIS_LOG=$REDIS_ROOT/redis.log
REDIS_TLS_DIR=$REDIS_ROOT/tls
REDIS_TLS_CA=$REDIS_TLS_DIR/ca.pem
REDIS_TLS_USER=walhouse
REDIS_TLS_PASSWORD=walhouse-local

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
	service_port redis_pid "$REDIS_ROOT" "$REDIS_PORT"
}

redis_ready() {
	[[ $(redis-cli -h 127.0.0.1 -p "$(redis_port)" ping 2>/dev/null) == PONG ]]
}

# redis_tls_certs: makes the TLS listener's certificates if missing, kept across
# restarts so that a client's copy of ca.pem stays good.
redis_tls_certs() {
	[[ -s $REDIS_TLS_CA && -s $REDIS_TLS_DIR/server.key && -s $REDIS_TLS_DIR/client.key ]] && return 0
	log "redis: making a throwaway CA, server and client certificates in $REDIS_TLS_DIR"
	make_test_certs redis "$REDIS_TLS_DIR.tmp"
	rm -rf "$REDIS_TLS_DIR"
	mv "$REDIS_TLS_DIR.tmp" "$REDIS_TLS_DIR"
}

redis_start() {
	local pid spawned=0
	if pid=$(redis_pid) && [[ ! -s $REDIS_ROOT/tls_port ]]; then
		# Started by an older services.sh, without the TLS listener the tests need.
		log "redis: running without the TLS listener; restarting it"
		redis_stop
	fi
	if pid=$(redis_pid); then
		log "redis: already running (pid $pid, port $(redis_port))"
	else
		redis_install
		check_port_free redis "$REDIS_PORT"
		check_port_free "redis tls" "$REDIS_TLS_PORT"
		mkdir -p "$REDIS_ROOT/data"
		redis_tls_certs
		rm -f "$REDIS_PIDFILE"
		printf '%s\n' "$REDIS_PORT" >"$REDIS_ROOT/port"
		printf '%s\n' "$REDIS_TLS_PORT" >"$REDIS_ROOT/tls_port"
		log "redis: starting on 127.0.0.1:$REDIS_PORT (TLS $REDIS_TLS_PORT)"
		log_mark redis "$REDIS_LOG"
		spawned=1
		# --save "" and --appendonly no: nothing is persisted, a restart starts empty.
		redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
			--tls-port "$REDIS_TLS_PORT" --tls-cert-file "$REDIS_TLS_DIR/server.crt" \
			--tls-key-file "$REDIS_TLS_DIR/server.key" --tls-ca-cert-file "$REDIS_TLS_CA" \
			--tls-auth-clients optional \
			--user "$REDIS_TLS_USER" on ">$REDIS_TLS_PASSWORD" '~*' '&*' '+@all' \
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
	rm -f "$REDIS_PIDFILE" "$REDIS_ROOT/tls_port"
}

redis_clean() {
	rm -rf "$REDIS_ROOT"
}

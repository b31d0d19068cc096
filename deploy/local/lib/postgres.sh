# shellcheck shell=bash
# PostgreSQL 15 (Debian's postgresql-15) as a private instance: its own data dir, port and
# socket dir, logical decoding on, trust auth on loopback only.
#
# Layout: $LOCAL_DIR/postgres/{data/, run/ (unix socket), postgres.log}
#
# initdb and pg_ctl refuse to run as root, and CI runs as root: then they run as the
# `postgres` system user (created by the Debian package), which must own the directory.
# When $LOCAL_DIR is not reachable by that user (e.g. a checkout under /root, mode 700),
# the directory lives in /var/tmp/walhouse-<hash of $LOCAL_DIR>/postgres instead and
# $LOCAL_DIR/postgres is a symlink to it; we do not change the permissions of the
# user's directories.

PG_MAJOR=15
PG_BIN=${PG_BIN:-/usr/lib/postgresql/$PG_MAJOR/bin}
PG_LINK=$LOCAL_DIR/postgres

# pg_set_paths: PG_ROOT is $LOCAL_DIR/postgres, or the directory it links to: the server's
# user may be unable to follow the link's own path.
pg_set_paths() {
	PG_ROOT=$PG_LINK
	if [[ -L $PG_LINK && -d $PG_LINK ]]; then
		PG_ROOT=$(readlink -f "$PG_LINK")
	fi
	PG_DATA=$PG_ROOT/data
	PG_LOG=$PG_ROOT/postgres.log
}
pg_set_paths

postgres_log() { printf '%s\n' "$PG_LOG"; }

# pg_run CMD...: runs CMD as the postgres user when we are root, else as ourselves.
pg_run() {
	if [[ $EUID -eq 0 ]]; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

postgres_install() {
	if [[ ! -x $PG_BIN/initdb || ! -x $PG_BIN/psql ]]; then
		apt_install "postgresql-$PG_MAJOR"
		[[ -x $PG_BIN/initdb ]] || die "postgres: $PG_BIN/initdb missing after installing postgresql-$PG_MAJOR (set PG_BIN?)"
	fi
	if [[ $EUID -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
		die "postgres: running as root but there is no 'postgres' user to run initdb/pg_ctl as (the Debian package creates it)"
	fi
}

# postgres_pid: the postmaster's pid if it runs on our data dir.
postgres_pid() {
	pidfile_pid "$PG_DATA/postmaster.pid" postgres
}

# postgres_port: the port the running instance listens on (line 4 of postmaster.pid),
# else the configured one.
postgres_port() {
	local port
	if postgres_pid >/dev/null && port=$(sed -n 4p "$PG_DATA/postmaster.pid" 2>/dev/null) && [[ -n $port ]]; then
		printf '%s\n' "$port"
	else
		printf '%s\n' "$PG_PORT"
	fi
}

# pg_usable DIR: true if the user running the server can write into DIR (path included).
pg_usable() {
	pg_run test -w "$1" -a -x "$1"
}

# pg_prepare_root: makes $PG_ROOT exist, owned by (and reachable for) the server's user.
pg_prepare_root() {
	if [[ -L $PG_LINK && ! -d $PG_LINK ]]; then
		log "postgres: $PG_LINK points to a directory that is gone; making a new one"
		rm -f "$PG_LINK"
	fi
	if [[ ! -e $PG_LINK ]]; then
		mkdir -p "$PG_LINK"
		[[ $EUID -ne 0 ]] || chown postgres:postgres "$PG_LINK"
		if ! pg_usable "$PG_LINK"; then
			local alt
			alt=/var/tmp/walhouse-$(printf '%s' "$LOCAL_DIR" | sha256sum | cut -c1-12)/postgres
			log "postgres: user 'postgres' cannot reach $PG_LINK; keeping the data in $alt (symlinked)"
			rmdir "$PG_LINK"
			mkdir -p "$alt"
			chmod 755 "$(dirname "$alt")"
			[[ $EUID -ne 0 ]] || chown postgres:postgres "$alt"
			ln -s "$alt" "$PG_LINK"
		fi
	fi
	pg_set_paths
	pg_usable "$PG_ROOT" || die "postgres: user 'postgres' cannot write $PG_ROOT; remove $PG_LINK and retry"
	pg_run mkdir -p "$PG_ROOT/run"
}

# pg_socket_dir: our socket dir, unless its path is too long for a unix socket name
# (108 bytes including "/.s.PGSQL.<port>"), then one under /tmp.
pg_socket_dir() {
	local dir
	dir=$PG_ROOT/run
	if ((${#dir} > 85)); then
		dir=/tmp/walhouse-pg-$(printf '%s' "$LOCAL_DIR" | sha256sum | cut -c1-12)
		mkdir -p "$dir"
		[[ $EUID -ne 0 ]] || chown postgres:postgres "$dir"
	fi
	printf '%s\n' "$dir"
}

pg_initdb() {
	log "postgres: initdb $PG_DATA"
	pg_run "$PG_BIN/initdb" -D "$PG_DATA" --username=postgres --auth=trust \
		--encoding=UTF8 --locale=C --no-instructions >>"$PG_LOG.initdb" 2>&1 ||
		{ show_log_tail "$PG_LOG.initdb"; die "postgres: initdb failed; read $PG_LOG.initdb"; }
	# Our settings live in walhouse.conf (rewritten at each start); include it last so it wins.
	printf "\n# walhouse: local test instance settings (deploy/local/lib/postgres.sh)\ninclude_if_exists = 'walhouse.conf'\n" |
		pg_run tee -a "$PG_DATA/postgresql.conf" >/dev/null
}

pg_write_conf() {
	local sockdir
	sockdir=$(pg_socket_dir)
	pg_run tee "$PG_DATA/walhouse.conf" >/dev/null <<EOF
# Written by deploy/local/services.sh at each start; edits are lost.
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$sockdir'
max_connections = 200
shared_buffers = 256MB
# Logical decoding for walhouse's capture (pgoutput + replication slots).
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
# A throwaway test instance: durability is not wanted, speed is. Never do this for real data.
fsync = off
synchronous_commit = off
EOF
	# Trust replication connections from loopback (initdb --auth=trust usually adds it already).
	if ! grep -Eq '^host[[:space:]]+replication[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$PG_DATA/pg_hba.conf"; then
		printf 'host replication all 127.0.0.1/32 trust\n' | pg_run tee -a "$PG_DATA/pg_hba.conf" >/dev/null
	fi
}

pg_psql() {
	"$PG_BIN/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(postgres_port)" -U postgres "$@"
}

pg_ready() {
	"$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$(postgres_port)" -U postgres -d postgres &&
		[[ $(pg_psql -d postgres -c 'select 1') == 1 ]]
}

postgres_start() {
	local pid spawned=0
	if pid=$(postgres_pid); then
		log "postgres: already running (pid $pid, port $(postgres_port))"
	else
		postgres_install
		pg_prepare_root
		[[ -f $PG_DATA/PG_VERSION ]] || pg_initdb
		pg_write_conf
		check_port_free postgres "$PG_PORT"
		log "postgres: starting on 127.0.0.1:$PG_PORT"
		pg_run touch "$PG_LOG"
		log_mark postgres "$PG_LOG"
		spawned=1
		# pg_ctl -w waits until the server accepts connections (or died, or timed out).
		if ! pg_run "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t "$START_TIMEOUT" start </dev/null >/dev/null 9>&-; then
			show_log_tail "$PG_LOG"
			log "error: postgres: failed to start; read $PG_LOG"
			start_failed postgres postgres_stop 1
		fi
	fi
	wait_ready postgres "$PG_LOG" postgres_pid pg_ready || start_failed postgres postgres_stop "$spawned"
	if [[ -z $(pg_psql -d postgres -c "select 1 from pg_database where datname = 'walhouse'") ]]; then
		log "postgres: creating database walhouse"
		pg_psql -d postgres -c 'create database walhouse' || die "postgres: create database walhouse failed"
	fi
}

postgres_stop() {
	local pid
	pid=$(postgres_pid) || return 0
	log "postgres: stopping (pid $pid)"
	if ! pg_run "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -t "$STOP_TIMEOUT" stop >/dev/null; then
		log "postgres: fast shutdown timed out; immediate shutdown"
		pg_run "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -t 30 stop >/dev/null ||
			die "postgres: could not stop pid $pid; read $PG_LOG"
	fi
}

postgres_clean() {
	if [[ -L $PG_LINK ]]; then
		rm -rf "$PG_ROOT"
		rmdir "$(dirname "$PG_ROOT")" 2>/dev/null || true
		rm -f "$PG_LINK"
	else
		rm -rf "$PG_LINK"
	fi
	rm -rf "/tmp/walhouse-pg-$(printf '%s' "$LOCAL_DIR" | sha256sum | cut -c1-12)"
	pg_set_paths
}

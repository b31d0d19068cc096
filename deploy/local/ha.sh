#!/usr/bin/env bash
# A PostgreSQL primary and a streaming physical standby on loopback, for walhouse's tests of
# decoding on a standby (PostgreSQL 16+) and of failover slots (17+). See docs/ha.md.
# The pair is its own: it is not services.sh's PostgreSQL, so killing its primary disturbs
# no other test; Kafka, Redis and ClickHouse stay services.sh's.
#
# usage: deploy/local/ha.sh COMMAND
#   start         start the primary and the standby (building the standby from a base copy of
#                 the primary when it is missing, of another major, or was promoted), wait
#                 until it streams, write .local/ha.env
#   stop          stop both (data kept)
#   status        one line per server; exit status 3 if one of them is not running
#   env           print .local/ha.env (source it: `. .local/ha.env`)
#   promote       promote the standby (pg_ctl promote): it becomes a primary on its own port
#   kill-primary  SIGKILL the primary's postmaster and all its processes (a crash)
#   clean         stop both and delete their data
#
# Settings (env): PG_HA_MAJOR (16-18; default PG_MAJOR when that is 16 or more, else 17),
# PG_HA_PORT (the primary; default PG_PORT+1), PG_HA_STANDBY_PORT (default PG_PORT+2).
#
# What it sets up (docs/ha.md explains each):
#   primary  wal_level=logical; a physical slot walhouse_standby for the standby;
#            on 17+ synchronized_standby_slots = 'walhouse_standby'
#   standby  a base copy of the primary taken with pg_backup_start/pg_backup_stop in a held
#            session (the npm builds ship no pg_basebackup, and Debian's 15 refuses newer
#            servers); standby.signal; primary_conninfo (with dbname) and primary_slot_name;
#            hot_standby_feedback = on; wal_level=logical (for decoding on it);
#            on 17+ sync_replication_slots = on
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=lib/common.sh
. "$_here/lib/common.sh"
# shellcheck source=lib/postgres.sh
. "$_here/lib/postgres.sh"

if [[ -z ${PG_HA_MAJOR:-} ]]; then
	PG_HA_MAJOR=17
	[[ $PG_MAJOR -lt 16 ]] || PG_HA_MAJOR=$PG_MAJOR
fi
[[ $PG_HA_MAJOR =~ ^(16|17|18)$ ]] || die "ha: PG_HA_MAJOR=$PG_HA_MAJOR: decoding on a standby needs PostgreSQL 16, 17 or 18"
PG_HA_PORT=${PG_HA_PORT:-$((PG_PORT + 1))}
PG_HA_STANDBY_PORT=${PG_HA_STANDBY_PORT:-$((PG_PORT + 2))}
HA_ENV_FILE=$LOCAL_DIR/ha.env
# The standby's physical slot on the primary, also named by synchronized_standby_slots.
HA_SLOT=walhouse_standby

ha_log() { log "ha: $*"; }

# ha_paths: HA_ROOT under the postgres root (which pg_prepare_root makes reachable for the
# server's user), one directory per server.
ha_paths() {
	HA_ROOT=$PG_ROOT/ha
	HA_PRIMARY=$HA_ROOT/primary
	HA_STANDBY=$HA_ROOT/standby
}
ha_paths

ha_bin() { pg_server_bin "$PG_HA_MAJOR"; }

# ha_pid DIR: the postmaster's pid if one runs on DIR.
ha_pid() { pidfile_pid "$1/postmaster.pid" postgres; }

# ha_psql PORT ARGS...: psql (Debian's 15 client) on the server at PORT, database walhouse
# unless ARGS say otherwise.
ha_psql() {
	local port=$1
	shift
	"$PG_CLIENT_BIN/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d walhouse "$@"
}

ha_ready() {
	"$PG_CLIENT_BIN/pg_isready" -q -h 127.0.0.1 -p "$1" -U postgres -d postgres &&
		[[ $("$PG_CLIENT_BIN/psql" -X -A -t -q -h 127.0.0.1 -p "$1" -U postgres -d postgres -c 'select 1' 2>/dev/null) == 1 ]]
}

# ha_write_conf DIR PORT ROLE: the instance's walhouse.conf (included last by its
# postgresql.conf), rewritten at each start.
ha_write_conf() {
	local dir=$1 port=$2 role=$3
	{
		echo "# Written by deploy/local/ha.sh at each start ($role); edits are lost."
		pg_conf_settings "$port" 100 128MB
		if [[ $role == standby ]]; then
			cat <<EOF
hot_standby = on
# The standby tells the primary which rows its queries and its logical slots still need,
# so that VACUUM on the primary does not remove them (without it a slot on the standby
# is invalidated by the first conflicting cleanup).
hot_standby_feedback = on
primary_conninfo = 'host=127.0.0.1 port=$PG_HA_PORT user=postgres dbname=walhouse application_name=$HA_SLOT'
primary_slot_name = '$HA_SLOT'
EOF
			# 17+: copy the primary's failover slots (pg_replication_slots.failover) to
			# this standby, so that capture finds its slot here after a promotion.
			[[ $PG_HA_MAJOR -lt 17 ]] || echo "sync_replication_slots = on"
		fi
	} | pg_run tee "$dir/walhouse.conf" >/dev/null
}

# ha_start_instance DIR PORT NAME: starts the server on DIR and waits until it accepts
# connections.
ha_start_instance() {
	local dir=$1 port=$2 name=$3 pid
	if pid=$(ha_pid "$dir"); then
		ha_log "$name already running (pid $pid, port $port)"
		return 0
	fi
	check_port_free "ha $name" "$port"
	ha_log "starting the $name (PostgreSQL $PG_HA_MAJOR) on 127.0.0.1:$port"
	pg_run touch "$dir.log"
	log_mark "ha $name" "$dir.log"
	if ! pg_run "$(ha_bin)/pg_ctl" -D "$dir" -l "$dir.log" -w -t "$START_TIMEOUT" start </dev/null >/dev/null; then
		show_log_tail "$dir.log"
		die "ha: the $name failed to start; read $dir.log"
	fi
	wait_ready "ha $name" "$dir.log" "ha_pid $dir" ha_ready "$port" || die "ha: the $name is not ready; read $dir.log"
}

ha_stop_instance() {
	local dir=$1 name=$2 pid
	pid=$(ha_pid "$dir") || return 0
	ha_log "stopping the $name (pid $pid)"
	if ! pg_run "$(ha_bin)/pg_ctl" -D "$dir" -m fast -t "$STOP_TIMEOUT" stop >/dev/null; then
		pg_run "$(ha_bin)/pg_ctl" -D "$dir" -m immediate -t 30 stop >/dev/null || die "ha: could not stop the $name (pid $pid)"
	fi
}

# ha_major DIR: the major of the data dir DIR, if there is one.
ha_major() { [[ -r $1/PG_VERSION ]] && cat "$1/PG_VERSION"; }

ha_start_primary() {
	local have
	if have=$(ha_major "$HA_PRIMARY") && [[ $have != "$PG_HA_MAJOR" ]]; then
		ha_stop_instance "$HA_PRIMARY" primary
		ha_stop_instance "$HA_STANDBY" standby
		ha_log "the pair is of PostgreSQL $have and PG_HA_MAJOR=$PG_HA_MAJOR: making a new one"
		pg_run rm -rf "$HA_PRIMARY" "$HA_STANDBY"
	fi
	if [[ ! -f $HA_PRIMARY/PG_VERSION ]]; then
		ha_log "initdb $HA_PRIMARY (PostgreSQL $PG_HA_MAJOR)"
		pg_run mkdir -p "$HA_ROOT"
		pg_run "$(ha_bin)/initdb" -D "$HA_PRIMARY" --username=postgres --auth=trust --encoding=UTF8 --locale=C \
			--no-instructions >>"$HA_ROOT/initdb.log" 2>&1 || { show_log_tail "$HA_ROOT/initdb.log"; die "ha: initdb failed"; }
		printf "\n# walhouse: local HA pair settings (deploy/local/ha.sh)\ninclude_if_exists = 'walhouse.conf'\n" |
			pg_run tee -a "$HA_PRIMARY/postgresql.conf" >/dev/null
		grep -Eq '^host[[:space:]]+replication[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$HA_PRIMARY/pg_hba.conf" ||
			printf 'host replication all 127.0.0.1/32 trust\n' | pg_run tee -a "$HA_PRIMARY/pg_hba.conf" >/dev/null
	fi
	ha_write_conf "$HA_PRIMARY" "$PG_HA_PORT" primary
	ha_start_instance "$HA_PRIMARY" "$PG_HA_PORT" primary
	[[ -n $(ha_psql "$PG_HA_PORT" -d postgres -c "select 1 from pg_database where datname = 'walhouse'") ]] ||
		ha_psql "$PG_HA_PORT" -d postgres -c 'create database walhouse' >/dev/null
	# Reserved at once: the standby streams the WAL from its base copy's start through it.
	ha_psql "$PG_HA_PORT" -c "select pg_create_physical_replication_slot('$HA_SLOT', true)
		where not exists (select 1 from pg_replication_slots where slot_name = '$HA_SLOT')" >/dev/null
	if [[ $PG_HA_MAJOR -ge 17 ]]; then
		# Logical walsenders of failover slots send no change the standby has not
		# received: a change capture saw is never lost by a failover to this standby.
		# Set once the slot it names exists (the setting is checked against the slots).
		printf "synchronized_standby_slots = '%s'\n" "$HA_SLOT" | pg_run tee -a "$HA_PRIMARY/walhouse.conf" >/dev/null
		ha_psql "$PG_HA_PORT" -c 'select pg_reload_conf()' >/dev/null
	fi
}

# ha_base_copy: a fresh standby data dir from the running primary, with the low-level
# backup API: pg_backup_start in a session held open while the files are copied, then
# pg_backup_stop in that same session, whose label file becomes the copy's backup_label.
ha_base_copy() {
	local label=$HA_ROOT/backup_label.tmp rc
	ha_log "base copy of the primary into $HA_STANDBY (pg_backup_start, copy, pg_backup_stop)"
	pg_run rm -rf "$HA_STANDBY"
	pg_run mkdir -p "$HA_STANDBY"
	pg_run chmod 700 "$HA_STANDBY"
	rm -f "$label"
	coproc BACKUP { ha_psql "$PG_HA_PORT" -d postgres 2>&1; }
	# shellcheck disable=SC2154 # BACKUP is the coprocess's fds
	local to=${BACKUP[1]} from=${BACKUP[0]} line
	printf "select 'started ' || pg_backup_start('walhouse ha.sh', true);\n" >&"$to"
	read -r -t 120 line <&"$from" || die "ha: pg_backup_start gave no answer"
	[[ $line == started* ]] || die "ha: pg_backup_start failed: $line"
	# The WAL comes through the slot, the server's runtime files are its own; GNU tar exits 1
	# when a file changed while it was read, which a backup copy tolerates (the WAL replayed
	# from the backup's start repairs it).
	set +e
	pg_run tar -C "$HA_PRIMARY" -cf - --exclude=./postmaster.pid --exclude=./postmaster.opts \
		--exclude='./pg_wal/*' --exclude='./pg_replslot/*' --exclude=./postgresql.auto.conf \
		--exclude='./pg_stat_tmp/*' --exclude='./pg_dynshmem/*' --exclude='./pg_notify/*' \
		--exclude='./pg_serial/*' --exclude='./pg_snapshots/*' --exclude='./pg_subtrans/*' \
		--exclude=./backup_label --exclude=./tablespace_map --exclude=./standby.signal . 2>/dev/null |
		pg_run tar -C "$HA_STANDBY" -xf -
	rc=("${PIPESTATUS[@]}")
	set -e
	[[ ${rc[0]} -le 1 && ${rc[1]} -eq 0 ]] || die "ha: copying $HA_PRIMARY failed (tar exit ${rc[*]})"
	printf '\\o %s\nselect labelfile from pg_backup_stop(false);\n\\o\nselect %s;\n' "$label" "'stopped'" >&"$to"
	read -r -t 120 line <&"$from" || die "ha: pg_backup_stop gave no answer"
	[[ $line == stopped ]] || die "ha: pg_backup_stop failed: $line"
	exec {to}>&-
	wait "$BACKUP_PID" 2>/dev/null || true
	[[ -s $label ]] || die "ha: pg_backup_stop returned no label file"
	pg_run tee "$HA_STANDBY/backup_label" <"$label" >/dev/null
	rm -f "$label"
	pg_run touch "$HA_STANDBY/standby.signal"
}

ha_standby_role() {
	[[ $(ha_psql "$PG_HA_STANDBY_PORT" -c 'select pg_is_in_recovery()' 2>/dev/null) == t ]]
}

ha_streaming() {
	[[ $(ha_psql "$PG_HA_STANDBY_PORT" -c "select status from pg_stat_wal_receiver" 2>/dev/null) == streaming ]]
}

ha_start_standby() {
	local rebuild=""
	if [[ ! -f $HA_STANDBY/PG_VERSION ]]; then
		rebuild="there is none yet"
	elif [[ ! -f $HA_STANDBY/standby.signal ]]; then
		rebuild="it was promoted"
	fi
	if [[ -n $rebuild ]]; then
		ha_stop_instance "$HA_STANDBY" standby
		ha_log "making a new standby: $rebuild"
		ha_base_copy
	fi
	ha_write_conf "$HA_STANDBY" "$PG_HA_STANDBY_PORT" standby
	ha_start_instance "$HA_STANDBY" "$PG_HA_STANDBY_PORT" standby
	ha_standby_role || die "ha: the server on $PG_HA_STANDBY_PORT is not in recovery"
	wait_ready "ha standby's WAL receiver" "$HA_STANDBY.log" "ha_pid $HA_STANDBY" ha_streaming ||
		die "ha: the standby does not stream from the primary; read $HA_STANDBY.log"
}

ha_write_env() {
	local tmp=$HA_ENV_FILE.tmp
	{
		echo "# Written by deploy/local/ha.sh start. Use: . $HA_ENV_FILE"
		echo "export WALHOUSE_HA_PG_MAJOR=$PG_HA_MAJOR"
		echo "export WALHOUSE_HA_PRIMARY_URL='postgres://postgres@127.0.0.1:$PG_HA_PORT/walhouse?sslmode=disable'"
		echo "export WALHOUSE_HA_STANDBY_URL='postgres://postgres@127.0.0.1:$PG_HA_STANDBY_PORT/walhouse?sslmode=disable'"
		echo "# Whichever of the two is the primary (what capture is given to follow a failover)."
		echo "export WALHOUSE_HA_URL='postgres://postgres@127.0.0.1:$PG_HA_PORT,127.0.0.1:$PG_HA_STANDBY_PORT/walhouse?sslmode=disable&target_session_attrs=read-write'"
		echo "export WALHOUSE_HA_SCRIPT=$_here/ha.sh"
		echo "# ha.sh's own settings, for the tests' calls of ha.sh (kill-primary, promote, start)."
		echo "export WALHOUSE_HA_SETTINGS='PG_HA_MAJOR=$PG_HA_MAJOR PG_HA_PORT=$PG_HA_PORT PG_HA_STANDBY_PORT=$PG_HA_STANDBY_PORT'"
	} >"$tmp"
	mv -f "$tmp" "$HA_ENV_FILE"
}

cmd_start() {
	local t0=$SECONDS
	PG_MAJOR=$PG_HA_MAJOR postgres_install
	pg_prepare_root
	ha_paths
	if [[ -f $HA_STANDBY/PG_VERSION && ! -f $HA_STANDBY/standby.signal ]] && ! ha_pid "$HA_PRIMARY" >/dev/null; then
		# After a failover (kill-primary, promote): the old primary comes back as the primary
		# and the promoted standby, now diverged, is copied afresh.
		ha_log "the standby was promoted and the primary is down: restoring the pair (the promoted standby's data is dropped)"
		ha_stop_instance "$HA_STANDBY" standby
	fi
	ha_start_primary
	ha_start_standby
	ha_write_env
	ha_log "ready: primary 127.0.0.1:$PG_HA_PORT, standby 127.0.0.1:$PG_HA_STANDBY_PORT (PostgreSQL $PG_HA_MAJOR, $((SECONDS - t0))s); environment in $HA_ENV_FILE"
}

cmd_stop() {
	ha_stop_instance "$HA_STANDBY" standby
	ha_stop_instance "$HA_PRIMARY" primary
}

cmd_status() {
	local rc=0 name dir port pid role
	for name in primary standby; do
		dir=$HA_PRIMARY port=$PG_HA_PORT
		[[ $name == primary ]] || dir=$HA_STANDBY port=$PG_HA_STANDBY_PORT
		if pid=$(ha_pid "$dir"); then
			role=primary
			[[ $(ha_psql "$port" -c 'select pg_is_in_recovery()' 2>/dev/null) != t ]] || role=standby
			printf '%-8s  running  port %-5s  pid %-7s  now a %s\n' "$name" "$port" "$pid" "$role"
		else
			printf '%-8s  stopped  port %-5s  pid -\n' "$name" "$port"
			rc=3
		fi
	done
	return "$rc"
}

cmd_promote() {
	ha_pid "$HA_STANDBY" >/dev/null || die "ha: the standby is not running"
	ha_log "promoting the standby on port $PG_HA_STANDBY_PORT"
	pg_run "$(ha_bin)/pg_ctl" -D "$HA_STANDBY" -w -t "$START_TIMEOUT" promote >/dev/null || die "ha: pg_ctl promote failed; read $HA_STANDBY.log"
}

cmd_kill_primary() {
	local pid children
	pid=$(ha_pid "$HA_PRIMARY") || die "ha: the primary is not running"
	children=$(pgrep -P "$pid" || true)
	ha_log "SIGKILL to the primary's postmaster (pid $pid) and its $(wc -w <<<"$children") processes"
	# shellcheck disable=SC2086 # one pid per word
	kill -KILL "$pid" $children 2>/dev/null || true
	wait_exit "$pid" 10 || die "ha: pid $pid survived SIGKILL"
}

cmd_clean() {
	cmd_stop
	ha_log "deleting $HA_ROOT"
	pg_run rm -rf "$HA_ROOT"
	rm -f "$HA_ENV_FILE"
}

main() {
	local cmd=${1:-}
	case $cmd in
	start) cmd_start ;;
	stop) cmd_stop ;;
	status) cmd_status ;;
	env) [[ -r $HA_ENV_FILE ]] || die "no $HA_ENV_FILE yet: run deploy/local/ha.sh start"; cat "$HA_ENV_FILE" ;;
	promote) cmd_promote ;;
	kill-primary) cmd_kill_primary ;;
	clean) cmd_clean ;;
	-h | --help | help) sed -n '2,/^[^#]/{/^#/!d;/shellcheck/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" ;;
	*) sed -n '2,/^[^#]/{/^#/!d;/shellcheck/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
	esac
}

main "$@"

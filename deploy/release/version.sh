#!/usr/bin/env bash
# Prints what make build and make release stamp into walhouse, one
# assignment a line (sourced by release.sh, read by the Makefile):
#
#   version=X.Y.Z           HEAD is tagged vX.Y.Z, which must equal the VERSION file
#   version=X.Y.Z-dev.gHASH otherwise: the VERSION file (the next release) and the commit
#                           ("-dirty" added to either when tracked files have uncommitted changes)
#   commit=...              the full commit hash
#   date=...                the commit's date, UTC, RFC 3339: never the build time, so two builds
#                           of a commit are identical
#   epoch=...               the same as seconds since 1970 (SOURCE_DATE_EPOCH)
#
# Outside a git work tree (a source archive): the VERSION file with "-dev",
# no commit, and the VERSION file's modification time.
#
# usage: version.sh               the assignments above
#        version.sh --ldflags     the -X flags that stamp them into walhouse (make build, make release)
#        version.sh --build-args  the same as docker build --build-arg flags (deploy/docker/Dockerfile)
set -euo pipefail
mode=${1:-}
case $mode in "" | --ldflags | --build-args) ;; *) echo "usage: version.sh [--ldflags|--build-args]" >&2; exit 2 ;; esac
# out prints the stamp as the caller asked for it: the -X names are those
# of cmd/walhouse/version.go, checked by its test.
out() {
	case $mode in
	--ldflags) printf -- '-X main.version=%s -X main.commit=%s -X main.commitDate=%s\n' "$1" "$2" "$3" ;;
	--build-args) printf -- '--build-arg VERSION=%s --build-arg COMMIT=%s --build-arg DATE=%s\n' "$1" "$2" "$3" ;;
	*) printf 'version=%s\ncommit=%s\ndate=%s\nepoch=%s\n' "$1" "$2" "$3" "$4" ;;
	esac
}
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
file=$(tr -d ' \n' <VERSION)
[[ $file =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "version.sh: VERSION holds \"$file\", not X.Y.Z" >&2; exit 1; }
if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
	epoch=$(date -u -r VERSION +%s)
	out "$file-dev" "" "$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)" "$epoch"
	exit 0
fi
commit=$(git rev-parse HEAD)
epoch=$(git log -1 --format=%ct HEAD)
date=$(TZ=UTC0 git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
if tag=$(git describe --tags --exact-match --match 'v[0-9]*.[0-9]*.[0-9]*' HEAD 2>/dev/null); then
	version=${tag#v}
	[[ $version == "$file" ]] || { echo "version.sh: HEAD is tagged $tag but VERSION holds $file: bump VERSION (docs/release.md)" >&2; exit 1; }
else
	version="$file-dev.g${commit:0:12}"
fi
# Tracked files only, as git describe --dirty: a release is cut from a
# clean clone (docs/release.md).
if ! git diff --quiet HEAD -- 2>/dev/null; then
	version+="-dirty"
fi
out "$version" "$commit" "$date" "$epoch"

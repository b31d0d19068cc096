#!/usr/bin/env bash
# make release-check: make release twice, the second time in another
# directory, under another umask and time zone, and the checksums of the
# two must be the same (the release is reproducible). The first run's
# artifacts stay in DIST (default dist).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dist=${1:-dist}
other=$(mktemp -d)
trap 'rm -rf "$other"' EXIT
deploy/release/release.sh "$dist" >/dev/null
(umask 077 && TZ=Pacific/Chatham deploy/release/release.sh "$other/dist") >/dev/null
if ! diff -u "$dist/SHA256SUMS" "$other/dist/SHA256SUMS"; then
	echo "release-check: two builds of the same commit differ (above): the release is not reproducible" >&2
	exit 1
fi
echo "release-check: two builds give the same $(wc -l <"$dist/SHA256SUMS") checksums:"
cat "$dist/SHA256SUMS"

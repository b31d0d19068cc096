#!/usr/bin/env bash
# make release: reproducible release artifacts in dist/ (docs/release.md).
#
# For linux/amd64 and linux/arm64 (RELEASE_PLATFORMS): static binaries
# (CGO_ENABLED=0, -tags nochdb, -trimpath, -buildvcs=false, version, commit
# and commit date stamped by -ldflags -X) in a tar.gz with LICENSE and
# CHANGELOG.md, a CycloneDX SBOM of each (cyclonedx-gomod), and the image
# without a Docker engine (deploy/release/image: an OCI layout of every
# platform and a docker load archive of each); SHA256SUMS over them all.
# Every time stamped anywhere is the commit's, so the same commit gives
# the same checksums (make release-check builds twice and compares).
#
# It builds the commit HEAD from a clone of it, never the work tree:
# uncommitted changes are left out (with a warning), and the SBOM's tool
# reads the clone's git (it cannot read a git worktree's).
#
# usage: deploy/release/release.sh [DIST]   (default dist)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
dist=${1:-dist}
GO=${GO:-go}
platforms=${RELEASE_PLATFORMS:-linux/amd64 linux/arm64}
# Pinned, from the Go module proxy, built for this machine below.
CYCLONEDX=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
log() { printf '[release] %s\n' "$*" >&2; }

git diff --quiet HEAD -- || log "warning: uncommitted changes are not in the release: it builds the commit HEAD"
mkdir -p "$dist"
dist=$(cd "$dist" && pwd -P)
# Only a former release's files are removed: DIST may be any directory.
rm -rf "$dist"/walhouse_* "$dist/SHA256SUMS"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q --no-hardlinks "$root" "$work/src"
git -C "$work/src" checkout -q --detach "$(git rev-parse HEAD)"
root=$work/src
cd "$root"

eval "$(deploy/release/version.sh)"
# shellcheck disable=SC2154 # set by version.sh
{ v=$version; c=$commit; d=$date; e=$epoch; }
export SOURCE_DATE_EPOCH=$e
log "walhouse $v, commit $c, $d"

GOFLAGS='' GOBIN=$work/bin $GO install "$CYCLONEDX"

ldflags="-s -w $(deploy/release/version.sh --ldflags)"
bins=()
for p in $platforms; do
	os=${p%/*} arch=${p#*/}
	name=walhouse_${v}_${os}_${arch}
	out=$work/$name
	mkdir -p "$out"
	log "$p: build"
	# GOFLAGS cleared: a -mod or -tags of the caller's would change the binary.
	GOFLAGS='' CGO_ENABLED=0 GOOS=$os GOARCH=$arch $GO build -tags nochdb -trimpath -buildvcs=false \
		-ldflags "$ldflags" -o "$out/walhouse" ./cmd/walhouse
	GOFLAGS='' CGO_ENABLED=0 GOOS=$os GOARCH=$arch $GO build -trimpath -buildvcs=false \
		-ldflags "-s -w" -o "$out/probe" ./deploy/docker/probe
	bins+=(-bin "$p=$out")
	cp LICENSE CHANGELOG.md "$out/"
	# Modes fixed: the umask of the clone and of cp would otherwise show.
	chmod 0755 "$out" "$out/walhouse" "$out/probe"
	chmod 0644 "$out/LICENSE" "$out/CHANGELOG.md"
	# The archive holds what a user runs: walhouse, its license, its changes.
	tar --sort=name --mtime="@$e" --owner=0 --group=0 --numeric-owner \
		--format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
		-C "$work" -cf - "$name/walhouse" "$name/LICENSE" "$name/CHANGELOG.md" | gzip -9n >"$dist/$name.tar.gz"
	log "$p: SBOM"
	GOFLAGS=-tags=nochdb CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$work/bin/cyclonedx-gomod" app -json \
		-licenses -noserial -notimestamp -main cmd/walhouse -output "$dist/$name.cdx.json" "$root"
done

log "image walhouse/walhouse:$v"
(cd deploy/release/image && GOFLAGS='' $GO run . -version "$v" -created "$d" -out "$dist" "${bins[@]}")
# The OCI layout as one file, as skopeo's oci-archive: reads it; modes
# fixed as above.
oci=walhouse_${v}_oci
find "$dist/$oci" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
tar --sort=name --mtime="@$e" --owner=0 --group=0 --numeric-owner \
	--format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
	-C "$dist/$oci" -cf "$dist/$oci.tar" .
rm -rf "${dist:?}/$oci"

(cd "$dist" && sha256sum -- walhouse_* | LC_ALL=C sort -k2 >"$work/SHA256SUMS") && mv "$work/SHA256SUMS" "$dist/"
log "done: $dist"
cat "$dist/SHA256SUMS"

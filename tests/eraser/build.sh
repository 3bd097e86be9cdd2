#!/usr/bin/env bash
# Builds Eraser's image remover (github.com/eraser-dev/eraser, the version
# below) from its source in the Go module proxy, into
# $STATE/bin/eraser-remover, for tests/tests/eraser.rs. Its go.mod carries
# replace directives, so it is built inside the downloaded module (a
# writable copy), not with `go install`. Skipped when the stamp matches.
#
#   tests/eraser/build.sh      # tests/run-all.sh runs it in the background
set -Eeuo pipefail
# shellcheck source=tests/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"

ERASER_VERSION=${ERASER_VERSION:-v1.4.1}
bin=$STATE/bin/eraser-remover
stamp="$ERASER_VERSION remover"
mkdir -p "$STATE/bin"
exec 9>"$STATE/bin/eraser-remover.lock"
flock 9
if [[ -x $bin && "$(cat "$STATE/bin/eraser-remover.stamp" 2>/dev/null)" == "$stamp" ]]; then
  log "eraser remover $ERASER_VERSION already built ($bin)"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "go is not installed to build Eraser's remover" >&2; exit 1; }
t0=$SECONDS
dir=$(go mod download -json "github.com/eraser-dev/eraser@$ERASER_VERSION" | sed -n 's/.*"Dir": "\(.*\)",*$/\1/p')
[[ -d $dir ]] || { echo "go mod download github.com/eraser-dev/eraser@$ERASER_VERSION gave no directory" >&2; exit 1; }
src=$STATE/build/eraser-$ERASER_VERSION
rm -rf "$src"
mkdir -p "$(dirname "$src")"
cp -r "$dir" "$src"
chmod -R u+w "$src"
(cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags '-w' -o "$bin" ./pkg/remover)
echo "$stamp" >"$STATE/bin/eraser-remover.stamp"
log "eraser remover $ERASER_VERSION built in $((SECONDS - t0))s ($bin)"

#!/usr/bin/env bash
# Builds the CNCF Distribution registry v3 (github.com/distribution/
# distribution/v3, the version below) from the Go module proxy into
# $STATE/bin/registry-v3, for the pull-through cache of tests/tests/p2p.rs
# (a zone mirror in front of the upstream registry). Debian's registry
# (2.8) is not used for that: as a pull-through cache it fetches a missed
# blob from upstream twice, once for the client and once to store it,
# which would hide what seed-then-fan-out saves. Skipped when the stamp
# matches.
#
#   tests/mirror/build.sh      # tests/run-all.sh runs it in the background
set -Eeuo pipefail
# shellcheck source=tests/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"

DISTRIBUTION_VERSION=${DISTRIBUTION_VERSION:-v3.0.0}
bin=$STATE/bin/registry-v3
stamp="$DISTRIBUTION_VERSION cmd/registry"
mkdir -p "$STATE/bin"
exec 9>"$STATE/bin/registry-v3.lock"
flock 9
if [[ -x $bin && "$(cat "$STATE/bin/registry-v3.stamp" 2>/dev/null)" == "$stamp" ]]; then
  log "registry $DISTRIBUTION_VERSION already built ($bin)"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "go is not installed to build the registry" >&2; exit 1; }
t0=$SECONDS
gobin=$(mktemp -d)
trap 'rm -rf "$gobin"' EXIT
# The module has no replace directives: `go install pkg@version` builds it
# with its own go.mod and go.sum.
GOBIN=$gobin CGO_ENABLED=0 go install -trimpath -ldflags '-w' \
  "github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_VERSION"
mv "$gobin/registry" "$bin"
echo "$stamp" >"$STATE/bin/registry-v3.stamp"
log "registry $DISTRIBUTION_VERSION built in $((SECONDS - t0))s ($bin)"

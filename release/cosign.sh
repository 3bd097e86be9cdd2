#!/usr/bin/env bash
# cosign, built from the Go module proxy as helm is (tests/chart.sh), into
# $NODEIMAGE_STATE/bin (which tests/cluster/down.sh keeps). Prints its path.
#
#   release/cosign.sh        # release/release.sh calls it before signing
#
# Environment: COSIGN (a cosign binary to use instead), COSIGN_VERSION
# (default v3.1.3). About 4.5 CPU-minutes with cold Go caches.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${NODEIMAGE_STATE:-$REPO_ROOT/.state}
COSIGN_VERSION=${COSIGN_VERSION:-v3.1.3}
log() { printf '[%s] cosign: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -n ${COSIGN:-} ]]; then
  [[ -x $COSIGN ]] || { log "COSIGN=$COSIGN is not executable"; exit 1; }
  echo "$COSIGN"
  exit 0
fi
bin=$STATE/bin/cosign
mkdir -p "$STATE/bin"
# One installer at a time; the second finds it there.
exec 9>"$STATE/bin/cosign.lock"
flock 9
if [[ ! -x $bin || "$(cat "$STATE/bin/cosign.stamp" 2>/dev/null)" != "$COSIGN_VERSION" ]]; then
  command -v go >/dev/null 2>&1 || { log "cosign is missing and go is not installed to build it"; exit 1; }
  log "installing cosign $COSIGN_VERSION with go install"
  t0=$SECONDS
  GOBIN=$STATE/bin GOFLAGS=-buildvcs=false go install \
    -ldflags "-X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
    "github.com/sigstore/cosign/v3/cmd/cosign@$COSIGN_VERSION" >&2 ||
    { log "go install github.com/sigstore/cosign/v3/cmd/cosign@$COSIGN_VERSION failed"; exit 1; }
  echo "$COSIGN_VERSION" >"$STATE/bin/cosign.stamp"
  log "cosign $COSIGN_VERSION installed in $((SECONDS - t0))s"
fi
echo "$bin"

#!/usr/bin/env bash
# The Helm chart's tests (tests/tests/chart.rs, which says what they check):
# installs helm with `go install` into $STATE/bin when it is missing, then
# runs them one at a time against the local cluster (tests/cluster/up.sh;
# they need nodeimage's CRDs, which tests/nodeimage.sh start installs).
#
#   tests/chart.sh
#
# Environment: HELM (a helm binary to use instead), HELM_VERSION (default
# v3.21.4).
set -Eeuo pipefail
# shellcheck source=tests/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

HELM_VERSION=${HELM_VERSION:-v3.21.4}
fail() {
  printf '\nFAIL: %s\n' "$*" >&2
  exit 1
}
[[ -f $STATE/env.sh ]] || fail "no $STATE/env.sh: start the local cluster first (tests/cluster/up.sh)"

# $STATE/bin survives tests/cluster/down.sh; helm.stamp records the version
# built (`helm version` shows only "v3.21": go install sets no ldflags).
if [[ -z ${HELM:-} ]]; then
  HELM=$STATE/bin/helm
  if [[ ! -x $HELM || "$(cat "$STATE/bin/helm.stamp" 2>/dev/null)" != "$HELM_VERSION" ]]; then
    command -v go >/dev/null 2>&1 || fail "helm is missing and go is not installed to build it"
    log "installing helm $HELM_VERSION with go install (about 3.5 minutes with cold Go caches)"
    t0=$SECONDS
    mkdir -p "$STATE/bin"
    GOBIN=$STATE/bin GOFLAGS=-buildvcs=false go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ||
      fail "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
    echo "$HELM_VERSION" >"$STATE/bin/helm.stamp"
    log "helm $HELM_VERSION installed in $((SECONDS - t0))s"
  fi
fi
[[ -x $HELM ]] || fail "helm binary $HELM is not executable"

(cd "$REPO_ROOT" && cargo build --quiet -p nodeimage-daemon) || fail "cargo build -p nodeimage-daemon failed"
cd "$REPO_ROOT"
NODEIMAGE_HELM=$HELM NODEIMAGE_ENV=$STATE/env.sh \
  cargo test -p nodeimage-tests --quiet --test chart -- --ignored --test-threads=1

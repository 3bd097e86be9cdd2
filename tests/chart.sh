#!/usr/bin/env bash
# The Helm chart's tests (tests/tests/chart.rs, which says what they check):
# installs helm with `go install` into $STATE/bin when it is missing, then
# runs them one at a time against the local cluster (tests/cluster/up.sh;
# they need nodeimage's CRDs, which tests/nodeimage.sh start installs).
#
#   tests/chart.sh
#   tests/chart.sh --install-helm   # only install helm (tests/run-all.sh
#                                   # does it in the background, early)
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
INSTALL_ONLY=0
for arg in "$@"; do
  case $arg in
    --install-helm) INSTALL_ONLY=1 ;;
    *) fail "unknown argument $arg (usage: tests/chart.sh [--install-helm])" ;;
  esac
done

# The link-time settings of helm's own release build (its Makefile): its
# version, and the Kubernetes version `helm template` and `helm lint` assume
# without a cluster, taken from the k8s.io/client-go it requires. Without
# them helm assumes Kubernetes 1.20, which the chart's kubeVersion refuses.
helm_ldflags() {
  local gomod ver
  gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*$/\1/p')
  ver=$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")
  [[ $ver =~ ^v0\.([0-9]+)\. ]] || fail "no k8s.io/client-go version in helm $HELM_VERSION's go.mod ($gomod)"
  local major=1 minor=${BASH_REMATCH[1]} f=""
  for pkg in pkg/lint/rules pkg/chartutil; do
    f+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=$major -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
  done
  echo "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION$f"
}

# $STATE/bin survives tests/cluster/down.sh; helm.stamp records the version
# built and how.
if [[ -z ${HELM:-} ]]; then
  HELM=$STATE/bin/helm
  stamp="$HELM_VERSION release-ldflags"
  mkdir -p "$STATE/bin"
  # One installer at a time (run-all.sh's background install and
  # release/release.sh may meet here); the second finds helm there.
  exec 9>"$STATE/bin/helm.lock"
  flock 9
  if [[ ! -x $HELM || "$(cat "$STATE/bin/helm.stamp" 2>/dev/null)" != "$stamp" ]]; then
    command -v go >/dev/null 2>&1 || fail "helm is missing and go is not installed to build it"
    log "installing helm $HELM_VERSION with go install (about 3.5 minutes with cold Go caches)"
    t0=$SECONDS
    mkdir -p "$STATE/bin"
    ldflags=$(helm_ldflags)
    GOBIN=$STATE/bin GOFLAGS=-buildvcs=false go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ||
      fail "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
    echo "$stamp" >"$STATE/bin/helm.stamp"
    log "helm $HELM_VERSION installed in $((SECONDS - t0))s"
  fi
  exec 9>&-
fi
[[ -x $HELM ]] || fail "helm binary $HELM is not executable"
((INSTALL_ONLY == 0)) || exit 0
[[ -f $STATE/env.sh ]] || fail "no $STATE/env.sh: start the local cluster first (tests/cluster/up.sh)"

cargo_build_all || fail "cargo build ${CARGO_SELECTION[*]} failed"
cd "$REPO_ROOT"
NODEIMAGE_HELM=$HELM NODEIMAGE_ENV=$STATE/env.sh \
  cargo test --workspace --quiet --test chart --test chart_access -- --ignored --test-threads=1

#!/usr/bin/env bash
# The tests that say which Kubernetes versions the chart runs on, against a
# local cluster of a chosen version (`make test-kube-version`): the chart's
# tests, kubelet on the real node with nodeimage's pre-pulled images, and
# the release installed with helm onto that node. The end-to-end tests of
# tests/run-all.sh stay on the default version (they also check the API
# server's own messages, which differ between versions).
#
#   KUBE_VERSION=v1.30.14 tests/kube-version.sh   # the chart's floor
#   tests/kube-version.sh                          # the default, v1.37.2
#   KEEP_CLUSTER=1 ...                             # leave the cluster up
#
# KUBE_VERSION must be the default version or the one a module under
# tests/kube/versions builds (tests/cluster/up.sh, NODEIMAGE_KUBE_VERSION).
# The release is built for IMAGE_ARCHES (default here: amd64 only; the
# install test runs amd64 images). Like run-all.sh it stops what it started
# (nodeimage, the cluster and its real node) at the end, and refuses a
# running cluster of another version.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
STATE_DIR=${NODEIMAGE_STATE:-$REPO_ROOT/.state}
export NODEIMAGE_STATE=$STATE_DIR
if [[ -n ${KUBE_VERSION:-} ]]; then export NODEIMAGE_KUBE_VERSION=$KUBE_VERSION; fi
export IMAGE_ARCHES=${IMAGE_ARCHES:-amd64}
T0=$SECONDS

step() { printf '\n==== %s (%s, %d s)\n' "$*" "$(date +%H:%M:%S)" "$((SECONDS - T0))"; }

cleanup() {
  local rc=$?
  if [[ -z ${KEEP_CLUSTER:-} ]]; then
    step "stopping nodeimage and the local cluster"
    tests/nodeimage.sh stop || true
    tests/cluster/down.sh || true
  fi
  if ((rc == 0)); then
    printf '\nall passed on Kubernetes %s in %d s\n' "${NODEIMAGE_KUBE_VERSION:-(default)}" "$((SECONDS - T0))"
  else
    printf '\nFAILED on Kubernetes %s (exit %d) after %d s\n' "${NODEIMAGE_KUBE_VERSION:-(default)}" "$rc" "$((SECONDS - T0))"
  fi
  exit "$rc"
}
trap cleanup EXIT

step "building the workspace (tests/cluster/lib.sh, cargo_build_all)"
# shellcheck source=tests/cluster/lib.sh
(. tests/cluster/lib.sh && cargo_build_all)

step "starting the local cluster on Kubernetes ${NODEIMAGE_KUBE_VERSION:-(default)}"
NODEIMAGE_NI_CRI_BUILT=1 tests/cluster/up.sh >/dev/null
# shellcheck disable=SC1091
. "$STATE_DIR/env.sh"
"$KUBECTL" version -o json | sed -n 's/.*"gitVersion": *"\(.*\)".*/  \1/p'

step "starting nodeimage (controller and one daemon per node)"
tests/nodeimage.sh start

step "helm (tests/chart.sh --install-helm)"
tests/chart.sh --install-helm

step "Helm chart: lint, server-side dry runs, RBAC with ServiceAccount tokens"
tests/chart.sh

step "the release for ${IMAGE_ARCHES// /, } (release/release.sh)"
release/release.sh >"$STATE_DIR/logs/release.log" 2>&1 || {
  tail -n 60 "$STATE_DIR/logs/release.log"
  exit 1
}
grep -E 'release: ' "$STATE_DIR/logs/release.log" | tail -n 5

step "two real nodes: kube-scheduler, kubelet-1 (containerd 2.2) and kubelet-2 (containerd 1.7, layer discard), runc, bridge CNI"
tests/cluster/real-node.sh 1 >/dev/null
tests/cluster/real-node.sh 2 >/dev/null
"$KUBECTL" get node "${NODEIMAGE_REAL_NODE:-kubelet-1}" -o 'jsonpath={.status.nodeInfo.kubeletVersion}{"\n"}'

step "Eraser's remover (v1.4.1, built from source) for the real-kubelet Eraser test"
NODEIMAGE_STATE=$STATE_DIR tests/eraser/build.sh

step "kubelet's image GC and credential checks on the real nodes"
NODEIMAGE_ENV=$STATE_DIR/env.sh cargo test --workspace --quiet --test real_kubelet -- --ignored --test-threads=2

step "the chart installed with helm onto the real nodes, as docs/install.md says"
NODEIMAGE_ENV=$STATE_DIR/env.sh NODEIMAGE_HELM=${HELM:-$STATE_DIR/bin/helm} \
  cargo test --workspace --quiet --test install -- --ignored --test-threads=1

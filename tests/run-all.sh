#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, checks
# formatting and lints, runs the unit tests, starts the local cluster and
# nodeimage on it, runs the end-to-end tests, and stops everything it started.
#
#   tests/run-all.sh            # what `make test` and CI run
#   KEEP_CLUSTER=1 tests/run-all.sh   # leave the cluster up afterwards
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
STATE=${NODEIMAGE_STATE:-$REPO_ROOT/.state}
export NODEIMAGE_STATE=$STATE

step() { printf '\n==== %s (%s)\n' "$*" "$(date +%H:%M:%S)"; }

cleanup() {
  local rc=$?
  # Logs first: stopping the cluster removes its state directory.
  if ((rc != 0)); then
    echo "---- last lines of the nodeimage logs ($STATE/logs) ----"
    for f in "$STATE"/logs/controller.log "$STATE"/logs/daemon-*.log; do
      [[ -f $f ]] && { echo "== $f"; tail -n "${LOG_LINES:-40}" "$f"; }
    done
    # Kept whole for a look afterwards (the state directory goes with the cluster).
    if [[ -d $STATE/logs ]]; then
      rm -rf "$REPO_ROOT/.failed-logs" && cp -a "$STATE/logs" "$REPO_ROOT/.failed-logs" || true
      echo "---- all logs kept in $REPO_ROOT/.failed-logs"
    fi
  fi
  if [[ -z ${KEEP_CLUSTER:-} ]]; then
    step "stopping nodeimage and the local cluster"
    tests/nodeimage.sh stop || true
    tests/cluster/down.sh || true
  fi
  exit "$rc"
}
trap cleanup EXIT

step "starting the local cluster (installs Debian packages and builds the control plane on first run)"
tests/cluster/up.sh

if ! command -v promtool >/dev/null; then
  step "installing promtool (Debian package prometheus; its server is not started)"
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus >/dev/null; }
  rm -f /usr/sbin/policy-rc.d
fi

step "format and lint"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "unit tests"
cargo test --workspace --quiet

step "starting nodeimage (controller and one daemon per node)"
tests/nodeimage.sh start

step "end-to-end tests"
cargo build --quiet -p nodeimage-kubectl  # the kubectl plugin tests/tests/kubectl_plugin.rs runs
NODEIMAGE_ENV=$STATE/env.sh cargo test -p nodeimage-tests --quiet --no-fail-fast -- --ignored --test-threads="${E2E_THREADS:-4}" --skip upstream_crds --skip chart_ --skip real_kubelet_

step "KubeEdge's own CRDs, then ours over them (alone: it replaces cluster-wide CRDs)"
NODEIMAGE_ENV=$STATE/env.sh cargo test -p nodeimage-tests --quiet --test kubeedge_crds -- --ignored upstream_crds

step "no panic in any log of nodeimage, the test daemons or the cluster"
panicked=$(grep -rls --include='*.log' "panicked at" "$STATE" 2>/dev/null || true)
if [[ -n $panicked ]]; then
  echo "FAILED: a Rust panic ('panicked at') in:"
  for f in $panicked; do echo "== $f"; grep -n -m5 "panicked at" "$f"; done
  exit 1
fi
echo "no Rust panic ('panicked at') in $(find "$STATE" -name '*.log' | wc -l) log files"

step "Helm chart: lint, server-side dry runs, RBAC with ServiceAccount tokens (installs helm on first run)"
tests/chart.sh

step "alerts: promtool check rules and the alerts' unit tests"
tests/alerts/test.sh

step "container images without Docker (release build, umoci, skopeo), in the background: $STATE/logs/images.log"
# The release build is CPU work and the real node's tests below mostly wait
# for kubelet (its GC passes, restarts): they run side by side.
(images/build.sh && images/check.sh) >"$STATE/logs/images.log" 2>&1 &
IMAGES_PID=$!

step "a real node: kube-scheduler and kubelet-1 (kubelet, containerd with runc, bridge CNI)"
tests/cluster/real-node.sh >/dev/null

step "kubelet's image GC and credential checks on the real node (they restart its kubelet: one at a time)"
NODEIMAGE_ENV=$STATE/env.sh cargo test -p nodeimage-tests --quiet --test real_kubelet -- --ignored --test-threads=1

step "waiting for the container images"
if ! wait "$IMAGES_PID"; then
  echo "FAILED: building or checking the images; the end of $STATE/logs/images.log:"
  tail -n 60 "$STATE/logs/images.log"
  exit 1
fi
tail -n 12 "$STATE/logs/images.log"

step "the chart installed with helm onto the real node, as docs/install.md says"
tests/install.sh

step "all tests passed"

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

# Builds in the background (helm, the release images): each at the lowest
# CPU priority in its own session, so the tests in the foreground keep the
# CPU they need and a failed run stops the whole build. With the kernel's
# autogroup scheduling (most distributions turn it on) a new session is a
# CPU group of its own that `nice` alone does not lower against the others:
# the group's own nice value is set too.
BG_PIDS=()
background() {
  local name=$1
  shift
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true; exec nice -n 19 "$@"' background "$@" \
    >"$STATE/logs/$name.log" 2>&1 &
  BG_PIDS+=($!)
}
# wait_background PID NAME: its exit status, with the end of its log on failure.
wait_background() {
  if ! wait "$1"; then
    echo "FAILED: $2 (background); the end of $STATE/logs/$2.log:"
    tail -n 60 "$STATE/logs/$2.log"
    exit 1
  fi
}

cleanup() {
  local rc=$?
  local p
  for p in "${BG_PIDS[@]}"; do kill -- "-$p" 2>/dev/null || true; done
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

# The release the install test installs is built for this machine's
# architecture only: the test runs nothing else, and a second optimised
# cross build is CPU time the cold run's budget cannot spare. `make release`
# builds and checks both; NODEIMAGE_RELEASE_ARCHES="amd64 arm64" makes this
# run do so too.
case $(uname -m) in aarch64) host_arch=arm64 ;; *) host_arch=amd64 ;; esac
export IMAGE_ARCHES=${NODEIMAGE_RELEASE_ARCHES:-$host_arch}

# The release's cargo build is the largest CPU job of the
# run: it starts first and takes whatever CPU the foreground leaves idle
# (downloads, links, tests that wait). Its Debian packages come first, in
# the foreground, so that no two apt-get runs meet.
mkdir -p "$STATE/logs"
step "the release's Debian packages, then its cargo build and the P2P test's pull-through cache in the background (logs $STATE/logs/{release-build,mirror}.log)"
release/release.sh --packages-only
# The lock tells the release job (started later) to wait for this build.
background release-build flock "$STATE/release-build.lock" release/release.sh --binaries-only
# The pull-through cache of the P2P e2e test (tests/tests/p2p.rs), a Go
# build with its module downloads: started this early so that it is done
# when the test comes (the test runs the same script, so it waits for this
# build, its lock, if not; a cold run's test waited 3.5 min when the build
# started with the end-to-end step).
background mirror tests/mirror/build.sh

step "building the workspace (one cargo selection for the whole run: tests/cluster/lib.sh, cargo_build_all)"
# shellcheck source=tests/cluster/lib.sh
(. tests/cluster/lib.sh && cargo_build_all)

step "starting the local cluster (installs Debian packages and builds the control plane on first run)"
NODEIMAGE_NI_CRI_BUILT=1 tests/cluster/up.sh

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
# Issue 31's budgets and layering: no product file over 500 lines or
# function over 80, no import circle between modules.
python3 tests/lint/sizes.py
python3 tests/lint/modcycles.py
# Markdown tables GitHub would show as text (header and delimiter rows of
# different widths).
python3 tests/lint/tables.py

step "unit tests"
cargo test --workspace --quiet

step "starting nodeimage (controller and one daemon per node)"
tests/nodeimage.sh start

step "in the background while the end-to-end tests mostly wait: helm (go install), cosign and cargo-cyclonedx, the release (make release: images for $IMAGE_ARCHES, signatures, SBOMs, the chart), Eraser's remover, logs $STATE/logs/{helm,release-tools,release,eraser}.log"
# CPU work that would otherwise run alone later: a cold run saves most of
# the time these take. The release waits for its cargo build, started first.
background helm tests/chart.sh --install-helm
HELM_PID=$!
# The release's signing and SBOM tools (cosign from the Go module proxy,
# cargo-cyclonedx from crates.io), now rather than once its images are
# built: the release finds them installed (each installer holds a lock).
background release-tools bash -c 'release/cosign.sh && release/cyclonedx.sh'
background release flock "$STATE/release-build.lock" release/release.sh
RELEASE_PID=$!
# Eraser's remover, for its own step after the chart's.
background eraser tests/eraser/build.sh
ERASER_PID=$!

step "end-to-end tests"
# tests/e2e.py: two test binaries at a time, then the tests that restart the
# shared controller, alone. The doc tests are not end-to-end tests (tests/e2e.py runs the binaries of
# `cargo test --workspace --tests`). The kubectl plugin the tests run came
# with cargo_build_all. model_table is a model run that prints a table for
# docs/benchmarks.md (engine::p2p::model), not an end-to-end test.
NODEIMAGE_ENV=$STATE/env.sh tests/e2e.py --skip upstream_crds --skip chart_ --skip real_kubelet_ --skip install_ --skip eraser_ --skip model_table

step "KubeEdge's own CRDs, then ours over them (alone: it replaces cluster-wide CRDs)"
NODEIMAGE_ENV=$STATE/env.sh cargo test --workspace --quiet --test kubeedge_crds -- --ignored upstream_crds

step "the soak, short form: jobs of every kind created, edited and deleted for 3 minutes while faults hit the controller, the API server, the registry and the daemons (tests/soak.sh)"
tests/soak.sh

step "no panic in any log of nodeimage, the test daemons or the cluster"
panicked=$(grep -rls --include='*.log' "panicked at" "$STATE" 2>/dev/null || true)
if [[ -n $panicked ]]; then
  echo "FAILED: a Rust panic ('panicked at') in:"
  for f in $panicked; do echo "== $f"; grep -n -m5 "panicked at" "$f"; done
  exit 1
fi
echo "no Rust panic ('panicked at') in $(find "$STATE" -name '*.log' | wc -l) log files"

step "waiting for helm"
wait_background "$HELM_PID" helm
tail -n 2 "$STATE/logs/helm.log"

step "Helm chart: lint, server-side dry runs, RBAC with ServiceAccount tokens"
tests/chart.sh

step "Eraser's remover (v1.4.1, built from source) against nodeimage's exclusion list (alone: it links /run/cri/cri.sock)"
wait_background "$ERASER_PID" eraser
NODEIMAGE_ENV=$STATE/env.sh cargo test --workspace --quiet --test eraser -- --ignored --test-threads=1

step "alerts: promtool check rules and the alerts' unit tests"
tests/alerts/test.sh

step "two real nodes: kube-scheduler, kubelet-1 (containerd 2.2) and kubelet-2 (containerd 1.7, layer discard), runc, bridge CNI"
tests/cluster/real-node.sh 1 >/dev/null
tests/cluster/real-node.sh 2 >/dev/null

step "kubelet's image GC and credential checks on the real nodes (they restart kubelets: tests of different nodes at once, tests/tests/real_kubelet.rs)"
NODEIMAGE_ENV=$STATE/env.sh cargo test --workspace --quiet --test real_kubelet -- --ignored --test-threads=2

step "waiting for the release (make release)"
wait_background "$RELEASE_PID" release
grep -E '^  ok:|release: ' "$STATE/logs/release.log" | tail -n 40

step "the chart installed with helm onto the real nodes, as docs/install.md says"
# Alone and last: it replaces the e2e tests' nodeimage and deletes every
# nodeimage object (tests/tests/install.rs). The helm that tests/chart.sh
# installed, as chart.sh passes it.
NODEIMAGE_ENV=$STATE/env.sh NODEIMAGE_HELM=${HELM:-$STATE/bin/helm} \
  cargo test --workspace --quiet --test install -- --ignored --test-threads=1

step "all tests passed"

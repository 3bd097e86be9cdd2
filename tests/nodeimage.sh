#!/usr/bin/env bash
# Runs nodeimage itself against the local cluster: the controller and one
# node daemon per simulated node, as background processes with PID files.
#
#   tests/nodeimage.sh start   # build the binaries, (re)start controller and daemons
#   NODEIMAGE_BIN=DIR tests/nodeimage.sh start   # the same with binaries built before
#   tests/nodeimage.sh stop    # stop them (only the PIDs we started)
#
# Needs a running local cluster (tests/cluster/up.sh). Logs: $STATE/logs/.
set -euo pipefail
# shellcheck source=tests/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

ENV_FILE=$STATE/env.sh
CONTROLLER_HEALTH=${NODEIMAGE_CONTROLLER_HEALTH:-127.0.0.1:18080}
# Daemon i serves health on 127.0.0.1:$((DAEMON_HEALTH_BASE + i)).
DAEMON_HEALTH_BASE=${NODEIMAGE_DAEMON_HEALTH_BASE:-18100}

start() {
  [[ -f $ENV_FILE ]] || die "no $ENV_FILE: start the cluster first (tests/cluster/up.sh)"
  # shellcheck disable=SC1090
  . "$ENV_FILE"
  # NODEIMAGE_BIN: a directory of already built binaries (a copy that
  # other builds in a shared target directory cannot replace mid-test).
  local bin=${NODEIMAGE_BIN:-}
  if [[ -z $bin ]]; then
    log "building nodeimage-controller and nodeimage-daemon (cargo_build_all)"
    cargo_build_all
    bin=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug
  fi
  "$KUBECTL" apply --server-side --force-conflicts -f "$REPO_ROOT/crds/yaml" >/dev/null
  "$KUBECTL" wait --for=condition=Established --timeout=60s -f "$REPO_ROOT/crds/yaml" >/dev/null
  # The start-up gate's bound, short for real_kubelet_startup_gate_* (which
  # read it as GATE_TIMEOUT); no other test registers a node with its taint.
  # Only the jobs of namespace nodeimage-gate-e2e may gate (their GATE_NS).
  # The one registry host the shared controller paces, one node pulling from
  # it at a time: a proxy tests/tests/registry_pacing.rs starts on this
  # port (no other test names it). Default: the registry's port plus 10.
  local reg_port=${NODEIMAGE_REGISTRY##*:}
  local paced=127.0.0.1:${NODEIMAGE_PACED_REGISTRY_PORT:-$((reg_port + 10))}
  # tests/tests/followtag.rs: *.invalid registries through its HTTP proxy (registry port + 11) and plugin.
  # tests/tests/removal.rs: Eraser's exclusion list of pinned images, kept in this namespace,
  # with the nodes' sandbox image (real_kubelet.rs: Eraser removes a running sandbox's otherwise).
  "$KUBECTL" create namespace nodeimage-eraser-e2e --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
  HTTP_PROXY=http://127.0.0.1:$((reg_port + 11)) start_daemon controller "$bin/nodeimage-controller" --kubeconfig "$KUBECONFIG" \
    --health-addr "$CONTROLLER_HEALTH" --registry-max-pulls-for "$paced=1" --eraser-namespace nodeimage-eraser-e2e --eraser-also-exclude "$(real_node_pause_image)" \
    --upgrade-images "$NODEIMAGE_REGISTRY/*,kubeedge/installation-package" \
    --startup-gate-timeout 90s --startup-gate-namespaces nodeimage-gate-e2e \
    --follow-tag-http-registries nodeimage-follow.invalid,nodeimage-follow-auth.invalid --image-credential-provider-config "$REPO_ROOT/tests/fixtures/followtag/credential-providers.yaml" --image-credential-provider-bin-dir "$REPO_ROOT/tests/fixtures/followtag/bin"
  local i=0 node socket
  for node in $NODEIMAGE_NODES; do
    i=$((i + 1))
    socket_var=NODEIMAGE_CONTAINERD_$i
    socket=${!socket_var}
    start_daemon "daemon-$node" "$bin/nodeimage-daemon" --node-name "$node" \
      --kubeconfig "$KUBECONFIG" --containerd-socket "$socket" \
      --health-addr "127.0.0.1:$((DAEMON_HEALTH_BASE + i))" \
      --presence-check-seconds 5 \
      --disk-threshold-percent 100 # the host disk is shared and not under test
  done
  wait_until 60 "controller ready" controller curl -fsS "http://$CONTROLLER_HEALTH/readyz"
  i=0
  for node in $NODEIMAGE_NODES; do
    i=$((i + 1))
    wait_until 60 "daemon on $node ready" "daemon-$node" \
      curl -fsS "http://127.0.0.1:$((DAEMON_HEALTH_BASE + i))/readyz"
  done
  write_if_changed "$STATE/nodeimage.env" <<EOT || true
# Written by tests/nodeimage.sh: where nodeimage's own processes listen.
export NODEIMAGE_BIN=$bin
export NODEIMAGE_CONTROLLER_HEALTH=$CONTROLLER_HEALTH
export NODEIMAGE_DAEMON_HEALTH_BASE=$DAEMON_HEALTH_BASE
export NODEIMAGE_PACED_REGISTRY=$paced
EOT
  log "controller and $i daemons running"
}

stop() {
  local f
  for f in "$PIDS"/daemon-*.pid "$PIDS"/controller.pid; do
    [[ -e $f ]] || continue
    stop_daemon "$(basename "$f" .pid)"
  done
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  *) die "usage: $0 start|stop" ;;
esac

#!/usr/bin/env bash
# Stop the local nodeimage test cluster started by tests/cluster/up.sh.
#
#   down.sh           stop every daemon recorded in $STATE/pids, unmount what
#                     containerd left under $STATE, delete the cluster state but
#                     keep the caches ($STATE/bin: built binaries, $STATE/images:
#                     the OCI layout of test images) so the next up.sh is fast
#   down.sh --purge   the same, then delete $STATE entirely
#
# Only processes recorded in PID files are signalled, and only while
# /proc/<pid>/cmdline still is the recorded command. Idempotent.
set -Eeuo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=service-vip.sh
. "$(dirname "${BASH_SOURCE[0]}")/service-vip.sh"

PURGE=0
for arg in "$@"; do
  case $arg in
    --purge) PURGE=1 ;;
    -h | --help)
      sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) die "unknown argument: $arg (usage: down.sh [--purge])" ;;
  esac
done

check_state_path
if [[ ! -d $STATE ]]; then
  log "nothing to do: $STATE does not exist"
  exit 0
fi
if [[ ! -e $STATE_MARKER ]] && [[ -n "$(ls -A "$STATE" 2>/dev/null)" ]]; then
  die "$STATE has no $(basename "$STATE_MARKER") marker: not a state dir made by up.sh; refusing to touch it"
fi

# 1. Stop daemons, clients before servers: first anything that is not part of
#    the cluster itself but recorded its PID here too (e.g. nodeimage's own
#    controller and daemons started by tests/nodeimage.sh), then the
#    controller-manager, the apiserver, the containerds and the registries.
cluster_daemons=(controller-manager apiserver)
for f in "$PIDS"/containerd-*.pid "$PIDS"/registry-*.pid; do
  [[ -e $f ]] && cluster_daemons+=("$(basename "$f" .pid)")
done
declare -A is_cluster=()
for name in "${cluster_daemons[@]}"; do is_cluster[$name]=1; done
for f in "$PIDS"/*.pid; do
  [[ -e $f ]] || continue
  name=$(basename "$f" .pid)
  [[ -n ${is_cluster[$name]:-} ]] || stop_daemon "$name"
done
# The real node's pods (tests/cluster/real-node.sh): with kubelet stopped
# above, kill and delete their containers through the node's containerd (with
# the ctr next to its binary), so that no container or shim outlives the
# cluster. The pods' own containers go first, their sandboxes (pause) after:
# from containerd 2.0 on, a pod's shim shuts down only when the sandbox's task
# is deleted while the shim holds no other container (deleting a container
# of the pod never stops it), and the CRI plugin deletes killed tasks itself,
# in whatever order they exit.
for sock in "$STATE"/real/*/containerd.sock; do
  [[ -S $sock ]] || continue
  node=$(basename "$(dirname "$sock")")
  ctr_bin=$(command -v ctr || true)
  if daemon_alive "containerd-$node"; then
    exe=$(readlink "/proc/$(recorded_pid "containerd-$node")/exe" 2>/dev/null || true)
    exe=${exe% (deleted)}
    if [[ -x ${exe%/*}/ctr ]]; then ctr_bin=${exe%/*}/ctr; fi
  fi
  [[ -n $ctr_bin ]] || continue
  ctr_k8s() { "$ctr_bin" --address "$sock" --namespace k8s.io "$@" 2>/dev/null; }
  stopped=0
  # "other": anything left that the CRI plugin did not label.
  for kind in container sandbox other; do
    mapfile -t tasks < <(ctr_k8s tasks ls -q || true)
    if [[ $kind == other ]]; then
      ids=("${tasks[@]}")
    else
      mapfile -t ids < <(ctr_k8s containers ls -q "labels.\"io.cri-containerd.kind\"==$kind" || true)
    fi
    live=()
    for t in "${tasks[@]}"; do
      [[ -n $t ]] && printf '%s\n' "${ids[@]}" | grep -qx -- "$t" && live+=("$t")
    done
    for t in "${live[@]}"; do ctr_k8s tasks kill --signal SIGKILL "$t" >/dev/null || true; done
    for t in "${live[@]}"; do
      for _ in $(seq 1 50); do
        ctr_k8s tasks delete --force "$t" >/dev/null && break
        # The CRI plugin may have deleted the killed task itself.
        ctr_k8s tasks ls -q | grep -qx -- "$t" || break
        sleep 0.1
      done
    done
    stopped=$((stopped + ${#live[@]}))
  done
  if ((stopped)); then log "stopped $stopped containers of the real node ($(dirname "$sock"))"; fi
done
for name in "${cluster_daemons[@]}"; do
  [[ -e $PIDS/$name.pid || -e $PIDS/$name.cmd ]] || continue
  stop_daemon "$name"
done
# The real node's pod bridge and the Service ClusterIP rules.
API_PORT_FILE=$STATE/real/api-port
if [[ -f $API_PORT_FILE ]]; then
  api_port=$(cat "$API_PORT_FILE")
  ip link delete "ni-$api_port" 2>/dev/null || true
  for i in 2 3 4 5 6 7 8 9; do ip link delete "ni-$api_port-$i" 2>/dev/null || true; done
  service_vip_down "$api_port"
fi

# The real nodes' mount namespaces (real-node.sh): with their processes
# stopped, unmounting the pin lets each go, with the mounts made in it.
for f in "$STATE"/real/ns/*; do
  [[ -e $f ]] || continue
  umount "$f" 2>/dev/null || true
done
umount "$STATE/real/ns" 2>/dev/null || true

# The cgroup roots of real nodes after the first (real-node.sh 2): empty
# now that their containers are gone, removed deepest first.
for f in "$STATE"/real/*/cgroup-root; do
  [[ -f $f ]] || continue
  rel=$(cat "$f")
  rel=${rel#/}
  [[ -n $rel && $rel == nodeimage-* ]] || continue
  for d in /sys/fs/cgroup/* /sys/fs/cgroup; do
    [[ -d $d/$rel && ! -L $d ]] || continue
    find "$d/$rel" -depth -type d -exec rmdir {} + 2>/dev/null ||
      log "could not remove the cgroup $d/$rel (a process still in it?)"
  done
done

# 2. Unmount whatever is still mounted under $STATE (overlay snapshots,
#    a leftover overlay probe), deepest first.
unmount_under "$STATE"

# 3. Delete the state.
if ((PURGE)); then
  log "removing $STATE (purge)"
  rm -rf -- "$STATE"
else
  log "removing cluster state in $STATE (keeping bin/ and images/ caches)"
  find "$STATE" -mindepth 1 -maxdepth 1 ! -name bin ! -name images ! -name "$(basename "$STATE_MARKER")" \
    -exec rm -rf -- {} +
fi
log "cluster is down"

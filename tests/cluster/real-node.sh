#!/usr/bin/env bash
# A real node for the local cluster (after tests/cluster/up.sh): what pods
# need to run, for installing nodeimage's chart as a platform team would.
#
#   - kube-scheduler (kubelocal scheduler); the controller-manager already
#     runs the deployment, replicaset and daemonset controllers;
#   - one Node that is a real kubelet (kubelocal kubelet, built from the
#     Kubernetes Go modules like the API server), named kubelet-1, with its
#     own containerd (the 2.2 LTS line, built from tests/containerd/v2.2 by
#     up.sh, config version 3: REAL_NODE_RUNTIME in lib.sh) running
#     containers with runc (Debian's; cgroupfs driver), a pause
#     image built here (a static Go binary, tests/kube/pause), and a bridge
#     CNI network (Debian's containernetworking-plugins) for pods that do
#     not use the host's network;
#   - the kubernetes Service's ClusterIP routed to the loopback API server
#     (tests/cluster/service-vip.sh), since there is no kube-proxy.
#
# The simulated nodes of up.sh stay as they are. kubelet-1 is labelled
# nodeimage.dev/real-node=true; its address is the pod bridge's gateway
# (10.244.0.1: kubelet refuses a loopback node IP), an interface only this
# machine and its pods reach. Its kubelet accepts anonymous requests (so
# `kubectl logs` works without a client certificate for the API server): a
# test cluster only.
#
# Idempotent like up.sh. Stopped by tests/cluster/down.sh (which also stops
# the pods' containers and unmounts their volumes). The last stdout line is
# the env file to source in addition to env.sh:
#
#   . "$(tests/cluster/real-node.sh)"
#
# A second real node: `real-node.sh 2` starts kubelet-2 beside kubelet-1,
# on another containerd line (REAL_NODE_RUNTIMES in lib.sh: 1.7 with layer
# discard, where kubelet-1 has the 2.2 LTS), with its own pod bridge
# (ni-<api port>-2), pod CIDR (the next /24), healthz port (the next one),
# cgroup root (/nodeimage-<api port>-kubelet-2, so that neither kubelet
# takes the other's pod cgroups for orphans) and env file
# ($STATE/real-node-2.env, the same variables as real-node.env).
#
# A node leaving and joining again: `real-node.sh INDEX leave` stops its
# kubelet and deletes its Node; `real-node.sh INDEX` registers it again.
#
# Tunables: NODEIMAGE_REAL_NODE (node 1's name, default kubelet-1),
# NODEIMAGE_KUBELET_PORT (10650), NODEIMAGE_KUBELET_HEALTHZ_PORT (10648;
# node i has this + i - 1), NODEIMAGE_POD_CIDR (10.244.0.0/24; node i the
# /24 i - 1 after it), NODEIMAGE_KUBELET_EXTRA_CONFIG (a file of
# KubeletConfiguration keys that replace the defaults, for a test).
set -Eeuo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=service-vip.sh
. "$(dirname "${BASH_SOURCE[0]}")/service-vip.sh"

exec 3>&1 1>&2
trap 'rc=$?; [[ $BASHPID == "$$" ]] && log "real-node.sh failed at line $LINENO (exit $rc); logs are in $LOGS"' ERR
START_TIME=$SECONDS
check_state_path
ENV_FILE=$STATE/env.sh
[[ -f $ENV_FILE ]] || die "no $ENV_FILE: start the cluster first (tests/cluster/up.sh)"
# shellcheck disable=SC1090
. "$ENV_FILE"

INDEX=${1:-1}
[[ $INDEX =~ ^[1-9]$ ]] || die "usage: real-node.sh [INDEX [join|leave]] (INDEX 1-9; default 1), got '$INDEX'"
ACTION=${2:-join}
[[ $ACTION == join || $ACTION == leave ]] || die "usage: real-node.sh [INDEX [join|leave]], got action '$ACTION'"
# One run at a time: the real-kubelet tests restart the two nodes' kubelets
# from concurrent tests, and the nodes share the scheduler, the Service
# address and the state directory's files. Daemons started here close fd 9
# (lib.sh, start_daemon).
mkdir -p "$STATE/real"
exec 9>"$STATE/real/real-node.lock"
flock 9
KUBELET_PORT=${NODEIMAGE_KUBELET_PORT:-10650}
HEALTHZ_PORT=$((${NODEIMAGE_KUBELET_HEALTHZ_PORT:-10648} + INDEX - 1))
POD_CIDR=${NODEIMAGE_POD_CIDR:-10.244.0.0/24}
[[ $POD_CIDR =~ ^([0-9]+\.[0-9]+)\.([0-9]+)\.0/24$ ]] || die "NODEIMAGE_POD_CIDR must be a /24 such as 10.244.0.0/24, got $POD_CIDR"
(( BASH_REMATCH[2] + INDEX - 1 <= 255 )) || die "NODEIMAGE_POD_CIDR $POD_CIDR leaves no /24 for node $INDEX"
POD_CIDR=${BASH_REMATCH[1]}.$((BASH_REMATCH[2] + INDEX - 1)).0/24
if ((INDEX == 1)); then
  NAME=${NODEIMAGE_REAL_NODE:-kubelet-1}
  REAL_ENV=$STATE/real-node.env
  CGROUP_ROOT=/
else
  NAME=kubelet-$INDEX
  REAL_ENV=$STATE/real-node-$INDEX.env
fi
RUNTIME=${REAL_NODE_RUNTIMES[INDEX - 1]:-$REAL_NODE_RUNTIME}
# Settings a test sets for a while (tests/tests/real_kubelet.rs): a file of
# top-level KubeletConfiguration keys that replace or extend the defaults
# below; kubelet restarts whenever its configuration changes, so running
# this script again without it restores the defaults.
KUBELET_EXTRA=${NODEIMAGE_KUBELET_EXTRA_CONFIG:-}
API_PORT=${NODEIMAGE_API_SERVER##*:}
BIN=$STATE/bin
KUBE_DIR=$STATE/kube
IMAGES=$STATE/images
TMP_DIR=$STATE/tmp
# Short: containerd's socket path must stay under 107 bytes.
D=$STATE/real/$NAME
SOCK=$D/containerd.sock
PAUSE_IMAGE=$(real_node_pause_image)
BRIDGE=ni-$API_PORT
((INDEX == 1)) || BRIDGE=$BRIDGE-$INDEX
((INDEX == 1)) || CGROUP_ROOT=/nodeimage-$API_PORT-$NAME
[[ $POD_CIDR =~ ^([0-9]+\.[0-9]+\.[0-9]+)\.0/24$ ]] || die "bad pod CIDR $POD_CIDR"
# The node's address: the pod bridge's gateway, an interface of this machine
# that only its own pods reach (kubelet refuses a loopback node IP).
NODE_IP=${BASH_REMATCH[1]}.1
[[ $NAME =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || die "invalid node name: $NAME"
((${#SOCK} + 6 <= 107)) || die "socket path too long: $SOCK; use a shorter NODEIMAGE_STATE"
kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG" --request-timeout=10s "$@"; }

# `real-node.sh INDEX leave`: the node leaves the cluster as a node of a
# replaced pool does. Its kubelet stops (containerd, its images and the
# pods' containers stay) and its Node is deleted. `real-node.sh INDEX`
# joins it again: kubelet starts and registers a new Node.
if [[ $ACTION == leave ]]; then
  stop_daemon "kubelet-$NAME"
  kc delete node "$NAME" --ignore-not-found --wait=true --timeout=60s >/dev/null
  log "node $NAME left the cluster (kubelet stopped, Node deleted)"
  exit 0
fi

# ---------------------------------------------------------------------------
# 1. Packages: runc and the CNI plugins
# ---------------------------------------------------------------------------
missing=()
command -v runc >/dev/null || missing+=(runc)
command -v iptables >/dev/null || missing+=(iptables)
command -v ip >/dev/null || missing+=(iproute2)
command -v sysctl >/dev/null || missing+=(procps)
command -v ctr >/dev/null || missing+=(containerd)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
  missing+=(containernetworking-plugins)
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } ||
    die "apt-get install ${missing[*]} failed"
fi

# ---------------------------------------------------------------------------
# 2. The pause image: a static binary in an otherwise empty image
# ---------------------------------------------------------------------------
log "building the pause binary (go build, static)"
(cd "$TESTS_DIR/kube" && CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$BIN/pause.new" ./pause)
mv -f "$BIN/pause.new" "$BIN/pause"
PAUSE_TAG=pause-$(sha256sum "$BIN/pause" | cut -c1-12)
if ! umoci ls --layout "$IMAGES" | grep -qx -- "$PAUSE_TAG"; then
  log "building image $PAUSE_TAG"
  work=$(mktemp -d "$TMP_DIR/pause.XXXXXX")
  umoci new --image "$IMAGES:$PAUSE_TAG"
  umoci unpack --image "$IMAGES:$PAUSE_TAG" "$work/bundle" >/dev/null
  install -m 0755 "$BIN/pause" "$work/bundle/rootfs/pause"
  umoci repack --image "$IMAGES:$PAUSE_TAG" "$work/bundle"
  umoci config --image "$IMAGES:$PAUSE_TAG" --config.entrypoint /pause --config.user 65535:65535 \
    --config.label "dev.nodeimage.test=pause"
  rm -rf "$work"
fi
push_oci "$IMAGES:$PAUSE_TAG" "$PAUSE_IMAGE"

# ---------------------------------------------------------------------------
# 3. The node's containerd (runc, cgroupfs, bridge CNI)
# ---------------------------------------------------------------------------
mkdir -p "$D/root" "$D/state" "$D/opt" "$D/cni/net.d" "$D/cni/ipam" "$D/kubelet" "$D/pod-logs" "$D/pki"
for reg in "$NODEIMAGE_REGISTRY" "$NODEIMAGE_AUTH_REGISTRY"; do
  mkdir -p "$D/certs.d/$reg"
  registry_hosts "$reg" | write_if_changed "$D/certs.d/$reg/hosts.toml" || true
done
cat <<EOF | write_if_changed "$D/cni/net.d/10-nodeimage.conflist" || true
{
  "cniVersion": "1.0.0",
  "name": "nodeimage",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$D/cni/ipam"
      }
    }
  ]
}
EOF
# up.sh built it already; then this is a no-op.
resolve_runtime "$RUNTIME"
if [[ $RT_LINE != debian ]]; then build_containerd "$RT_LINE"; fi
# Pods' containers live in this root: a switch of containerd version under
# them is not something to do in place. (A root of an older real-node.sh,
# which kept no record, was Debian's.)
prev=$(cat "$D/containerd-version" 2>/dev/null || debian_containerd_version)
if [[ -n $prev && $prev != "$RT_VERSION" && -n "$(ls -A "$D/root" 2>/dev/null)" ]]; then
  die "$NAME ran containerd $prev, now $RT_VERSION is wanted: stop the cluster first (tests/cluster/down.sh)"
fi
echo "$RT_VERSION" >"$D/containerd-version"
# The node's own mount namespace, pinned at $STATE/real/ns/$NAME: there, as on a
# machine of its own, /run/containerd is this node's directory $D and
# /var/lib/containerd its containerd root $D/root, so every node has
# containerd at the paths the chart's DaemonSet mounts by default (one
# hostPath for every node, as on a real fleet). containerd, its shims, the
# pods' containers and kubelet run in it; the host reaches the same files
# under $D (the socket is $D/containerd.sock). The pins live in
# $STATE/real/ns, a private bind mount of its own (a namespace cannot be
# pinned on a mount that propagates, as / does on systemd hosts). down.sh
# unmounts them.
NS_DIR=$STATE/real/ns
mkdir -p "$NS_DIR"
if ! mountpoint -q "$NS_DIR"; then
  mount --bind "$NS_DIR" "$NS_DIR" && mount --make-private "$NS_DIR" ||
    die "cannot make $NS_DIR a private mount for the nodes' mount namespaces"
fi
NS_PIN=$NS_DIR/$NAME
if ! nsenter --mount="$NS_PIN" true 2>/dev/null; then
  umount "$NS_PIN" 2>/dev/null || true
  : >"$NS_PIN"
  mkdir -p /run/containerd /var/lib/containerd
  unshare --mount="$NS_PIN" --propagation private true || die "cannot make the mount namespace of $NAME"
  nsenter --mount="$NS_PIN" -- mount --bind "$D" /run/containerd
  nsenter --mount="$NS_PIN" -- mount --bind "$D/root" /var/lib/containerd
  log "$NAME: its own mount namespace ($NS_PIN): /run/containerd is $D, /var/lib/containerd is $D/root"
fi
changed=0
# Paths as the node sees them (in its namespace); the same files as $D/... .
runtime_config /run/containerd "$NODEIMAGE_SNAPSHOTTER" "$PAUSE_IMAGE" real |
  sed 's#^root = "/run/containerd/root"#root = "/var/lib/containerd"#' | write_if_changed "$D/config.toml" && changed=1
((changed)) && stop_daemon "containerd-$NAME"
START_IN_MOUNT_NS=$NS_PIN start_daemon "containerd-$NAME" "$RT_DIR/containerd" --config "$D/config.toml"
wait_until 30 "containerd of $NAME to answer CRI" "containerd-$NAME" "$NODEIMAGE_CRI" --socket "$SOCK" --timeout 5 version
read -r rt_name rt_version _ <<<"$("$NODEIMAGE_CRI" --socket "$SOCK" --timeout 10 version)"
[[ $rt_version == "$RT_VERSION" ]] || die "$NAME: CRI reports $rt_name $rt_version, expected $RT_VERSION ($RT_SPEC)"
log "$NAME: $RT_SPEC (CRI: $rt_name $rt_version)"

# ---------------------------------------------------------------------------
# 4. Scheduler, the Service ClusterIP, kubelet
# ---------------------------------------------------------------------------
# The pod bridge, made here (the CNI plugin would make it with the first
# pod) so that kubelet can serve on its address from the start.
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge
fi
ip addr replace "$NODE_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
start_daemon scheduler "$BIN/kubelocal" scheduler "$KUBE_DIR"
service_vip_up "$API_PORT"
echo "$API_PORT" >"$STATE/real/api-port" # for down.sh

# The kubelet authenticates as system:node:<name> (group system:nodes), so
# the Node authorizer and NodeRestriction apply to it as on a real cluster.
if [[ ! -s $D/pki/client.crt ]]; then
  "$BIN/kubelocal" client-cert "$KUBE_DIR" "system:node:$NAME" system:nodes "$D/pki" ||
    die "cannot sign the kubelet's client certificate (a state dir from before ca.key was kept? run tests/cluster/down.sh first)"
fi
cat <<EOF | write_if_changed "$D/kubeconfig" || true
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $NODEIMAGE_API_SERVER
    certificate-authority: $KUBE_DIR/pki/ca.crt
users:
- name: kubelet
  user:
    client-certificate: $D/pki/client.crt
    client-key: $D/pki/client.key
contexts:
- name: kubelet
  context: {cluster: local, user: kubelet}
current-context: kubelet
EOF
# kubelet_config EXTRA: the configuration on stdin, each top-level key that
# the file EXTRA sets replaced by EXTRA's value (EXTRA's keys added at the
# end); stdin unchanged when EXTRA is empty.
kubelet_config() {
  if [[ -z $1 ]]; then
    cat
    return
  fi
  awk 'NR == FNR { if (match($0, /^[A-Za-z][A-Za-z0-9]*:/)) set[substr($0, 1, RLENGTH)] = 1; next }
       /^[A-Za-z]/ { skip = match($0, /^[A-Za-z][A-Za-z0-9]*:/) && (substr($0, 1, RLENGTH) in set) }
       !skip' "$1" -
  cat "$1"
}
# make_cgroup_root PATH: the cgroup kubelet's cgroupRoot names, in every
# hierarchy (cgroup v1) or the unified one (v2); kubelet refuses a root that
# does not exist. A v1 cpuset gets its parent's CPUs and memory nodes (a
# new cpuset has none, and no task could join it).
make_cgroup_root() {
  local rel=${1#/} d f
  [[ -n $rel ]] || return 0
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    mkdir -p "/sys/fs/cgroup/$rel"
    return
  fi
  for d in /sys/fs/cgroup/*; do
    [[ -d $d && ! -L $d ]] && mountpoint -q "$d" || continue
    mkdir -p "$d/$rel"
    for f in cpuset.cpus cpuset.mems; do
      if [[ -f $d/$f && -z "$(tr -d '[:space:]' <"$d/$rel/$f")" ]]; then
        cat "$d/$f" >"$d/$rel/$f"
      fi
    done
  done
}
make_cgroup_root "$CGROUP_ROOT"
echo "$CGROUP_ROOT" >"$D/cgroup-root" # for down.sh
kubelet_changed=0
cat <<EOF | kubelet_config "$KUBELET_EXTRA" | write_if_changed "$D/kubelet.yaml" && kubelet_changed=1
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $HEALTHZ_PORT
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: $KUBE_DIR/pki/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
# This machine may run cgroup v1, which kubelet refuses by default from 1.35
# on (failCgroupV1 defaults to true there; false before).
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
podLogsDir: $D/pod-logs
podCIDR: $POD_CIDR
# The shared test machine's disk may be nearly full: never evict or GC here.
evictionHard: {memory.available: "1Mi", nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%", imagefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
serializeImagePulls: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
nodeStatusReportFrequency: 10s
EOF
# A changed configuration takes a restart (the command line is the same).
if ((kubelet_changed)) && daemon_alive "kubelet-$NAME"; then
  log "kubelet-$NAME: configuration changed${KUBELET_EXTRA:+ (with $KUBELET_EXTRA)}; restarting it"
  stop_daemon "kubelet-$NAME"
fi
START_IN_MOUNT_NS=$NS_PIN start_daemon "kubelet-$NAME" "$BIN/kubelocal" kubelet \
  --config="$D/kubelet.yaml" --kubeconfig="$D/kubeconfig" \
  --hostname-override="$NAME" --node-ip="$NODE_IP" \
  --root-dir="$D/kubelet" --cert-dir="$D/pki/serving" \
  --node-labels=nodeimage.dev/real-node=true

node_ready() {
  [[ "$(kc get node "$NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}
# After a restart the Node still reads Ready from before: the kubelet's own
# health endpoint says when this kubelet serves.
wait_until 60 "kubelet-$NAME to answer on its healthz port" "kubelet-$NAME" \
  curl -sf --max-time 2 "http://127.0.0.1:$HEALTHZ_PORT/healthz"
wait_until 180 "node $NAME to be Ready" "kubelet-$NAME" node_ready
# The API server's TaintNodesByCondition admission taints a new Node
# not-ready; the node-lifecycle controller, which would lift it, is not run
# (it would mark the simulated nodes NotReady). Lift it here once Ready.
kc taint node "$NAME" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
log "node $NAME Ready in $((SECONDS - START_TIME)) s"

# ---------------------------------------------------------------------------
# 5. Env file
# ---------------------------------------------------------------------------
{
  echo "# Generated by tests/cluster/real-node.sh $INDEX on $(date -Is). Source it after env.sh."
  printf "export %s='%s'\n" NODEIMAGE_REAL_NODE "$NAME"
  printf "export %s='%s'\n" NODEIMAGE_REAL_NODE_CONTAINERD "$SOCK"
  printf "export %s='%s'\n" NODEIMAGE_REAL_NODE_CONTAINERD_ROOT "$D/root"
  # The node's mount namespace: a process run in it (nsenter --mount=...)
  # sees the node's /run/containerd and /var/lib/containerd.
  printf "export %s='%s'\n" NODEIMAGE_REAL_NODE_MOUNT_NS "$NS_PIN"
  printf "export %s='%s'\n" NODEIMAGE_REAL_NODE_CGROUP_ROOT "$CGROUP_ROOT"
  # containerd/VERSION/vCONFIG[/discard], as NODEIMAGE_NODE_RUNTIMES in env.sh
  printf "export %s='%s'\n" NODEIMAGE_REAL_NODE_RUNTIME "$RT_SPEC"
  printf "export %s='%s'\n" NODEIMAGE_PAUSE_IMAGE "$PAUSE_IMAGE"
} >"$REAL_ENV"
echo "$REAL_ENV" >&3

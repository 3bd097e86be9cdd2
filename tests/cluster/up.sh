#!/usr/bin/env bash
# Start the local nodeimage test cluster on loopback (127.0.0.1), as root:
#   - a Kubernetes control plane (kube-apiserver + embedded etcd, and a
#     kube-controller-manager) built from tests/kube,
#   - N "nodes": one containerd (CRI) per node plus a Node object whose status
#     is patched to Ready (there is no kubelet). The nodes run different
#     containerd versions (Debian's 1.6, and 1.7 and 2.x built from the Go
#     modules in tests/containerd), see NODEIMAGE_NODE_RUNTIMES,
#   - two OCI registries: anonymous on :5000, htpasswd basic auth on :5001,
#     both filled with small test images built without Docker (umoci+skopeo).
#
# Idempotent: daemons from a previous run that are still alive are reused and
# only what is missing is started. Build outputs ($STATE/bin) and the image
# cache ($STATE/images) survive down.sh, so a second start is fast.
#
# Progress goes to stderr; the last line on stdout is the path of the env file
# to source:   . "$(tests/cluster/up.sh)"
#
# Tunables (environment):
#   NODEIMAGE_STATE            state dir (default <repo>/.state)
#   NODEIMAGE_NODES            node count (default 3); a list of names
#                              "node-1 ... node-N" (as exported by env.sh) works too
#   NODEIMAGE_API_PORT         kube-apiserver port (default 16443)
#   NODEIMAGE_ETCD_PORT        etcd client port (default 12379; peer = +1)
#   NODEIMAGE_REGISTRY_PORT    anonymous registry port (default 5000)
#   NODEIMAGE_AUTH_REGISTRY_PORT  auth registry port (default 5001)
#   NODEIMAGE_SNAPSHOTTER      force "overlayfs" or "native" (default: probe)
#   NODEIMAGE_NODE_RUNTIMES    containerd of each node, "NODE=RUNTIME ...", where
#                              NODE is node-<i> or * (every node not named) and
#                              RUNTIME is containerd/VERSION[/v2|/v3][/discard]
#                              (format in lib.sh). Default: node-1
#                              containerd/debian/v2 (1.6), node-2
#                              containerd/1.7/v2/discard, node-3
#                              containerd/2.x/v3 (newest 2.x), node-4.. cycle
#   NODEIMAGE_BUILD_KUBECTL=1  build kubectl even if the machine has a usable one
#   NODEIMAGE_KUBE_VERSION     Kubernetes to build and run (default v1.37.2, the
#                              version tests/kube/go.mod requires); another one
#                              needs its module, tests/kube/versions/v1.<minor>
set -Eeuo pipefail

# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Everything below prints progress to stderr; fd 3 keeps the real stdout for
# the single line the caller may capture (the env file path).
exec 3>&1 1>&2
# Report a failure once, from the main shell (ERR also fires in subshells).
trap 'rc=$?; [[ $BASHPID == "$$" ]] && log "up.sh failed at line $LINENO (exit $rc); daemon logs are in $LOGS"' ERR

START_TIME=$SECONDS
check_state_path

# ---------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------
K8S_VERSION=${NODEIMAGE_KUBE_VERSION:-v1.37.2}
API_PORT=${NODEIMAGE_API_PORT:-16443}
ETCD_PORT=${NODEIMAGE_ETCD_PORT:-12379}
REG_PORT=${NODEIMAGE_REGISTRY_PORT:-5000}
AUTH_REG_PORT=${NODEIMAGE_AUTH_REGISTRY_PORT:-5001}
for _p in "$API_PORT" "$ETCD_PORT" "$REG_PORT" "$AUTH_REG_PORT"; do
  if ! [[ $_p =~ ^[0-9]+$ ]] || ((_p < 1 || _p > 65534)); then die "invalid port number: $_p"; fi
done
REGISTRY=127.0.0.1:$REG_PORT
AUTH_REGISTRY=127.0.0.1:$AUTH_REG_PORT
AUTH_USER=nodeimage

BIN=$STATE/bin
IMAGES=$STATE/images # OCI image layout; cache that survives down.sh
KUBE_DIR=$STATE/kube
KUBECONFIG_PATH=$KUBE_DIR/kubeconfig
REG_DIR=$STATE/registry
NODES_DIR=$STATE/nodes
TMP_DIR=$STATE/tmp
NI_CRI=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/ni-cri

[[ $K8S_VERSION =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || die "NODEIMAGE_KUBE_VERSION must be v1.<minor>.<patch>, got $K8S_VERSION"
K8S_MINOR=${BASH_REMATCH[1]}
# The Go module kubelocal (and kubectl, if built) is built with: tests/kube's
# own go.mod for the default version, else the go.mod of
# tests/kube/versions/v1.<minor> (-modfile: the source stays tests/kube's),
# with the build tags its `tags` file lists (the shims of older APIs).
KUBE_MOD=$TESTS_DIR/kube/go.mod
KUBE_GO_FLAGS=()
if [[ $(go_mod_require "$KUBE_MOD" k8s.io/kubernetes) != "$K8S_VERSION" ]]; then
  KUBE_MOD=$TESTS_DIR/kube/versions/v1.$K8S_MINOR/go.mod
  [[ -f $KUBE_MOD ]] || die "no Go module for Kubernetes $K8S_VERSION: tests/kube/versions/v1.$K8S_MINOR/go.mod is missing (tests/kube/versions has: $(cd "$TESTS_DIR/kube/versions" && echo v*))"
  have=$(go_mod_require "$KUBE_MOD" k8s.io/kubernetes)
  [[ $have == "$K8S_VERSION" ]] || die "tests/kube/versions/v1.$K8S_MINOR/go.mod builds Kubernetes $have, not $K8S_VERSION"
  KUBE_GO_FLAGS=(-modfile="$KUBE_MOD")
  tags=$(cat "${KUBE_MOD%/go.mod}/tags" 2>/dev/null || true)
  if [[ -n $tags ]]; then KUBE_GO_FLAGS+=(-tags "$tags"); fi
fi
KUBE_SUM=${KUBE_MOD%.mod}.sum
# Version stamping for binaries built from k8s.io/kubernetes (the same values
# `make` would inject), so both kubelocal and kubectl report $K8S_VERSION.
GO_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$K8S_MINOR -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitTreeState=clean"

# Node count: an integer, or a list of names node-1..node-N.
NODE_SPEC=${NODEIMAGE_NODES:-${NODEIMAGE_NODE_COUNT:-3}}
if [[ $NODE_SPEC =~ ^[0-9]+$ ]]; then
  NODE_COUNT=$NODE_SPEC
else
  read -r -a _names <<<"$NODE_SPEC"
  NODE_COUNT=${#_names[@]}
  for ((i = 1; i <= NODE_COUNT; i++)); do
    [[ ${_names[i - 1]} == "node-$i" ]] ||
      die "NODEIMAGE_NODES must be a count or the names node-1..node-N in order, got: $NODE_SPEC"
  done
fi
((NODE_COUNT >= 1 && NODE_COUNT <= 50)) || die "node count must be between 1 and 50, got $NODE_COUNT"
NODE_NAMES=()
for ((i = 1; i <= NODE_COUNT; i++)); do NODE_NAMES+=("node-$i"); done

# ---------------------------------------------------------------------------
# 1. Host packages and toolchains
# ---------------------------------------------------------------------------
ensure_packages() {
  # binary -> Debian package providing it
  local -A pkg_of=(
    [containerd]=containerd [runc]=runc [docker-registry]=docker-registry
    [skopeo]=skopeo [umoci]=umoci [htpasswd]=apache2-utils
    [protoc]=protobuf-compiler [curl]=curl [jq]=jq
  )
  local bin missing=()
  for bin in "${!pkg_of[@]}"; do
    command -v "$bin" >/dev/null 2>&1 || missing+=("${pkg_of[$bin]}")
  done
  ((${#missing[@]} == 0)) && return 0
  [[ $EUID -eq 0 ]] || die "missing packages (${missing[*]}) and not root: cannot apt-get install"
  log "installing Debian packages: ${missing[*]}"
  # Make sure package postinst scripts do not start a system containerd
  # (on /run/containerd) or a system registry: deny all service starts while
  # installing, unless the machine already has a policy.
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
  fi
  local rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } || rc=$?
  ((own_policy)) && rm -f "$policy"
  ((rc == 0)) || die "apt-get install failed (exit $rc)"
}

ensure_packages
command -v go >/dev/null 2>&1 || die "go is not installed (needed to build tests/kube)"
command -v cargo >/dev/null 2>&1 || die "cargo is not installed (needed to build ni-cri)"

mkdir -p "$STATE" "$BIN" "$PIDS" "$LOGS" "$TMP_DIR" "$REG_DIR" "$NODES_DIR" "$KUBE_DIR"
touch "$STATE_MARKER"

# ---------------------------------------------------------------------------
# 2. Builds: ni-cri (Rust), kubelocal and maybe kubectl (Go)
# ---------------------------------------------------------------------------
# NODEIMAGE_NI_CRI_BUILT=1: the caller has just built it (tests/run-all.sh,
# whose Rust builds then hold cargo's lock while this script builds Go).
if [[ -z ${NODEIMAGE_NI_CRI_BUILT:-} ]]; then
  log "building the workspace for ni-cri (cargo, incremental: cargo_build_all)"
  cargo_build_all
fi
[[ -x $NI_CRI ]] || die "ni-cri was not built at $NI_CRI"

# go_build_stamped (lib.sh) skips the build when nothing it depends on changed.
# A cluster's etcd holds what its API server wrote: another version is not
# started on it (down.sh empties $STATE/kube).
ran=$(cat "$KUBE_DIR/version" 2>/dev/null || true)
if [[ -n $ran && $ran != "$K8S_VERSION" ]]; then
  die "the cluster in $STATE runs Kubernetes $ran, not $K8S_VERSION: bring it down first (tests/cluster/down.sh)"
fi
go_build_stamped "$BIN/kubelocal" "$TESTS_DIR/kube" "$TESTS_DIR"/kube/*.go "$KUBE_MOD" "$KUBE_SUM" -- \
  "${KUBE_GO_FLAGS[@]}" -ldflags "$GO_LDFLAGS" .
KUBELOCAL_REBUILT=$REBUILT

# kubectl: the machine's if its client is within one minor version of the
# API server (kubectl's version skew policy), else built from
# k8s.io/kubernetes (kept in go.mod by tests/kube/tools.go).
KUBECTL_MIN_MINOR=$((K8S_MINOR - 1))
KUBECTL_MAX_MINOR=$((K8S_MINOR + 1))
choose_kubectl() {
  local sys minor
  sys=$(command -v kubectl 2>/dev/null || true)
  if [[ ${NODEIMAGE_BUILD_KUBECTL:-0} != 1 && -n $sys ]]; then
    minor=$("$sys" version --client -o json 2>/dev/null |
      sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | head -n 1 || true)
    if [[ -n $minor ]] && ((minor >= KUBECTL_MIN_MINOR && minor <= KUBECTL_MAX_MINOR)); then
      KUBECTL=$sys
      log "using $KUBECTL (client minor $minor)"
      return 0
    fi
    log "machine kubectl $sys has client minor '${minor:-?}' (not $KUBECTL_MIN_MINOR to $KUBECTL_MAX_MINOR); building one"
  fi
  go_build_stamped "$BIN/kubectl" "$TESTS_DIR/kube" "$KUBE_MOD" "$KUBE_SUM" -- \
    "${KUBE_GO_FLAGS[@]}" -ldflags "$GO_LDFLAGS" k8s.io/kubernetes/cmd/kubectl
  KUBECTL=$BIN/kubectl
}
choose_kubectl

# containerd of each node (lib.sh, "containerd runtimes of the nodes"):
# the defaults, overridden node by node by NODEIMAGE_NODE_RUNTIMES.
declare -A runtime_of=()
RUNTIME_ALL=""
read -r -a _entries <<<"${NODEIMAGE_NODE_RUNTIMES:-}"
for _e in "${_entries[@]}"; do
  [[ $_e == ?*=containerd/* ]] || die "NODEIMAGE_NODE_RUNTIMES: '$_e' is not NODE=containerd/... (e.g. node-2=containerd/2.2/v3)"
  _n=${_e%%=*}
  if [[ $_n == "*" ]]; then
    RUNTIME_ALL=${_e#*=}
  elif [[ $_n =~ ^node-([0-9]+)$ ]]; then
    # A list exported by env.sh of a bigger cluster may name more nodes.
    if ((BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= NODE_COUNT)); then runtime_of[$_n]=${_e#*=}; fi
  else
    die "NODEIMAGE_NODE_RUNTIMES: unknown node '$_n' (node-<i> or *)"
  fi
done
NODE_RT_SPECS=() NODE_RT_LINES=() NODE_RT_DIRS=() NODE_RT_VERSIONS=() NODE_RT_CONFIGS=() NODE_RT_DISCARDS=()
declare -A lines_needed=()
for i in "${!NODE_NAMES[@]}"; do
  resolve_runtime "${runtime_of[${NODE_NAMES[i]}]:-${RUNTIME_ALL:-${DEFAULT_NODE_RUNTIMES[i % ${#DEFAULT_NODE_RUNTIMES[@]}]}}}"
  NODE_RT_SPECS+=("$RT_SPEC") NODE_RT_LINES+=("$RT_LINE") NODE_RT_DIRS+=("$RT_DIR")
  NODE_RT_VERSIONS+=("$RT_VERSION") NODE_RT_CONFIGS+=("$RT_CONFIG") NODE_RT_DISCARDS+=("$RT_DISCARD")
  lines_needed[$RT_LINE]=1
done
# real-node.sh's containerd too, whole (it runs containers: the shim): every
# Go build of a run happens here, once.
resolve_runtime "$REAL_NODE_RUNTIME"
lines_needed[$RT_LINE]=whole
for line in $(containerd_lines); do
  case ${lines_needed[$line]:-} in
    whole) build_containerd "$line" ;;
    1) build_containerd "$line" --daemon-only ;;
  esac
done

kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" --request-timeout=10s "$@"; }

# ---------------------------------------------------------------------------
# 3. Control plane: apiserver first (it takes the longest to become ready;
#    registries, images and containerds are prepared meanwhile)
# ---------------------------------------------------------------------------
if ((KUBELOCAL_REBUILT)); then
  # A running control plane uses the old binary: restart it.
  stop_daemon controller-manager
  stop_daemon apiserver
fi
# Check every port up front, so a conflict fails before anything starts.
require_port_free_for apiserver "$API_PORT"
require_port_free_for apiserver "$ETCD_PORT"
require_port_free_for apiserver "$((ETCD_PORT + 1))"
require_port_free_for "registry-$REG_PORT" "$REG_PORT"
require_port_free_for "registry-$AUTH_REG_PORT" "$AUTH_REG_PORT"
echo "$K8S_VERSION" >"$KUBE_DIR/version"
start_daemon apiserver "$BIN/kubelocal" apiserver "$KUBE_DIR" "$API_PORT" "$ETCD_PORT"

# ---------------------------------------------------------------------------
# 4. Registries
# ---------------------------------------------------------------------------
# Generated once, kept in $STATE until down.sh.
[[ -s $REG_DIR/http-secret ]] || head -c 24 /dev/urandom | base64 | tr -d '/+=\n' >"$REG_DIR/http-secret"
if [[ ! -s $REG_DIR/password ]]; then
  (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=\n' >"$REG_DIR/password")
fi
AUTH_PASSWORD=$(cat "$REG_DIR/password")
if [[ ! -s $REG_DIR/htpasswd ]]; then
  htpasswd -Bbc "$REG_DIR/htpasswd.new" "$AUTH_USER" "$AUTH_PASSWORD" 2>/dev/null
  mv -f "$REG_DIR/htpasswd.new" "$REG_DIR/htpasswd"
fi

# registry_config PORT WITH_AUTH(0|1): distribution 2.8 config on stdout.
registry_config() {
  local port=$1 auth=$2
  cat <<EOF
# Generated by tests/cluster/up.sh
version: 0.1
log:
  level: info
  fields:
    service: registry-$port
storage:
  filesystem:
    rootdirectory: $REG_DIR/data-$port
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  secret: $(cat "$REG_DIR/http-secret")
health:
  storagedriver:
    enabled: false
EOF
  if ((auth)); then
    cat <<EOF
auth:
  htpasswd:
    realm: nodeimage-test-registry
    path: $REG_DIR/htpasswd
EOF
  fi
}

start_registry() {
  local port=$1 auth=$2 name=registry-$1
  local cfg=$REG_DIR/config-$port.yml
  mkdir -p "$REG_DIR/data-$port"
  if registry_config "$port" "$auth" | write_if_changed "$cfg"; then
    stop_daemon "$name" # config changed: a running registry must reload it
  fi
  require_port_free_for "$name" "$port"
  start_daemon "$name" "$(command -v docker-registry)" serve "$cfg"
}
start_registry "$REG_PORT" 0
start_registry "$AUTH_REG_PORT" 1

http_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@" || true; }
wait_until 30 "registry $REGISTRY" "registry-$REG_PORT" \
  bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://$REGISTRY/v2/) == 200 ]]"
wait_until 30 "registry $AUTH_REGISTRY" "registry-$AUTH_REG_PORT" \
  bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://$AUTH_REGISTRY/v2/) == 401 ]]"

# ---------------------------------------------------------------------------
# 5. Test images: built once into the OCI layout $IMAGES, then pushed
# ---------------------------------------------------------------------------
# The layout-local tag of each image (repo:tag in the registries is derived).
IMAGE_TAGS=(test-v1 test-v2 test-v3 multi-v1 big-v1 digest-only)

# Tags present in the layout (captured once: `umoci ls | grep -q` would let
# umoci die of SIGPIPE, which pipefail reports as a failure).
LAYOUT_TAGS=""
layout_has() { grep -qx -- "$1" <<<"$LAYOUT_TAGS"; }

# build_image LAYOUT_TAG: creates the image under a temporary tag and only
# names it LAYOUT_TAG when complete, so an interrupted build is redone.
build_image() {
  local tag=$1 tmp=building-$1 work
  work=$(mktemp -d "$TMP_DIR/image.XXXXXX")
  local b=$work/bundle ref="$IMAGES:$tmp"
  umoci rm --image "$ref" >/dev/null 2>&1 || true
  umoci new --image "$ref"
  umoci unpack --image "$ref" "$b" >/dev/null
  # layer ADD: add/modify files in the bundle, then record one layer.
  layer() { umoci repack --refresh-bundle --image "$ref" "$b"; }
  case $tag in
    test-v1 | test-v2 | test-v3)
      local v=${tag#test-}
      echo "hello from test:$v" >"$b/rootfs/hello.txt"
      if [[ $v == v3 ]]; then echo "only in v3" >"$b/rootfs/v3-only.txt"; fi
      layer
      umoci config --image "$ref" --config.cmd /hello.txt \
        --config.label "dev.nodeimage.test=test:$v"
      ;;
    multi-v1)
      # Three layers; the third deletes a file of the first (a whiteout).
      echo "layer 1" >"$b/rootfs/one.txt"
      echo "shared, from layer 1" >"$b/rootfs/shared.txt"
      layer
      echo "layer 2" >"$b/rootfs/two.txt"
      echo "shared, from layer 2" >"$b/rootfs/shared.txt"
      layer
      echo "layer 3" >"$b/rootfs/three.txt"
      rm -f "$b/rootfs/one.txt"
      layer
      umoci config --image "$ref" --config.cmd /three.txt --config.label "dev.nodeimage.test=multi:v1"
      ;;
    big-v1)
      # ~50 MB of incompressible data in one layer.
      dd if=/dev/urandom of="$b/rootfs/random.bin" bs=1M count=50 status=none
      layer
      umoci config --image "$ref" --config.cmd /random.bin --config.label "dev.nodeimage.test=big:v1"
      ;;
    digest-only)
      echo "pushed by digest only, never tagged" >"$b/rootfs/digest-only.txt"
      layer
      umoci config --image "$ref" --config.cmd /digest-only.txt --config.label "dev.nodeimage.test=digest-only"
      ;;
    *) die "unknown test image $tag" ;;
  esac
  umoci tag --image "$ref" "$tag"
  umoci rm --image "$ref"
  rm -rf "$work"
}

[[ -f $IMAGES/index.json ]] || umoci init --layout "$IMAGES"
LAYOUT_TAGS=$(umoci ls --layout "$IMAGES")
built_any=0
for tag in "${IMAGE_TAGS[@]}"; do
  if ! layout_has "$tag"; then
    log "building test image $tag"
    build_image "$tag"
    built_any=1
  fi
done
if ((built_any)); then umoci gc --layout "$IMAGES"; fi

# Manifest digest (hex) of a layout image, as the registry will store it
# (skopeo --preserve-digests pushes the manifest byte for byte).
layout_digest() { skopeo --insecure-policy inspect --raw "oci:$IMAGES:$1" | sha256sum | cut -d' ' -f1; }

# push_image LAYOUT_TAG PORT REPO [TAG]: pushes unless the registry storage
# already holds that manifest (by tag, or by digest when TAG is empty).
push_image() {
  local ltag=$1 port=$2 repo=$3 rtag=${4:-} digest dest link
  local data=$REG_DIR/data-$port/docker/registry/v2/repositories/$repo/_manifests
  digest=$(layout_digest "$ltag")
  if [[ -n $rtag ]]; then
    dest=127.0.0.1:$port/$repo:$rtag
    link=$data/tags/$rtag/current/link
    [[ "$(cat "$link" 2>/dev/null)" == "sha256:$digest" ]] && return 0
  else
    dest=127.0.0.1:$port/$repo@sha256:$digest
    link=$data/revisions/sha256/$digest/link
    [[ -f $link ]] && return 0
  fi
  local creds=
  if [[ $port == "$AUTH_REG_PORT" ]]; then creds=$AUTH_USER:$AUTH_PASSWORD; fi
  log "pushing $ltag -> $dest"
  push_oci "$IMAGES:$ltag" "$dest" "$creds"
}

for port in "$REG_PORT" "$AUTH_REG_PORT"; do
  push_image test-v1 "$port" test v1
  push_image test-v2 "$port" test v2
  push_image test-v3 "$port" test v3
  push_image multi-v1 "$port" multi v1
  push_image big-v1 "$port" big v1
  push_image digest-only "$port" digestonly # by digest: no tag at all
done
DIGEST_ONLY_DIGEST=sha256:$(layout_digest digest-only)
DIGEST_ONLY_REF=$REGISTRY/digestonly@$DIGEST_ONLY_DIGEST

# The digest-only repository must have no tags: distribution answers 404
# NAME_UNKNOWN for a repository without tags (or an empty list).
tags_json=$(curl -s --max-time 5 "http://$REGISTRY/v2/digestonly/tags/list" || true)
if [[ $tags_json == *'"tags":['*'"'* ]]; then
  die "digestonly unexpectedly has tags: $tags_json"
fi
[[ $(http_code -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  "http://$REGISTRY/v2/digestonly/manifests/$DIGEST_ONLY_DIGEST") == 200 ]] ||
  die "digestonly manifest $DIGEST_ONLY_DIGEST is not served by $REGISTRY"

# ---------------------------------------------------------------------------
# 6. Nodes: one containerd each
# ---------------------------------------------------------------------------
# overlayfs when the kernel has it and it actually mounts on $STATE's
# filesystem (overlay on overlay fails, e.g. inside some containers).
probe_overlay() {
  grep -qw overlay /proc/filesystems || return 1
  local d
  d=$(mktemp -d "$TMP_DIR/overlay-probe.XXXXXX")
  mkdir -p "$d/lower" "$d/upper" "$d/work" "$d/merged"
  local ok=1
  if mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2>/dev/null; then
    umount "$d/merged" && ok=0
  fi
  rm -rf "$d"
  return $ok
}
case ${NODEIMAGE_SNAPSHOTTER:-} in
  overlayfs | native) SNAPSHOTTER=$NODEIMAGE_SNAPSHOTTER ;;
  "") if probe_overlay; then SNAPSHOTTER=overlayfs; else SNAPSHOTTER=native; fi ;;
  *) die "NODEIMAGE_SNAPSHOTTER must be overlayfs or native" ;;
esac
log "snapshotter: $SNAPSHOTTER"

declare -a SOCKETS=()
for i in "${!NODE_NAMES[@]}"; do
  name=${NODE_NAMES[i]}
  d=$NODES_DIR/$name
  sock=$d/containerd.sock
  # Unix socket paths are limited to 107 bytes (+ ".ttrpc").
  ((${#sock} + 6 <= 107)) || die "socket path too long (${#sock} chars): $sock; use a shorter NODEIMAGE_STATE"
  # A node that changes containerd version starts empty: a root written by
  # another version (2.x metadata after a downgrade, say) is not ours to
  # migrate, and the nodes hold only what the tests pulled. Roots of older
  # up.sh runs, which have no record, were Debian's.
  prev=$(cat "$d/containerd-version" 2>/dev/null || debian_containerd_version)
  if [[ $prev != "${NODE_RT_VERSIONS[i]}" ]]; then
    stop_daemon "containerd-$name"
    if [[ -d $d/root || -d $d/state ]]; then
      log "$name: containerd $prev -> ${NODE_RT_VERSIONS[i]}; emptying its root and state"
      unmount_under "$d"
      rm -rf "$d/root" "$d/state"
    fi
  fi
  mkdir -p "$d/root" "$d/state" "$d/opt" "$d/cni/bin" "$d/cni/net.d"
  echo "${NODE_RT_VERSIONS[i]}" >"$d/containerd-version"
  changed=0
  for reg in "$REGISTRY" "$AUTH_REGISTRY"; do
    mkdir -p "$d/certs.d/$reg"
    if registry_hosts "$reg" | write_if_changed "$d/certs.d/$reg/hosts.toml"; then changed=1; fi
  done
  RT_LINE=${NODE_RT_LINES[i]} RT_DIR=${NODE_RT_DIRS[i]} RT_CONFIG=${NODE_RT_CONFIGS[i]} RT_DISCARD=${NODE_RT_DISCARDS[i]}
  if runtime_config "$d" "$SNAPSHOTTER" "$REGISTRY/pause:3.6" | write_if_changed "$d/config.toml"; then changed=1; fi
  if ((changed)); then stop_daemon "containerd-$name"; fi
  start_daemon "containerd-$name" "${NODE_RT_DIRS[i]}/containerd" --config "$d/config.toml"
  SOCKETS+=("$sock")
done

# Nodes beyond NODE_COUNT left over from a bigger earlier cluster: stop them.
for pidfile in "$PIDS"/containerd-node-*.pid; do
  [[ -e $pidfile ]] || continue
  n=$(basename "$pidfile" .pid)
  n=${n#containerd-node-}
  if [[ $n =~ ^[0-9]+$ ]] && ((n > NODE_COUNT)); then stop_daemon "containerd-node-$n"; fi
done

# Each node must run the containerd it was given; the Node objects report
# the version as a kubelet would: <runtime name>://<runtime version> of CRI
# Version (Debian's says containerd://1.6.20~ds1).
NODE_RUNTIME_VERSIONS=()
for i in "${!NODE_NAMES[@]}"; do
  wait_until 30 "containerd of ${NODE_NAMES[i]} to answer CRI" "containerd-${NODE_NAMES[i]}" \
    "$NI_CRI" --socket "${SOCKETS[i]}" --timeout 5 version
  read -r rt_name rt_version _ <<<"$("$NI_CRI" --socket "${SOCKETS[i]}" --timeout 10 version)"
  [[ $rt_version == "${NODE_RT_VERSIONS[i]}" ]] ||
    die "${NODE_NAMES[i]}: CRI reports $rt_name $rt_version, expected ${NODE_RT_VERSIONS[i]} (${NODE_RT_SPECS[i]})"
  NODE_RUNTIME_VERSIONS+=("$rt_name://$rt_version")
  log "${NODE_NAMES[i]}: ${NODE_RT_SPECS[i]} (CRI: $rt_name $rt_version)"
done

# ---------------------------------------------------------------------------
# 7. Control plane ready, controller-manager, Node objects
# ---------------------------------------------------------------------------
wait_until 60 "the apiserver to write $KUBECONFIG_PATH" apiserver test -s "$KUBECONFIG_PATH"
readyz_ok() { [[ "$(kc get --raw /readyz 2>/dev/null)" == ok ]]; }
wait_until 120 "kube-apiserver /readyz" apiserver readyz_ok
log "apiserver ready"

start_daemon controller-manager "$BIN/kubelocal" controller-manager "$KUBE_DIR"

NOW=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for i in "${!NODE_NAMES[@]}"; do
  name=${NODE_NAMES[i]}
  idx=$((i + 1))
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  labels:
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    nodeimage.dev/index: "$idx"
    node-role.kubernetes.io/edge: ""
EOF
  # Status as a kubelet would report it (nothing will mark it NotReady: the
  # node-lifecycle controller is not running).
  kc patch node "$name" --subresource=status --type=merge -p "$(
    cat <<EOF
{"status": {
  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                  "message": "nodeimage test node (containerd ${SOCKETS[i]})",
                  "lastHeartbeatTime": "$NOW", "lastTransitionTime": "$NOW"}],
  "addresses": [{"type": "Hostname", "address": "$name"}],
  "nodeInfo": {"kubeletVersion": "$K8S_VERSION", "kubeProxyVersion": "",
               "containerRuntimeVersion": "${NODE_RUNTIME_VERSIONS[i]}",
               "architecture": "amd64", "operatingSystem": "linux",
               "osImage": "nodeimage test node", "kernelVersion": "$(uname -r)",
               "machineID": "", "systemUUID": "", "bootID": ""},
  "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
  "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}
}}
EOF
  )" >/dev/null
done

# Delete Node objects of nodes beyond NODE_COUNT (from a bigger earlier run).
for n in $(kc get nodes -l nodeimage.dev/index -o 'jsonpath={.items[*].metadata.labels.nodeimage\.dev/index}'); do
  if ((n > NODE_COUNT)); then kc delete node "node-$n" --wait=false >/dev/null; fi
done

# The serviceaccount controller creates default/default: proves the
# controller-manager is working.
sa_ok() { kc get serviceaccount default -n default; }
wait_until 60 "controller-manager to create ServiceAccount default/default" controller-manager sa_ok

# ---------------------------------------------------------------------------
# 8. Health checks
# ---------------------------------------------------------------------------
log "health checks"
readyz_ok || die "apiserver is not ready"
# Only the simulated nodes of this script: a benchmark may have left
# simulated ones of its own, and real-node.sh adds a kubelet.
ready_nodes=$(kc get nodes -l 'nodeimage.dev/sim!=true,nodeimage.dev/real-node!=true' -o 'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '=True$' || true)
((ready_nodes == NODE_COUNT)) || die "expected $NODE_COUNT Ready nodes, found $ready_nodes"
for i in "${!NODE_NAMES[@]}"; do
  "$NI_CRI" --socket "${SOCKETS[i]}" --timeout 10 version >/dev/null ||
    die "containerd of ${NODE_NAMES[i]} does not answer CRI"
done
[[ $(http_code "http://$REGISTRY/v2/") == 200 ]] || die "$REGISTRY/v2/ is not 200"
[[ $(http_code "http://$AUTH_REGISTRY/v2/") == 401 ]] || die "$AUTH_REGISTRY/v2/ without credentials is not 401"
[[ $(http_code -u "$AUTH_USER:$AUTH_PASSWORD" "http://$AUTH_REGISTRY/v2/") == 200 ]] ||
  die "$AUTH_REGISTRY/v2/ with credentials is not 200"

# A CRI pull from each registry on every node (each containerd version pulls
# its own way: 2.x through the Transfer Service), removed again afterwards
# (one at a time: CRI RemoveImage removes an image id with all its tags). An
# image that was already on the node (reused cluster) is left in place.
check_pull() {
  local i=$1 image=$2
  shift 2
  local sock=${SOCKETS[i]} name=${NODE_NAMES[i]} present=0
  if "$NI_CRI" --socket "$sock" status "$image" >/dev/null 2>&1; then present=1; fi
  "$NI_CRI" --socket "$sock" pull "$image" "$@" >/dev/null || die "CRI pull of $image on $name failed"
  if ((present == 0)); then
    "$NI_CRI" --socket "$sock" rmi "$image" >/dev/null || die "CRI rmi of $image on $name failed"
    if "$NI_CRI" --socket "$sock" status "$image" >/dev/null 2>&1; then die "$image still present on $name after rmi"; fi
  fi
}
for i in "${!NODE_NAMES[@]}"; do
  check_pull "$i" "$REGISTRY/test:v1"
  check_pull "$i" "$AUTH_REGISTRY/test:v1" --username "$AUTH_USER" --password "$AUTH_PASSWORD"
  # And the auth registry must refuse a pull without credentials.
  if "$NI_CRI" --socket "${SOCKETS[i]}" pull "$AUTH_REGISTRY/test:v1" >/dev/null 2>&1; then
    die "pull from $AUTH_REGISTRY without credentials unexpectedly succeeded on ${NODE_NAMES[i]}"
  fi
done

# ---------------------------------------------------------------------------
# 9. Env file
# ---------------------------------------------------------------------------
ENV_FILE=$STATE/env.sh
{
  echo "# Generated by tests/cluster/up.sh on $(date -Is). Source it: . $ENV_FILE"
  # Single-quoted values (none of them contains a quote).
  ex() { printf "export %s='%s'\n" "$1" "$2"; }
  ex NODEIMAGE_STATE "$STATE"
  ex KUBECONFIG "$KUBECONFIG_PATH"
  ex KUBECTL "$KUBECTL"
  ex NODEIMAGE_API_SERVER "https://127.0.0.1:$API_PORT"
  ex NODEIMAGE_NODES "${NODE_NAMES[*]}"
  ex NODEIMAGE_NODE_COUNT "$NODE_COUNT"
  for i in "${!SOCKETS[@]}"; do ex "NODEIMAGE_CONTAINERD_$((i + 1))" "${SOCKETS[i]}"; done
  ex NODEIMAGE_CONTAINERD_SOCKETS "${SOCKETS[*]}"
  ex NODEIMAGE_SNAPSHOTTER "$SNAPSHOTTER"
  echo "# containerd of each node, NODE=containerd/VERSION/vCONFIG[/discard]: containerd's"
  echo "# version (without a distribution suffix), its config file version (2 or 3),"
  echo "# and /discard when discard_unpacked_layers is on (layer blobs are deleted once"
  echo "# unpacked). Format and defaults: tests/cluster/lib.sh."
  ex NODEIMAGE_NODE_RUNTIMES "$(for i in "${!NODE_NAMES[@]}"; do printf '%s=%s ' "${NODE_NAMES[i]}" "${NODE_RT_SPECS[i]}"; done | sed 's/ $//')"
  ex NODEIMAGE_REGISTRY "$REGISTRY"
  ex NODEIMAGE_AUTH_REGISTRY "$AUTH_REGISTRY"
  ex NODEIMAGE_AUTH_USER "$AUTH_USER"
  ex NODEIMAGE_AUTH_PASSWORD "$AUTH_PASSWORD"
  ex NODEIMAGE_DIGEST_ONLY "$DIGEST_ONLY_REF"
  ex NODEIMAGE_CRI "$NI_CRI"
} >"$ENV_FILE.new"
mv -f "$ENV_FILE.new" "$ENV_FILE"

log "cluster up in $((SECONDS - START_TIME)) s: $NODE_COUNT nodes, apiserver https://127.0.0.1:$API_PORT, registries $REGISTRY and $AUTH_REGISTRY"
echo "$ENV_FILE" >&3

# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
# Shared helpers for tests/cluster/up.sh and tests/cluster/down.sh.
# Sourced, not executed. Defines paths, logging and PID-file based process
# management. Nothing here starts or stops anything by itself.

# ---------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------
CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTS_DIR=$(dirname "$CLUSTER_DIR")
REPO_ROOT=$(dirname "$TESTS_DIR")

STATE=${NODEIMAGE_STATE:-$REPO_ROOT/.state}
# Make the state dir absolute without requiring it to exist (down.sh must not
# create it). Strip trailing slashes so string comparisons on paths work.
case $STATE in
  /*) ;;
  *) STATE=$PWD/$STATE ;;
esac
while [[ $STATE == */ && $STATE != / ]]; do STATE=${STATE%/}; done

PIDS=$STATE/pids   # <name>.pid (the pid) and <name>.cmd (its expected cmdline)
LOGS=$STATE/logs   # <name>.log, one per daemon
# Marker written by up.sh; down.sh refuses to delete a directory without it,
# so a mistyped NODEIMAGE_STATE can never wipe an unrelated directory.
STATE_MARKER=$STATE/.nodeimage-state

# ---------------------------------------------------------------------------
# Logging (stderr, so stdout of up.sh carries only the env file path)
# ---------------------------------------------------------------------------
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# Refuse state dirs whose deletion would be a disaster.
check_state_path() {
  case $STATE in
    / | /root | /home | /tmp | /work | "$REPO_ROOT" | "$HOME" | "$TESTS_DIR")
      die "refusing to use NODEIMAGE_STATE=$STATE (too dangerous to manage/delete)"
      ;;
  esac
}

# ---------------------------------------------------------------------------
# Process management
# ---------------------------------------------------------------------------

# Print the command line of a pid with NUL separators turned into spaces
# (empty for a zombie or a vanished process).
proc_cmdline() {
  local pid=$1
  [[ -r /proc/$pid/cmdline ]] || return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | sed 's/ $//' || true
}

# True when pid is alive and its cmdline equals the expected string.
pid_is() {
  local pid=$1 expected=$2
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ "$(proc_cmdline "$pid")" == "$expected" ]]
}

# Recorded pid and command of a daemon (empty when unknown).
recorded_pid() { cat "$PIDS/$1.pid" 2>/dev/null || true; }
recorded_cmd() { cat "$PIDS/$1.cmd" 2>/dev/null || true; }

# True when the daemon recorded under NAME is still running as recorded.
daemon_alive() {
  local name=$1 pid cmd
  pid=$(recorded_pid "$name")
  cmd=$(recorded_cmd "$name")
  [[ -n $pid && -n $cmd ]] && pid_is "$pid" "$cmd"
}

# Print the pid of a live process whose cmdline is exactly the given string
# (first match), or nothing.
find_pid_by_cmdline() {
  local want=$1 p comm exe=${1%% *}
  exe=${exe##*/}
  exe=${exe:0:15} # /proc/<pid>/comm holds the first 15 bytes of the name
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    # Cheap pre-filter without forking: the process name must match.
    read -r comm 2>/dev/null <"/proc/$p/comm" || continue
    [[ $comm == "$exe" ]] || continue
    if [[ "$(proc_cmdline "$p")" == "$want" ]]; then
      echo "$p"
      return 0
    fi
  done
}

# Stop the daemon recorded under NAME: SIGTERM, wait up to 10 s, then SIGKILL.
# Only signals the pid if /proc/<pid>/cmdline still is the recorded command,
# so a recycled pid is never touched. Always removes the PID/cmd files.
stop_daemon() {
  local name=$1 pid cmd i
  pid=$(recorded_pid "$name")
  cmd=$(recorded_cmd "$name")
  if [[ -n $pid && -n $cmd ]] && pid_is "$pid" "$cmd"; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      pid_is "$pid" "$cmd" || break
      sleep 0.1
    done
    if pid_is "$pid" "$cmd"; then
      log "$name (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do
        pid_is "$pid" "$cmd" || break
        sleep 0.1
      done
    fi
  elif [[ -n $pid ]]; then
    log "$name: pid $pid is gone (or is another process now); nothing to stop"
  fi
  rm -f "$PIDS/$name.pid" "$PIDS/$name.cmd"
}

# start_daemon NAME CMD [ARGS...]
# Starts CMD in the background unless the daemon recorded under NAME already
# runs exactly this command line (then it is reused). A recorded daemon that
# runs a *different* command line (e.g. other ports) is stopped first.
# Daemons are started directly (nohup, no setsid) so $! is the daemon's pid.
start_daemon() {
  local name=$1
  shift
  local want="$*" pid
  if daemon_alive "$name"; then
    if [[ "$(recorded_cmd "$name")" != "$want" ]]; then
      log "$name runs with a different command line; restarting it"
      stop_daemon "$name"
    elif [[ "$(readlink "/proc/$(recorded_pid "$name")/exe" 2>/dev/null)" == *" (deleted)" ]]; then
      # Its binary was rebuilt (go_build_stamped replaces the file).
      log "$name runs a binary that has since been replaced; restarting it"
      stop_daemon "$name"
    else
      log "reusing $name (pid $(recorded_pid "$name"))"
      return 0
    fi
  fi
  rm -f "$PIDS/$name.pid" "$PIDS/$name.cmd"
  mkdir -p "$PIDS" "$LOGS"
  # A process running exactly this command line whose PID file was lost (or
  # overwritten): adopt it rather than starting a second copy on the same
  # sockets/ports.
  pid=$(find_pid_by_cmdline "$want")
  if [[ -n $pid ]]; then
    echo "$pid" >"$PIDS/$name.pid"
    printf '%s' "$want" >"$PIDS/$name.cmd"
    log "adopting running $name (pid $pid; its PID file was missing or stale)"
    return 0
  fi
  printf '\n===== %s starting: %s\n' "$(date -Is)" "$want" >>"$LOGS/$name.log"
  # fd 3 (up.sh's real stdout) is closed so that a caller reading up.sh's
  # output through a pipe is not kept waiting by the daemon; fd 9 (the lock
  # real-node.sh holds while it runs) so that the daemon does not hold it.
  # START_IN_MOUNT_NS=PIN: in the mount namespace pinned at PIN (a real
  # node's). nsenter execs the command, so the pid and its command line
  # are the command's, as recorded.
  if [[ -n ${START_IN_MOUNT_NS:-} ]]; then
    nohup nsenter --mount="$START_IN_MOUNT_NS" -- "$@" </dev/null >>"$LOGS/$name.log" 2>&1 3>&- 9>&- &
  else
    nohup "$@" </dev/null >>"$LOGS/$name.log" 2>&1 3>&- 9>&- &
  fi
  pid=$!
  echo "$pid" >"$PIDS/$name.pid"
  printf '%s' "$want" >"$PIDS/$name.cmd"
  # Until nohup has exec'd the command, the pid's command line is nohup's
  # (or the forking shell's), and daemon_alive, which wait_until asks, would
  # call the daemon dead (seen on a loaded 2-core machine): wait up to 2 s
  # until the pid runs the command, or is gone.
  local i
  for ((i = 0; i < 100; i++)); do
    daemon_alive "$name" && break
    [[ -e /proc/$pid && -n $(proc_cmdline "$pid") ]] || break
    sleep 0.02
  done
  log "started $name (pid $pid, log $LOGS/$name.log)"
}

# Fail with the tail of a daemon's log if it is not running.
assert_daemon_alive() {
  local name=$1
  if ! daemon_alive "$name"; then
    log "---- last lines of $LOGS/$name.log ----"
    tail -n 30 "$LOGS/$name.log" >&2 2>/dev/null || true
    die "$name exited unexpectedly"
  fi
}

# wait_until TIMEOUT_S DESCRIPTION DAEMON_NAME|- CMD [ARGS...]
# Polls CMD every 0.2 s until it succeeds. Fails early if the named daemon
# (unless "-") died, printing its log tail.
wait_until() {
  local timeout=$1 what=$2 daemon=$3
  shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [[ $daemon != - ]]; then assert_daemon_alive "$daemon"; fi
    if ((SECONDS >= deadline)); then
      if [[ $daemon != - ]]; then
        log "---- last lines of $LOGS/$daemon.log ----"
        tail -n 30 "$LOGS/$daemon.log" >&2 2>/dev/null || true
      fi
      die "timed out after ${timeout}s waiting for $what"
    fi
    sleep 0.2
  done
}

# True when something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Die if PORT is taken while the daemon NAME (which should own it) is not ours.
require_port_free_for() {
  local name=$1 port=$2
  if ! daemon_alive "$name" && port_open "$port"; then
    die "127.0.0.1:$port is already in use by a process that is not ours ($name); stop it or choose another port"
  fi
}

# write_if_changed FILE: writes stdin to FILE only if the content differs.
# Returns 0 when the file was (re)written, 1 when it was already up to date.
write_if_changed() {
  local file=$1 tmp
  tmp=$(mktemp "$file.XXXXXX")
  cat >"$tmp"
  if [[ -f $file ]] && cmp -s "$tmp" "$file"; then
    rm -f "$tmp"
    return 1
  fi
  chmod 644 "$tmp"
  mv -f "$tmp" "$file"
  return 0
}

# unmount_under DIR: lazily unmounts whatever is mounted at or below DIR,
# deepest first (/proc/mounts escapes spaces etc. as octal; printf %b
# decodes them).
unmount_under() {
  local m mounts
  mapfile -t mounts < <(awk -v s="$1" 'index($2, s "/") == 1 || $2 == s { print $2 }' /proc/mounts |
    while IFS= read -r m; do printf '%b\n' "$m"; done | sort -r)
  for m in "${mounts[@]}"; do
    log "unmounting $m"
    umount -l "$m" 2>/dev/null || log "warning: could not unmount $m"
  done
}

# sha256 of the given strings/files, for build stamps.
hash_of() { sha256sum "$@" | sha256sum | cut -d' ' -f1; }

# ---------------------------------------------------------------------------
# Rust builds
# ---------------------------------------------------------------------------

# The one cargo selection of the test scripts: every package, every target.
# Cargo resolves crate features per selection, so `-p a` after `-p b` would
# recompile kube, hyper, tonic and the rest with another feature set (a cold
# run compiled kube five times); with one selection they compile once.
CARGO_SELECTION=(--workspace --all-targets)

# cargo_build_all: builds what any test script runs (a no-op when fresh).
cargo_build_all() {
  (cd "$REPO_ROOT" && cargo build --quiet "${CARGO_SELECTION[@]}")
}

# ---------------------------------------------------------------------------
# Go builds
# ---------------------------------------------------------------------------

# go_mod_require GO_MOD MODULE: the version of MODULE that GO_MOD requires.
go_mod_require() {
  awk -v m="$2" '$1 == "require" && $2 == m { print $3; exit } $1 == m && $2 ~ /^v/ { print $2; exit }' "$1"
}

# go_build_stamped OUT DIR STAMP_INPUTS... -- GO_BUILD_ARGS...
# Runs `go build -o OUT GO_BUILD_ARGS...` in the Go module DIR only when the
# hash of the inputs (files, go version, CGO_ENABLED, the build arguments)
# differs from OUT.stamp or OUT is missing; a no-op costs a `go version`.
# OUT ending in "/" is a directory (several packages built at once); it is
# replaced as a whole. A running daemon keeps its old binary (start_daemon
# restarts it, since /proc/<pid>/exe then points at a deleted file).
# Sets REBUILT=1 when it built.
go_build_stamped() {
  local out=$1 dir=$2
  shift 2
  local inputs=()
  while [[ $1 != -- ]]; do
    inputs+=("$1")
    shift
  done
  shift
  local target=${out%/} stamp
  stamp=$({
    go version
    echo "CGO_ENABLED=${CGO_ENABLED-}"
    echo "$*"
    cat "${inputs[@]}"
  } | sha256sum | cut -d' ' -f1)
  REBUILT=0
  if [[ -e $target && "$(cat "$target.stamp" 2>/dev/null)" == "$stamp" ]]; then
    log "$(basename "$target") is up to date"
    return 0
  fi
  log "building $(basename "$target") (go build; a cold build takes minutes)"
  local t0=$SECONDS
  rm -rf "$target.new"
  if [[ $out == */ ]]; then
    (cd "$dir" && go build -buildvcs=false -trimpath -o "$target.new/" "$@")
    rm -rf "$target"
  else
    (cd "$dir" && go build -buildvcs=false -trimpath -o "$target.new" "$@")
  fi
  mv -f "$target.new" "$target"
  echo "$stamp" >"$target.stamp"
  REBUILT=1
  log "built $(basename "$target") in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------------------
# containerd runtimes of the nodes
# ---------------------------------------------------------------------------
# A node's runtime is written  containerd/VERSION[/CONFIG][/discard]:
#   VERSION  "debian" (or its version, e.g. 1.6 or 1.6.20): Debian's package,
#            /usr/bin/containerd; or a line of tests/containerd/ (1.7, 2.2,
#            2.x: the Go module tests/containerd/v<line>, built by
#            build_containerd into $STATE/bin/containerd-v<line>/), or the
#            exact version that line builds (e.g. 1.7.35)
#   CONFIG   config file version: v2 (any containerd) or v3 (2.x only).
#            Default: v2 for 1.x, v3 for 2.x
#   discard  discard_unpacked_layers = true in the CRI config: layer blobs
#            are deleted from the content store once unpacked (as on EKS,
#            GKE, Talos). On 2.x it also makes CRI pull without the Transfer
#            Service
# up.sh resolves every node's runtime to exact versions and exports them
# (NODEIMAGE_NODE_RUNTIMES in env.sh), e.g.
#   node-1=containerd/1.6.20/v2 node-2=containerd/1.7.35/v2/discard node-3=containerd/2.4.2/v3
# The same form is accepted back, so re-running up.sh with env.sh sourced
# keeps the cluster as it is.
DEFAULT_NODE_RUNTIMES=(containerd/debian/v2 containerd/1.7/v2/discard containerd/2.x/v3)
# The real kubelet node of real-node.sh: the LTS line.
REAL_NODE_RUNTIME=containerd/2.2/v3
# real_node_pause_image: the real nodes' sandbox image (real-node.sh pushes
# it to the cluster's registry); the shared controller keeps it in Eraser's
# list (tests/nodeimage.sh).
real_node_pause_image() { echo "$NODEIMAGE_REGISTRY/pause:3.10"; }
# The real nodes of real-node.sh by index: kubelet-1 the LTS line, kubelet-2
# the 1.7 line with layer discard (as managed clusters still run it).
REAL_NODE_RUNTIMES=("$REAL_NODE_RUNTIME" containerd/1.7/v2/discard)
CONTAINERD_MODULES=$TESTS_DIR/containerd
# No cgo (CGO_ENABLED=0: the btrfs snapshotter, the only cgo user, drops out
# by itself, and Debian has no btrfs headers installed), and none of the
# snapshotters the nodes cannot use here.
CONTAINERD_BUILD_TAGS="urfave_cli_no_docs no_btrfs no_zfs no_devmapper no_aufs"

# containerd_module LINE: "MODULE VERSION" that tests/containerd/vLINE requires.
containerd_module() {
  local mod=$CONTAINERD_MODULES/v$1/go.mod
  [[ -f $mod ]] || return 1
  sed -nE 's#^(require)?[[:space:]]*(github\.com/containerd/containerd(/v2)?)[[:space:]]+(v[0-9][^[:space:]]*)[[:space:]]*$#\2 \4#p' "$mod" |
    head -n 1
}

# containerd_lines: the lines of tests/containerd/, e.g. "1.7 2.2 2.x".
containerd_lines() {
  local d lines=()
  for d in "$CONTAINERD_MODULES"/v*/go.mod; do
    [[ -e $d ]] || continue
    d=${d%/go.mod}
    lines+=("${d##*/v}")
  done
  echo "${lines[*]}"
}

# build_containerd LINE [--daemon-only]: containerd, ctr and
# containerd-shim-runc-v2 of tests/containerd/vLINE into
# $BIN/containerd-vLINE/ (stamped: rebuilt only when go.mod/go.sum, the go
# version or the flags change), version-stamped like containerd's Makefile
# does (without the leading "v", as distribution packages report it).
# --daemon-only: containerd alone, for the simulated nodes, which run no
# container (no shim) and are read with Debian's ctr (any ctr speaks to any
# containerd's API); a cold run saves two links per line.
build_containerd() {
  local line=$1 dir=$CONTAINERD_MODULES/v$1 mod ver cmds
  read -r mod ver <<<"$(containerd_module "$line")" || true
  [[ -n ${ver:-} ]] || die "no containerd module in $dir/go.mod"
  cmds=("$mod/cmd/containerd" "$mod/cmd/ctr" "$mod/cmd/containerd-shim-runc-v2")
  [[ ${2:-} != --daemon-only ]] || cmds=("$mod/cmd/containerd")
  CGO_ENABLED=0 go_build_stamped "$BIN/containerd-v$line/" "$dir" "$dir/go.mod" "$dir/go.sum" -- \
    -tags "$CONTAINERD_BUILD_TAGS" -ldflags "-s -w -X $mod/version.Version=${ver#v}" "${cmds[@]}"
}

# Version of Debian's containerd as it reports itself (e.g. 1.6.20~ds1;
# empty when it is not installed).
debian_containerd_version() {
  /usr/bin/containerd --version 2>/dev/null | awk '{print $3}' || true
}

# resolve_runtime SPEC: parses a runtime (format above) into
#   RT_LINE     debian, or a line of tests/containerd/ (1.7, 2.2, 2.x)
#   RT_DIR      directory of its containerd (built whole: with ctr and containerd-shim-runc-v2)
#   RT_VERSION  containerd's version as CRI Version reports it (1.6.20~ds1, 1.7.35)
#   RT_CONFIG   2 or 3
#   RT_DISCARD  0 or 1
#   RT_SPEC     the resolved form, containerd/<version>/v<config>[/discard]
# Does not build anything: RT_DIR may not exist yet (build_containerd).
resolve_runtime() {
  local spec=$1 want rest part parts=() line mod ver deb
  [[ $spec == containerd/* ]] || die "runtime '$spec': must start with containerd/ (e.g. containerd/1.7/v2/discard)"
  rest=${spec#containerd/}
  want=${rest%%/*}
  rest=${rest#"$want"}
  RT_CONFIG="" RT_DISCARD=0 RT_LINE=""
  IFS=/ read -r -a parts <<<"${rest#/}"
  for part in "${parts[@]}"; do
    case $part in
      v2 | v3) RT_CONFIG=${part#v} ;;
      discard) RT_DISCARD=1 ;;
      *) die "runtime '$spec': unknown part '$part' (v2, v3 or discard)" ;;
    esac
  done
  deb=$(debian_containerd_version)
  if [[ $want == debian || (-n $deb && ($want == "$deb" || $want == "${deb%%~*}" || $want == "$(cut -d. -f1-2 <<<"$deb")")) ]]; then
    [[ -n $deb ]] || die "runtime '$spec': Debian's containerd is not installed (apt-get install containerd)"
    RT_LINE=debian RT_DIR=/usr/bin RT_VERSION=$deb
  else
    for line in $(containerd_lines); do
      read -r mod ver <<<"$(containerd_module "$line")" || true
      if [[ $want == "$line" || $want == "${ver#v}" ]]; then
        RT_LINE=$line RT_DIR=$BIN/containerd-v$line RT_VERSION=${ver#v}
        break
      fi
    done
    [[ -n $RT_LINE ]] || die "runtime '$spec': no containerd '$want' here (debian = $deb; tests/containerd lines: $(containerd_lines))"
  fi
  if [[ -z $RT_CONFIG ]]; then
    if [[ $RT_VERSION == 1.* ]]; then RT_CONFIG=2; else RT_CONFIG=3; fi
  fi
  if [[ $RT_CONFIG == 3 && $RT_VERSION == 1.* ]]; then
    die "runtime '$spec': config version 3 needs containerd 2.x"
  fi
  RT_SPEC=containerd/${RT_VERSION%%~*}/v$RT_CONFIG
  if ((RT_DISCARD)); then RT_SPEC+=/discard; fi
}

# containerd_config DIR SNAPSHOTTER SANDBOX_IMAGE [OPTION...]: the one
# containerd config of the test nodes, rooted at DIR (socket
# DIR/containerd.sock, registries by DIR/certs.d/*/hosts.toml, no node-level
# credentials: pulls from the auth registry must carry them in the CRI
# request). Options:
#   v3          config version 3 (containerd 2.x): the CRI plugin split into
#               io.containerd.cri.v1.images/.runtime, the stream server left
#               in io.containerd.grpc.v1.cri; CRI pulls go through the
#               Transfer Service (unless discard), so max_concurrent_downloads
#               goes to io.containerd.transfer.v1.local (in the CRI section,
#               any value but the default 3 would turn the Transfer Service off)
#   shim=PATH   the containerd-shim-runc-v2 to run (default: PATH lookup,
#               Debian's); a built containerd must use its own
#   discard     discard_unpacked_layers = true
#   real        the kubelet node: containers run with runc on cgroupfs, pod
#               network namespaces stay under the state dir, the Debian CNI
#               plugins, and restrict_oom_score_adj (root here may not lower
#               oom_score_adj; runc failed every pod sandbox without it)
# The keys and their v3 homes were checked against containerd 2.2's
# internal/cri/config/config.go and plugins/cri/*/plugin.go.
containerd_config() {
  local d=$1 snapshotter=$2 sandbox=$3 opt v3=0 shim="" discard=0 real=0
  shift 3
  for opt in "$@"; do
    case $opt in
      v3) v3=1 ;;
      shim=*) shim=${opt#shim=} ;;
      discard) discard=1 ;;
      real) real=1 ;;
      *) die "containerd_config: unknown option $opt" ;;
    esac
  done
  local cni_bin=$d/cni/bin cri=io.containerd.grpc.v1.cri
  if ((real)); then cni_bin=/usr/lib/cni; fi
  # erofs, blockfile and NRI exist from 2.0 on (NRI is on by default there
  # and would listen on the fixed /var/run/nri/nri.sock); 1.x ignores the
  # names it does not know.
  cat <<EOF
# Generated by tests/cluster/lib.sh (containerd_config)
version = $((v3 ? 3 : 2))
root = "$d/root"
state = "$d/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.differ.v1.erofs",
  "io.containerd.mount-handler.v1.erofs",
  "io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "$d/containerd.sock"

[ttrpc]
  address = "$d/containerd.sock.ttrpc"

[debug]
  address = "$d/debug.sock"
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$d/opt"
EOF
  if ((!v3)); then
    cat <<EOF

  [plugins."$cri"]
    sandbox_image = "$sandbox"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    disable_apparmor = true
    enable_selinux = false
    max_concurrent_downloads = 3
EOF
    if ((real)); then
      cat <<EOF
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
EOF
    fi
    cat <<EOF

    [plugins."$cri".containerd]
      snapshotter = "$snapshotter"
      default_runtime_name = "runc"
EOF
    if ((discard)); then echo "      discard_unpacked_layers = true"; fi
    cat <<EOF
      [plugins."$cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
EOF
    if [[ -n $shim ]]; then echo "        runtime_path = \"$shim\""; fi
    if ((real)); then
      cat <<EOF
        [plugins."$cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
EOF
    fi
    cat <<EOF

    [plugins."$cri".cni]
      bin_dir = "$cni_bin"
      conf_dir = "$d/cni/net.d"

    [plugins."$cri".registry]
      config_path = "$d/certs.d"
EOF
    return 0
  fi
  local images=io.containerd.cri.v1.images runtime=io.containerd.cri.v1.runtime
  cat <<EOF

  [plugins."$images"]
    snapshotter = "$snapshotter"
EOF
  if ((discard)); then echo "    discard_unpacked_layers = true"; fi
  cat <<EOF

    [plugins."$images".pinned_images]
      sandbox = "$sandbox"

    [plugins."$images".registry]
      config_path = "$d/certs.d"

  [plugins."$runtime"]
    disable_apparmor = true
    enable_selinux = false
EOF
  if ((real)); then
    cat <<EOF
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
EOF
  fi
  cat <<EOF

    [plugins."$runtime".containerd]
      default_runtime_name = "runc"
      [plugins."$runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
EOF
  if [[ -n $shim ]]; then echo "        runtime_path = \"$shim\""; fi
  if ((real)); then
    cat <<EOF
        [plugins."$runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
EOF
  fi
  cat <<EOF

    [plugins."$runtime".cni]
      bin_dirs = ["$cni_bin"]
      conf_dir = "$d/cni/net.d"

  [plugins."$cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins."io.containerd.transfer.v1.local"]
    max_concurrent_downloads = 3
    config_path = "$d/certs.d"
EOF
  # A real node's image verifiers (2.x; every pull, kubelet's too, runs
  # what is in bin_dir: nothing until a daemon started with
  # --pull-verifier-dir $d/image-verifier installs nodeimage's).
  if ((real)); then
    cat <<EOF

  [plugins."io.containerd.image-verifier.v1.bindir"]
    bin_dir = "$d/image-verifier/bin"
EOF
  fi
}

# runtime_config DIR SNAPSHOTTER SANDBOX_IMAGE [real]: containerd_config for
# the runtime resolve_runtime last resolved (RT_*).
runtime_config() {
  local opts=()
  if ((RT_CONFIG == 3)); then opts+=(v3); fi
  if [[ $RT_LINE != debian ]]; then opts+=("shim=$RT_DIR/containerd-shim-runc-v2"); fi
  if ((RT_DISCARD)); then opts+=(discard); fi
  containerd_config "$@" "${opts[@]}"
}

# registry_hosts REGISTRY: the hosts.toml that lets containerd use a test
# registry (plain HTTP on loopback).
registry_hosts() {
  cat <<EOF
# Generated by tests/cluster/lib.sh (registry_hosts)
server = "http://$1"

[host."http://$1"]
  capabilities = ["pull", "resolve", "push"]
  skip_verify = true
EOF
}

# push_oci (the one image pusher) comes from images/oci.sh.
# shellcheck source=images/oci.sh
. "$REPO_ROOT/images/oci.sh"

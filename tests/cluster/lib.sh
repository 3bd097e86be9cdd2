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
    if [[ "$(recorded_cmd "$name")" == "$want" ]]; then
      log "reusing $name (pid $(recorded_pid "$name"))"
      return 0
    fi
    log "$name runs with a different command line; restarting it"
    stop_daemon "$name"
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
  # output through a pipe is not kept waiting by the daemon.
  nohup "$@" </dev/null >>"$LOGS/$name.log" 2>&1 3>&- &
  pid=$!
  echo "$pid" >"$PIDS/$name.pid"
  printf '%s' "$want" >"$PIDS/$name.cmd"
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

# sha256 of the given strings/files, for build stamps.
hash_of() { sha256sum "$@" | sha256sum | cut -d' ' -f1; }

# containerd_config DIR SNAPSHOTTER SANDBOX_IMAGE [real]: the one containerd
# config of the test nodes, rooted at DIR (socket DIR/containerd.sock,
# registries by DIR/certs.d/*/hosts.toml, no node-level credentials: pulls
# from the auth registry must carry them in the CRI request). With `real`
# (the kubelet node): containers run with runc on cgroupfs, pod network
# namespaces stay under the state dir, the Debian CNI plugins, and
# restrict_oom_score_adj (root here may not lower oom_score_adj; runc
# failed every pod sandbox without it).
containerd_config() {
  local d=$1 snapshotter=$2 sandbox=$3 real=${4:-} cni_bin extra_cri="" runc_options=""
  cni_bin=$d/cni/bin
  if [[ $real == real ]]; then
    cni_bin=/usr/lib/cni
    extra_cri=$'\n    netns_mounts_under_state_dir = true\n    restrict_oom_score_adj = true'
    runc_options=$'\n        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n          SystemdCgroup = false'
  fi
  cat <<EOF
# Generated by tests/cluster/lib.sh (containerd_config)
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
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

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$sandbox"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    disable_apparmor = true
    enable_selinux = false
    max_concurrent_downloads = 3$extra_cri

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "$snapshotter"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"$runc_options

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$cni_bin"
      conf_dir = "$d/cni/net.d"

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$d/certs.d"
EOF
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

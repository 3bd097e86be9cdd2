#!/usr/bin/env bash
# The pull benchmarks (docs/benchmarks.md, "The 50 MB pull on each containerd
# runtime" and "Status latency"):
#
#   1. resident memory of the node daemons (idle) and of the controller with
#      the cluster's N nodes;
#   2. the 50 MB image (big:v1): a pull driven through NodeImage (merge patch
#      of the spec until a watch on the NodeImage delivers the status
#      Succeeded) against a bare CRI PullImage (ni-cri) of the same image,
#      each on a fresh containerd with its own root, alternating, ROUNDS
#      times. (Until 2026-11-25 the NodeImage side polled with a GET and jq
#      every 50 ms, which added half a poll on average and took CPU from
#      the pull on this 2-core machine; the watch is how a controller sees
#      the status.)
#   3. the time from the end of the CRI pull (containerd's log line
#      "PullImage … returns image reference") to the watch delivering
#      Succeeded;
#   4. daemon resident memory while it pulls two 50 MB images at once
#      (big:v1 and big2:v1, a second image with other random content that
#      this script builds and pushes once), MEM_ROUNDS times.
#
# 2.-4. are measured on each containerd runtime of BENCH_RUNTIMES: a round's
# fresh containerds run that runtime's version with its config, so each
# runtime's NodeImage / bare CRI ratio is taken against its own baseline,
# round by round. Within a round the runtimes take turns, so a burst of load
# from elsewhere falls on all of them rather than on one.
#
#   NODEIMAGE_STATE=/work/bench-state tests/bench/pull.sh
#   NODEIMAGE_STATE=/work/bench-state BENCH_RUNTIMES=containerd/2.x/v3 tests/bench/pull.sh
#
# Needs: the local cluster of NODEIMAGE_STATE (its up.sh built the containerd
# lines; a line not built yet is built here), release binaries
# (cargo build --release -p nodeimage-controller -p nodeimage-daemon -p nodeimage-tests).
# Settings: ROUNDS (5), MEM_ROUNDS (3), IDLE_SECONDS (30),
# BENCH_RUNTIMES (the runtimes to measure, space-separated, in the format of
# tests/cluster/lib.sh: containerd/VERSION[/v2|/v3][/discard]; default
# "containerd/debian/v2 containerd/1.7/v2/discard containerd/2.2/v3 containerd/2.x/v3",
# the cluster's nodes and the real node),
# BENCH_PORT_BASE (28000: controller health on +80, daemons on +100+i).
# Results: $NODEIMAGE_STATE/bench/results/pull-<time>.txt (also on stdout).
set -Eeuo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-5}
MEM_ROUNDS=${MEM_ROUNDS:-3}
IDLE_SECONDS=${IDLE_SECONDS:-30}
PORT_BASE=${BENCH_PORT_BASE:-28000}
CTRL_HEALTH=127.0.0.1:$((PORT_BASE + 80))
REG=$NODEIMAGE_REGISTRY
BIG_REPO=$REG/big
BIG2_REPO=$REG/big2
FRESH=$STATE/bench/nodes
BENCH_RUNTIMES=${BENCH_RUNTIMES:-containerd/debian/v2 containerd/1.7/v2/discard containerd/2.2/v3 containerd/2.x/v3}
RESULTS_FILE=$RESULTS/pull-$(date -u +%Y%m%dT%H%M%SZ).txt
WORK=$RESULTS/pull-work
mkdir -p "$FRESH" "$WORK"
# Stops the background watch (curl) of a round if one is still running.
stop_watch() {
  local f=$WORK/watch.pid
  [[ -s $f ]] && kill "$(cat "$f")" 2>/dev/null
  rm -f "$f"
}
trap 'stop_watch; bench_cleanup; cleanup_fresh' EXIT

for b in nodeimage-controller nodeimage-daemon ni-cri; do
  [[ -x $BIN/$b ]] || die "$BIN/$b missing: cargo build --release -p nodeimage-controller -p nodeimage-daemon -p nodeimage-tests"
done

# The runtimes to measure, resolved by the cluster's resolve_runtime and
# built (a no-op when up.sh built them) by its build_containerd. Both find
# the containerd builds under $BIN, which for the cluster scripts is
# $STATE/bin but here names the release binaries: they get $STATE/bin for
# the call.
RT_SPECS=() RT_LINES=() RT_DIRS=() RT_VERSIONS=() RT_CONFIGS=() RT_DISCARDS=()
read -r -a _runtimes <<<"$BENCH_RUNTIMES"
((${#_runtimes[@]})) || die "BENCH_RUNTIMES is empty"
for _spec in "${_runtimes[@]}"; do
  BIN=$STATE/bin resolve_runtime "$_spec"
  if [[ $RT_LINE != debian ]]; then BIN=$STATE/bin build_containerd "$RT_LINE"; fi
  RT_SPECS+=("$RT_SPEC") RT_LINES+=("$RT_LINE") RT_DIRS+=("$RT_DIR")
  RT_VERSIONS+=("$RT_VERSION") RT_CONFIGS+=("$RT_CONFIG") RT_DISCARDS+=("$RT_DISCARD")
done
# use_runtime K: the RT_* of the K-th runtime, for runtime_config.
use_runtime() {
  RT_SPEC=${RT_SPECS[$1]} RT_LINE=${RT_LINES[$1]} RT_DIR=${RT_DIRS[$1]}
  RT_VERSION=${RT_VERSIONS[$1]} RT_CONFIG=${RT_CONFIGS[$1]} RT_DISCARD=${RT_DISCARDS[$1]}
}

{
  echo "# tests/bench/pull.sh $(date -u +%FT%TZ) on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "# binaries: $BIN ($(code_version)), cluster $STATE"
  echo "# runtimes: ${RT_SPECS[*]} (ROUNDS=$ROUNDS MEM_ROUNDS=$MEM_ROUNDS)"
} | tee "$RESULTS_FILE"

install_crds

# ---------------------------------------------------------------------------
# Fresh nodes: a containerd with its own root (the nodes' config, other dirs)
# ---------------------------------------------------------------------------
# fresh_containerd NAME K: the K-th runtime of BENCH_RUNTIMES, configured as
# the cluster configures a node of that runtime (lib.sh's runtime_config).
FRESH_NAMES=()
fresh_containerd() {
  local name=$1 k=$2 d=$FRESH/$1 reg version
  rm -rf "$d"
  mkdir -p "$d/root" "$d/state" "$d/opt" "$d/cni/bin" "$d/cni/net.d"
  for reg in "$NODEIMAGE_REGISTRY" "$NODEIMAGE_AUTH_REGISTRY"; do
    mkdir -p "$d/certs.d/$reg"
    registry_hosts "$reg" >"$d/certs.d/$reg/hosts.toml"
  done
  rm -f "$LOGS/ctrd-$name.log" # start_daemon appends: keep only this run's lines
  use_runtime "$k"
  runtime_config "$d" "$NODEIMAGE_SNAPSHOTTER" "$NODEIMAGE_REGISTRY/pause:3.6" >"$d/config.toml"
  bench_start "ctrd-$name" "${RT_DIRS[k]}/containerd" --config "$d/config.toml"
  FRESH_NAMES+=("$name")
  wait_until 30 "containerd of $name" "ctrd-$name" "$NI_CRI_BIN" --socket "$d/containerd.sock" --timeout 5 version
  read -r _ version _ <<<"$("$NI_CRI_BIN" --socket "$d/containerd.sock" --timeout 10 version)"
  [[ $version == "${RT_VERSIONS[k]}" ]] || die "$name: CRI reports containerd $version, expected ${RT_VERSIONS[k]} (${RT_SPECS[k]})"
}
# Stops a fresh node's daemon and containerd, deletes its Node and files.
drop_fresh() {
  local name=$1 d=$FRESH/$1 m
  stop_daemon "daemon-$name" 2>/dev/null || true
  stop_daemon "ctrd-$name" 2>/dev/null || true
  kc delete node "$name" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  awk -v s="$d/" 'index($2, s) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do umount -l "$m" || true; done
  rm -rf "$d"
}
cleanup_fresh() {
  local n
  for n in "${FRESH_NAMES[@]}"; do drop_fresh "$n"; done
  FRESH_NAMES=()
}
# A Node object (no kubelet: Ready by patch) whose NodeImage the controller creates.
fresh_node_object() {
  local name=$1
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  labels: {kubernetes.io/hostname: $name, nodeimage.dev/bench: pull}
EOF
  kc patch node "$name" --subresource=status --type=merge \
    -p '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"bench"}]}}' >/dev/null
  wait_until 30 "NodeImage $name" - kc get nodeimage "$name"
}
# Daemon for a node, health on port $2, JSON logs (timestamps to parse).
start_node_daemon() {
  local name=$1 port=$2 sock=$3
  rm -f "$LOGS/daemon-$name.log"
  bench_start "daemon-$name" "$BIN/nodeimage-daemon" --node-name "$name" --kubeconfig "$KUBECONFIG" \
    --containerd-socket "$sock" --health-addr "127.0.0.1:$port" --log-format json
  wait_until 60 "daemon $name ready" "daemon-$name" curl -fsS "http://127.0.0.1:$port/readyz"
}

# Epoch seconds of a containerd log line's time="…".
ctrd_time() { date -d "$(sed -n 's/^time="\([^"]*\)".*/\1/p' <<<"$1")" +%s.%N; }

# ---------------------------------------------------------------------------
# 1. Idle memory: controller and one daemon per cluster node
# ---------------------------------------------------------------------------
bench_start bench-controller "$BIN/nodeimage-controller" --kubeconfig "$KUBECONFIG" \
  --health-addr "$CTRL_HEALTH" --log-format json
wait_until 60 "controller ready" bench-controller curl -fsS "http://$CTRL_HEALTH/readyz"
i=0
for node in $NODEIMAGE_NODES; do
  i=$((i + 1))
  sock_var=NODEIMAGE_CONTAINERD_$i
  start_node_daemon "$node" $((PORT_BASE + 100 + i)) "${!sock_var}"
done
log "idle for $IDLE_SECONDS s"
sleep "$IDLE_SECONDS"
i=0
for node in $NODEIMAGE_NODES; do
  i=$((i + 1))
  pid=$(bench_pid "daemon-$node")
  rt=$(tr ' ' '\n' <<<"${NODEIMAGE_NODE_RUNTIMES:-}" | sed -n "s#^$node=##p")
  record "daemon.idle.rss_mib[$node ${rt:-?}]" "$(mib "$(metric "http://127.0.0.1:$((PORT_BASE + 100 + i))/metrics" process_resident_memory_bytes)") (VmHWM $(vmhwm_mib "$pid"))"
done
pid=$(bench_pid bench-controller)
record "controller.rss_mib[${NODEIMAGE_NODE_COUNT}nodes]" "$(mib "$(metric "http://$CTRL_HEALTH/metrics" process_resident_memory_bytes)") (VmHWM $(vmhwm_mib "$pid"))"
for node in $NODEIMAGE_NODES; do stop_daemon "daemon-$node"; done

# ---------------------------------------------------------------------------
# 2./3. big:v1 via CRI vs via NodeImage, fresh containerd each, per runtime
# ---------------------------------------------------------------------------
# Rounds write to $WORK/<what>-<k>, k the runtime's index in BENCH_RUNTIMES,
# and name the runtime in the results file.
cri_round() {
  local r=$1 k=$2 name=bcri-$2-$1 t0 t1 start_line end_line
  fresh_containerd "$name" "$k"
  t0=$(now)
  "$NI_CRI_BIN" --socket "$FRESH/$name/containerd.sock" --timeout 300 pull "$BIG_REPO:v1" >/dev/null
  t1=$(now)
  start_line=$(grep -m1 "PullImage \\\\\"$BIG_REPO:v1\\\\\"\"" "$LOGS/ctrd-$name.log" || true)
  end_line=$(grep -m1 "PullImage \\\\\"$BIG_REPO:v1\\\\\" returns" "$LOGS/ctrd-$name.log")
  echo "$(elapsed "$t0" "$t1") $(elapsed "$(ctrd_time "$start_line")" "$(ctrd_time "$end_line")")" >>"$WORK/cri-$k"
  record "round$r.cri.seconds[${RT_SPECS[k]}]" "$(elapsed "$t0" "$t1") (containerd PullImage: $(elapsed "$(ctrd_time "$start_line")" "$(ctrd_time "$end_line")"))"
  drop_fresh "$name"
}

tag_phase() {
  # Phase of REPO:TAG in the NodeImage JSON on stdin.
  jq -r --arg i "$1" --arg t "$2" '.status.imageStatuses[$i].tags[]? | select(.tag == $t) | .phase' 2>/dev/null || true
}

ni_round() {
  local r=$1 k=$2 name=bni-$2-$1 port=$((PORT_BASE + 200 + $2)) t0 t1 tw td watch_pid
  fresh_containerd "$name" "$k"
  fresh_node_object "$name"
  start_node_daemon "$name" "$port" "$FRESH/$name/containerd.sock"
  sleep 2
  # Watch with arrival timestamps (EPOCHREALTIME) of each event; the reader
  # marks the arrival of a Succeeded status in a file (a pattern match in
  # bash, no process per event). curl's own pid goes to a file so that it
  # can be stopped; the reader then sees EOF and ends.
  local done_file=$WORK/succeeded-$name fifo=$WORK/succeeded-$name.fifo fd
  rm -f "$done_file" "$fifo"
  # The reader also writes the arrival to a FIFO that this shell holds open
  # read-write (so neither side blocks on open), and this shell waits on it
  # with bash's own read: no process is started while the pull runs, as the
  # bare CRI round starts none. (Until 2026-11-27 this shell polled for the
  # file every 50 ms, starting date, awk, cut and sleep on each turn.)
  mkfifo "$fifo"
  exec {fd}<>"$fifo"
  {
    curl -sSN --max-time 900 --cacert "$CA" -H "Authorization: Bearer $ADMIN_TOKEN" \
      "$API/apis/apps.kruise.io/v1alpha1/nodeimages?watch=1&fieldSelector=metadata.name%3D$name" &
    echo $! >"$WORK/watch.pid"
    wait
  } | while IFS= read -r l; do
    ts=$EPOCHREALTIME
    echo "$ts $l"
    if [[ $l == *'"phase":"Succeeded"'* && ! -e $done_file ]]; then
      echo "$ts" >"$done_file"
      echo "$ts" >"$fifo"
    fi
  done >"$WORK/watch-$name" &
  watch_pid=$!
  sleep 1
  local patch
  patch=$(jq -cn --arg i "$BIG_REPO" '{spec: {images: {($i): {tags: [{tag: "v1", pullPolicy: {ttlSecondsAfterFinished: 300}}]}}}}')
  t0=$(now)
  api_curl -o /dev/null -X PATCH -H 'Content-Type: application/merge-patch+json' --data "$patch" \
    "/apis/apps.kruise.io/v1alpha1/nodeimages/$name"
  read -r -t 300 -u "$fd" t1 || die "NodeImage pull on $name did not succeed in 300 s"
  exec {fd}<&-
  rm -f "$fifo"
  local obj st ct
  obj=$(api_curl "/apis/apps.kruise.io/v1alpha1/nodeimages/$name")
  [[ $(tag_phase "$BIG_REPO" v1 <<<"$obj") == Succeeded ]] || die "the watch saw Succeeded on $name but a GET does not"
  st=$(jq -r --arg i "$BIG_REPO" '.status.imageStatuses[$i].tags[0].startTime' <<<"$obj")
  ct=$(jq -r --arg i "$BIG_REPO" '.status.imageStatuses[$i].tags[0].completionTime' <<<"$obj")
  sleep 1
  stop_watch
  wait "$watch_pid" 2>/dev/null || true
  # Arrival of the first watch event whose status says Succeeded.
  tw=$(while read -r ts json; do
    if [[ $(jq -c '.object' <<<"$json" | tag_phase "$BIG_REPO" v1) == Succeeded ]]; then
      echo "$ts"
      break
    fi
  done <"$WORK/watch-$name")
  td=$(jq -rR 'fromjson? | select(.message == "pull succeeded") | .timestamp' "$LOGS/daemon-$name.log" | tail -n1)
  td=$(date -d "$td" +%s.%N)
  local start_line end_line cs ce
  start_line=$(grep -m1 "PullImage \\\\\"$BIG_REPO:v1\\\\\"\"" "$LOGS/ctrd-$name.log")
  end_line=$(grep -m1 "PullImage \\\\\"$BIG_REPO:v1\\\\\" returns" "$LOGS/ctrd-$name.log")
  cs=$(ctrd_time "$start_line")
  ce=$(ctrd_time "$end_line")
  local total
  total=$(elapsed "$t0" "$t1")
  echo "$total $(elapsed "$cs" "$ce") $(elapsed "$t0" "$cs") $(elapsed "$ce" "$tw") $(elapsed "$ce" "$td") $(elapsed "$td" "$tw")" >>"$WORK/ni-$k"
  record "round$r.nodeimage.seconds[${RT_SPECS[k]}]" "$total (patch->containerd PullImage start $(elapsed "$t0" "$cs"), containerd PullImage $(elapsed "$cs" "$ce"), CRI end->watch Succeeded $(elapsed "$ce" "$tw"), CRI end->daemon log $(elapsed "$ce" "$td"), daemon log->watch $(elapsed "$td" "$tw"); status startTime $st completionTime $ct)"
  drop_fresh "$name"
}

for k in "${!RT_SPECS[@]}"; do : >"$WORK/cri-$k" && : >"$WORK/ni-$k" && : >"$WORK/ratio-$k"; done
for ((r = 1; r <= ROUNDS; r++)); do
  for k in "${!RT_SPECS[@]}"; do
    if ((r % 2)); then
      cri_round "$r" "$k"
      ni_round "$r" "$k"
    else
      ni_round "$r" "$k"
      cri_round "$r" "$k"
    fi
    paste -d' ' <(sed -n "${r}p" "$WORK/ni-$k" | cut -d' ' -f1) <(sed -n "${r}p" "$WORK/cri-$k" | cut -d' ' -f1) |
      awk '{ printf "%.2f\n", $1 / $2 }' >>"$WORK/ratio-$k"
  done
done

# ---------------------------------------------------------------------------
# 4. Daemon memory while pulling two 50 MB images at once
# ---------------------------------------------------------------------------
ensure_big2() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/big2/manifests/v1")
  [[ $code == 200 ]] && return 0
  log "building big2:v1 (50 MB of other random data) and pushing it to $REG"
  local lay=$STATE/bench/images b=$STATE/bench/tmp-big2
  rm -rf "$b"
  [[ -f $lay/index.json ]] || umoci init --layout "$lay"
  umoci new --image "$lay:big2-v1"
  umoci unpack --image "$lay:big2-v1" "$b" >/dev/null
  dd if=/dev/urandom of="$b/rootfs/random2.bin" bs=1M count=50 status=none
  umoci repack --refresh-bundle --image "$lay:big2-v1" "$b"
  rm -rf "$b"
  skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci:$lay:big2-v1" "docker://$BIG2_REPO:v1"
}
ensure_big2

mem_round() {
  local r=$1 k=$2 name=bmem-$2-$1 port=$((PORT_BASE + 300 + $2)) pid idle max=0 rss patch json a b
  fresh_containerd "$name" "$k"
  fresh_node_object "$name"
  start_node_daemon "$name" "$port" "$FRESH/$name/containerd.sock"
  pid=$(bench_pid "daemon-$name")
  sleep 10
  idle=$(vmrss_mib "$pid")
  patch=$(jq -cn --arg a "$BIG_REPO" --arg b "$BIG2_REPO" '{spec: {images: {($a): {tags: [{tag: "v1"}]}, ($b): {tags: [{tag: "v1"}]}}}}')
  kc patch nodeimage "$name" --type=merge -p "$patch" >/dev/null
  local t0
  t0=$(now)
  while :; do
    rss=$(vmrss_mib "$pid")
    max=$(awk -v a="$max" -v b="$rss" 'BEGIN { print ((b > a) ? b : a) }')
    json=$(api_curl "/apis/apps.kruise.io/v1alpha1/nodeimages/$name")
    a=$(tag_phase "$BIG_REPO" v1 <<<"$json")
    b=$(tag_phase "$BIG2_REPO" v1 <<<"$json")
    [[ $a == Succeeded && $b == Succeeded ]] && break
    if (($(elapsed "$t0" "$(now)" | cut -d. -f1) > 300)); then die "two-image pull on $name did not finish in 300 s"; fi
    sleep 0.1
  done
  echo "$idle $max $(vmhwm_mib "$pid")" >>"$WORK/mem-$k"
  record "round$r.daemon.rss_mib[${RT_SPECS[k]}]" "idle $idle, max sampled while pulling 2 images $max, VmHWM $(vmhwm_mib "$pid") (pulls took $(elapsed "$t0" "$(now)") s)"
  drop_fresh "$name"
}
for k in "${!RT_SPECS[@]}"; do : >"$WORK/mem-$k"; done
for ((r = 1; r <= MEM_ROUNDS; r++)); do
  for k in "${!RT_SPECS[@]}"; do mem_round "$r" "$k"; done
done
pid=$(bench_pid bench-controller)
record "controller.rss_mib.end" "$(vmrss_mib "$pid") (VmHWM $(vmhwm_mib "$pid"))"

# ---------------------------------------------------------------------------
# Summary: median (min–max, n), per runtime, then one line per runtime
# ---------------------------------------------------------------------------
# median FILE COLUMN: the median of a column, 3 decimals.
median() { cut -d' ' -f"$2" "$1" | summary | cut -d' ' -f1; }
{
  for k in "${!RT_SPECS[@]}"; do
    echo "## summary for ${RT_SPECS[k]} (median (min–max, n))"
    echo "cri.seconds (ni-cri wall)              $(cut -d' ' -f1 "$WORK/cri-$k" | summary)"
    echo "cri.containerd_pullimage.seconds       $(cut -d' ' -f2 "$WORK/cri-$k" | summary)"
    echo "nodeimage.seconds (patch->watch Succeeded) $(cut -d' ' -f1 "$WORK/ni-$k" | summary)"
    echo "nodeimage.containerd_pullimage.seconds $(cut -d' ' -f2 "$WORK/ni-$k" | summary)"
    echo "nodeimage.patch_to_pull_start.seconds  $(cut -d' ' -f3 "$WORK/ni-$k" | summary)"
    echo "cri_end_to_watch_succeeded.seconds     $(cut -d' ' -f4 "$WORK/ni-$k" | summary)"
    echo "cri_end_to_daemon_log.seconds          $(cut -d' ' -f5 "$WORK/ni-$k" | summary)"
    echo "daemon_log_to_watch_succeeded.seconds  $(cut -d' ' -f6 "$WORK/ni-$k" | summary)"
    echo "ratio nodeimage/cri (per round)        $(summary <"$WORK/ratio-$k")"
    echo "daemon.idle.rss_mib                    $(cut -d' ' -f1 "$WORK/mem-$k" | summary)"
    echo "daemon.two_pulls.max_rss_mib           $(cut -d' ' -f2 "$WORK/mem-$k" | summary)"
    echo "daemon.two_pulls.vmhwm_mib             $(cut -d' ' -f3 "$WORK/mem-$k" | summary)"
  done
  echo "## per runtime (medians): runtime, bare CRI s, NodeImage s, ratio (median of rounds), daemon idle RSS MiB, daemon VmHWM pulling two images MiB"
  for k in "${!RT_SPECS[@]}"; do
    printf '%-32s %s %s %s %s %s\n' "${RT_SPECS[k]}" "$(median "$WORK/cri-$k" 1)" "$(median "$WORK/ni-$k" 1)" \
      "$(median "$WORK/ratio-$k" 1)" "$(median "$WORK/mem-$k" 1)" "$(median "$WORK/mem-$k" 3)"
  done
  echo "# load at end: $(load_avg)"
} | tee -a "$RESULTS_FILE"

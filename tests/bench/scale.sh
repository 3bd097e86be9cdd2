#!/usr/bin/env bash
# Scale benchmarks on the local API server with simulated nodes
# (docs/benchmarks.md, issues 4 and 5):
#
#   imagepulljob     JOBS ImagePullJobs (one image each) over all NODES
#                    simulated nodes, parallelism PARALLELISM: time from
#                    creation to all completed, controller CPU seconds and
#                    peak RSS, API requests of the controller and of the
#                    simulator, reconciles per second once all is complete;
#   imageprepulljob  one ImagePrePullJob over all NODES with 2 images and
#                    concurrency PREPULL_CONCURRENCY: time to finish, status
#                    object size, controller CPU seconds and peak RSS;
#   predownload      a Deployment of NODES replicas, one Pod on each
#                    simulated node, annotated for pre-download with
#                    parallelism PARALLELISM and paused: `kubectl set image`
#                    to its job Complete on every node, against the
#                    ImagePullJob a user would write by hand (same
#                    podSelector and parallelism), ROUNDS rounds of both,
#                    alternating (see the scenario's own comment below).
#   imageremovaljob  one ImageRemovalJob over all NODES simulated nodes
#                    (one image by digest, parallelism PARALLELISM): time
#                    to complete, controller CPU, NodeImage writes per
#                    node while it runs (spec: the controller's entry;
#                    status: the simulated daemon's answer) and at its
#                    deletion (the entry taken back);
#   landing          where a rollout's new Pods land (issue 49): a
#                    Deployment of LANDING_REPLICAS (100) Pods bound one per
#                    node to the first simulated nodes, annotated for
#                    pre-download and paused; `kubectl set image`, its job
#                    Complete, the rollout resumed (maxSurge 100%) and its new
#                    Pods bound one per node onto nodes holding no Pod of it
#                    (as a surge lands on empty nodes): the share of new Pods
#                    whose node reported the new image Succeeded when it was
#                    bound. Once per --predownload-max-extra-nodes value of
#                    LANDING_EXTRA ("0 100 1000"; 0 is the rule before issue
#                    49: the nodes of its Pods only), in one session.
#
#   p2p              issue 52: one large image onto all NODES through a
#                    modelled network (ni-sim --bandwidth-model P2P_MODEL;
#                    nodes in ZONES zones, made so on creation): plain
#                    parallelism (every node at once) against
#                    seed-then-fan-out (nodeimage.dev/p2p-seeds P2P_SEEDS):
#                    time to Complete and the registry's modelled bytes, in
#                    images, ROUNDS rounds alternating.
#
#   NODEIMAGE_STATE=/work/bench-state NODES=1000 tests/bench/scale.sh [imagepulljob] [imageprepulljob] [imageremovaljob] [predownload] [landing] [p2p]
#   NODEIMAGE_STATE=/work/bench-state tests/bench/scale.sh reset   # after an aborted run
#
# The simulated Nodes (nodeimage.dev/sim=true) are created by `ni-sim
# create-nodes`; the controller's node mirror creates their NodeImages;
# `ni-sim run` plays their daemons (Pulling, then Succeeded, through the
# daemon's own status patch; as the daemon, a pull shorter than the 1 s
# start hold is written once, Succeeded). The controller runs as ServiceAccount
# bench/nodeimage-controller and the simulator as bench/ni-sim: FlowSchemas
# routed to the exempt priority level (no throttling) make the API server
# count each one's requests (apiserver_flowcontrol_dispatched_requests_total
# by flow_schema). Each scenario starts a fresh controller once the nodes
# exist, so its CPU time and VmHWM cover that scenario only (startup with
# NODES NodeImages included). After a scenario the jobs are deleted and the
# script waits until the NodeImages hold no tags again.
#
# Side by side: the same scenarios against another controller (for example
# OpenKruise's kruise-manager built from its source), named by
#   CONTROLLER_BIN      the binary (default: nodeimage-controller)
#   CONTROLLER_ARGS     its flags; {kubeconfig} and {health} are replaced by
#                       the benchmark's kubeconfig and a loopback host:port
#   CONTROLLER_CRDS     a directory of its CRDs (default: crds/yaml)
#   CONTROLLER_METRICS  its Prometheus endpoint (default http://{health}/metrics;
#                       CPU and RSS are read from /proc either way)
#   CONTROLLER_READY    a command that succeeds once it is ready (default:
#                       curl its /readyz)
#   CONTROLLER_READY_TIMEOUT  seconds to wait for it (default 300)
#   CONTROLLER_RECONCILES_METRIC  its reconcile counter (default
#                       nodeimage_controller_reconciles_total; for
#                       controller-runtime: controller_runtime_reconcile_total)
# tests/bench/side-by-side.sh sets these for kruise-manager and alternates
# it with nodeimage's controller (docs/benchmarks.md).
#
# Settings: NODES (1000), JOBS (100), PARALLELISM (100), PREPULL_CONCURRENCY
# (100), ROUNDS (2: predownload's rounds), SIM_CONCURRENCY (64 nodes written
# at once), PULL_MS (0: simulated pull time; above 0 pulls overlap), REGISTRY_LIMIT (0: nodeimage's
# --registry-max-pulls; the simulator records the most nodes Pulling from
# each registry at once, `registry.peak_pulling_nodes`), SETTLE_SECONDS (60:
# window for the reconcile rate),
# TIMEOUT_SECONDS (7200), KEEP_NODES=1 to keep the simulated nodes at the end.
# Results: $NODEIMAGE_STATE/bench/results/scale-<time>.txt (also on stdout).
set -Eeuo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NODES=${NODES:-1000}
JOBS=${JOBS:-100}
PARALLELISM=${PARALLELISM:-100}
PREPULL_CONCURRENCY=${PREPULL_CONCURRENCY:-100}
SIM_CONCURRENCY=${SIM_CONCURRENCY:-64}
PULL_MS=${PULL_MS:-0}
REGISTRY_LIMIT=${REGISTRY_LIMIT:-0}
SETTLE_SECONDS=${SETTLE_SECONDS:-60}
ROUNDS=${ROUNDS:-2}
ZONES=${ZONES:-0}
P2P_MODEL=${P2P_MODEL:-}
P2P_SEEDS=${P2P_SEEDS:-1}
TIMEOUT_SECONDS=${TIMEOUT_SECONDS:-7200}
PROBE_LEASES=${PROBE_LEASES:-100}
PROBE_INTERVAL_MS=${PROBE_INTERVAL_MS:-10000}
PORT_BASE=${BENCH_PORT_BASE:-28000}
CTRL_HEALTH=127.0.0.1:$((PORT_BASE + 90))
NS=bench-scale
SIM_SEL=nodeimage.dev/sim=true
REG=$NODEIMAGE_REGISTRY
SCENARIOS=("$@")
((${#SCENARIOS[@]})) || SCENARIOS=(imagepulljob imageprepulljob)

# `scale.sh reset`: after an aborted run, delete the benchmark's jobs (their
# finalizers removed: no controller has to run) and the simulated Nodes and
# NodeImages, so the next run starts from nothing.
if [[ ${SCENARIOS[0]} == reset ]]; then
  for kind in imagepulljobs.apps.kruise.io imageprepulljobs.operations.kubeedge.io imageremovaljobs.nodeimage.dev; do
    for j in $(kc get "$kind" -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}'); do
      ns=${j%%/*}
      kc patch "$kind" "${j#*/}" ${ns:+-n "$ns"} --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null || true
    done
    kc delete "$kind" --all -A --wait=false >/dev/null
  done
  kc delete deployment predl -n "$NS" --ignore-not-found --wait=false >/dev/null
  kc delete pods -n "$NS" -l app=predl-bench --grace-period=0 --force >/dev/null 2>&1 || true
  "$BIN/ni-sim" --kubeconfig "$KUBECONFIG" delete-nodes --selector "$SIM_SEL"
  kc delete nodeimages -l "$SIM_SEL" --wait=false >/dev/null
  log "reset: jobs, the pre-download Deployment and its Pods, simulated Nodes and NodeImages deleted"
  exit 0
fi
RESULTS_FILE=$RESULTS/scale-$(date -u +%Y%m%dT%H%M%SZ)-$NODES.txt
trap bench_cleanup EXIT

CONTROLLER_BIN=${CONTROLLER_BIN:-$BIN/nodeimage-controller}
CONTROLLER_ARGS=${CONTROLLER_ARGS:-"--kubeconfig {kubeconfig} --health-addr {health} --log-format json --registry-max-pulls $REGISTRY_LIMIT"}
# Flags one scenario adds to the controller's (landing: the bound on extra nodes).
CONTROLLER_EXTRA_ARGS=""
CONTROLLER_CRDS=${CONTROLLER_CRDS:-$SRC/crds/yaml}
CONTROLLER_METRICS=${CONTROLLER_METRICS:-"http://{health}/metrics"}
CONTROLLER_READY=${CONTROLLER_READY:-"curl -fsS http://{health}/readyz"}
CONTROLLER_READY_TIMEOUT=${CONTROLLER_READY_TIMEOUT:-300}
CONTROLLER_RECONCILES_METRIC=${CONTROLLER_RECONCILES_METRIC:-nodeimage_controller_reconciles_total}
[[ -x $CONTROLLER_BIN ]] || die "$CONTROLLER_BIN missing: cargo build --release -p nodeimage-controller"
[[ -x $BIN/ni-sim ]] || die "$BIN/ni-sim missing: cargo build --release -p nodeimage-tests"
[[ -d $CONTROLLER_CRDS ]] || die "CONTROLLER_CRDS $CONTROLLER_CRDS is not a directory"

{
  echo "# tests/bench/scale.sh ${SCENARIOS[*]} $(date -u +%FT%TZ) on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "# NODES=$NODES JOBS=$JOBS PARALLELISM=$PARALLELISM PREPULL_CONCURRENCY=$PREPULL_CONCURRENCY SIM_CONCURRENCY=$SIM_CONCURRENCY PULL_MS=$PULL_MS REGISTRY_LIMIT=$REGISTRY_LIMIT"
  echo "# binaries: $BIN ($(code_version)), cluster $STATE"
  echo "# controller: $CONTROLLER_BIN $CONTROLLER_ARGS (CRDs $CONTROLLER_CRDS)"
  echo "# BENCH_APF=$BENCH_APF PROBE=${PROBE:-} PROBE_LEASES=$PROBE_LEASES PROBE_INTERVAL_MS=$PROBE_INTERVAL_MS"
} | tee "$RESULTS_FILE"

kc apply --server-side --force-conflicts -f "$CONTROLLER_CRDS" >/dev/null
kc wait --for=condition=Established --timeout=60s -f "$CONTROLLER_CRDS" >/dev/null
bench_identity nodeimage-controller 50
bench_identity ni-sim 60
bench_priority
kc get namespace "$NS" >/dev/null 2>&1 || kc create namespace "$NS" >/dev/null

CTRL_KUBECONFIG=$RESULTS/nodeimage-controller.kubeconfig
SIM_KUBECONFIG=$RESULTS/ni-sim.kubeconfig
SIM_STATS=$RESULTS/ni-sim.stats

# fill TEXT: TEXT with {kubeconfig} and {health} replaced.
fill() {
  local t=${1//\{kubeconfig\}/$CTRL_KUBECONFIG}
  printf '%s' "${t//\{health\}/$CTRL_HEALTH}"
}
start_controller() {
  local args
  # Always a fresh controller (one left by an interrupted run is stopped).
  # A process still answering on the health address after that (a
  # controller whose wrapper exited while it ran on, say) would run beside
  # the new one and void every figure of the scenario.
  stop_daemon scale-controller
  if curl -fsS -o /dev/null --max-time 2 "http://$CTRL_HEALTH/healthz" 2>/dev/null; then
    die "something already answers on $CTRL_HEALTH (a controller left running?); stop it first"
  fi
  read -r -a args <<<"$(fill "$CONTROLLER_ARGS $CONTROLLER_EXTRA_ARGS")"
  bench_start scale-controller "$CONTROLLER_BIN" "${args[@]}"
  wait_until "$CONTROLLER_READY_TIMEOUT" "controller ready" scale-controller bash -c "$(fill "$CONTROLLER_READY")"
}
ctrl_metric() {
  case $1 in
    process_cpu_seconds_total) proc_cpu "$(ctrl_pid)" ;;
    process_resident_memory_bytes) awk -v kb="$(vm_kb "$(ctrl_pid)" VmRSS)" 'BEGIN { printf "%d", kb * 1024 }' ;;
    nodeimage_controller_reconciles_total) metric "$(fill "$CONTROLLER_METRICS")" "$CONTROLLER_RECONCILES_METRIC" "${2:-}" || echo 0 ;;
    *) metric "$(fill "$CONTROLLER_METRICS")" "$@" ;;
  esac
}
ctrl_pid() { bench_pid scale-controller; }
# Number of simulated NodeImages, and how many tag entries they hold.
sim_nodeimages() { kc get nodeimages -l "$SIM_SEL" -o name | wc -l; }
sim_tags() {
  kc get nodeimages -l "$SIM_SEL" -o json |
    jq '[.items[] | (.spec.images // {}) | to_entries[] | .value.tags | length] | add // 0'
}

# ---------------------------------------------------------------------------
# Simulated nodes and their NodeImages
# ---------------------------------------------------------------------------
start_controller
have=$(sim_nodeimages)
if ((have != NODES)); then
  if ((have > NODES)); then
    log "removing $have simulated nodes (want $NODES)"
    "$BIN/ni-sim" --kubeconfig "$KUBECONFIG" delete-nodes --selector "$SIM_SEL" >/dev/null
    wait_until 600 "simulated NodeImages gone" - bash -c "[[ \$($KUBECTL get nodeimages -l $SIM_SEL -o name | wc -l) == 0 ]]"
  fi
  t0=$(now)
  out=$("$BIN/ni-sim" --kubeconfig "$KUBECONFIG" create-nodes --count "$NODES" --concurrency 32 --zones "$ZONES")
  t1=$(now)
  record "nodes.create.seconds[$NODES]" "$(elapsed "$t0" "$t1") ($out)"
  wait_until 1800 "$NODES simulated NodeImages" scale-controller bash -c "[[ \$($KUBECTL get nodeimages -l $SIM_SEL -o name | wc -l) -ge $NODES ]]"
  record "nodes.mirrored.seconds[$NODES]" "$(elapsed "$t0" "$(now)") (Node creation to all NodeImages created by the controller)"
fi
(($(sim_tags) == 0)) || die "the simulated NodeImages still hold tags: clean them first (delete the jobs in $NS and wait)"
bench_stop scale-controller

bench_start ni-sim "$BIN/ni-sim" --kubeconfig "$SIM_KUBECONFIG" run --selector "$SIM_SEL" \
  --concurrency "$SIM_CONCURRENCY" --pull-ms "$PULL_MS" --stats-file "$SIM_STATS" --stats-interval 1 \
  ${P2P_MODEL:+--bandwidth-model "$P2P_MODEL"}
sim_stat() { jq -r ".$1" "$SIM_STATS" 2>/dev/null || echo 0; }

# PATCHes of NodeImages (spec and status) by all clients: "total 409s 422s".
nodeimage_patches() {
  local text
  text=$(kc get --raw /metrics | { grep '^apiserver_request_total{.*resource="nodeimages".*verb="PATCH"' || true; })
  for code in '' 'code="409"' 'code="422"'; do
    v=$(prom_value apiserver_request_total "$code" <<<"$text")
    [[ $v == NA ]] && v=0
    printf '%d ' "${v%.*}"
  done
}

# Writes of NodeImages by all clients, whatever the verb (PATCH, PUT or
# server-side apply; all subresources and codes): one controller patches,
# another updates.
nodeimage_writes() {
  local v
  v=$(kc get --raw /metrics | { grep '^apiserver_request_total{.*resource="nodeimages".*verb="\(PATCH\|PUT\|APPLY\)"' || true; } |
    awk '{ s += $NF } END { printf "%d", s }')
  echo "${v:-0}"
}

# Status PATCHes of a job resource (all codes), as the API server counts them.
status_patches() {
  local v
  # (no such series yet is 0, not grep's failure)
  v=$(kc get --raw /metrics | { grep "^apiserver_request_total{.*resource=\"$1\".*subresource=\"status\".*verb=\"PATCH\"" || true; } |
    awk '{ s += $NF } END { printf "%d", s }')
  echo "${v:-0}"
}

# What etcd holds for NodeImages, read through etcd's JSON gateway on its
# client port: "N objects, B bytes (mean M per object); database D bytes,
# in use U" (the values under /registry/apps.kruise.io/nodeimages/: a
# custom resource is stored as its JSON, managedFields included).
etcd_nodeimages() {
  local key end port
  # kubelocal apiserver DIR API_PORT ETCD_PORT
  port=${NODEIMAGE_ETCD_PORT:-$(recorded_cmd apiserver | awk '{ print $NF }')}
  key=$(printf '/registry/apps.kruise.io/nodeimages/' | base64 -w0)
  end=$(printf '/registry/apps.kruise.io/nodeimages0' | base64 -w0)
  curl -fsS --max-time 120 -X POST "http://127.0.0.1:$port/v3/kv/range" \
    -d "{\"key\":\"$key\",\"range_end\":\"$end\"}" |
    jq -r '[.kvs[]? | .value | (length * 3 / 4) - (if endswith("==") then 2 elif endswith("=") then 1 else 0 end)] |
      "\(length) objects, \(add // 0) bytes (mean \(if length > 0 then (add / length | floor) else 0 end) per object)"' || echo "NA (etcd gateway)"
  curl -fsS --max-time 30 -X POST "http://127.0.0.1:$port/v3/maintenance/status" -d '{}' |
    jq -r '"; database \(.dbSize) bytes, in use \(.dbSizeInUse)"' || true
}
# Watch events the API server sent for NodeImages, all watchers: "events bytes".
nodeimage_watch_events() {
  kc get --raw /metrics | awk '
    $1 ~ /^apiserver_watch_events_total\{/ && $1 ~ /nodeimages/ { n += $NF }
    $1 ~ /^apiserver_watch_events_sizes_sum\{/ && $1 ~ /nodeimages/ { b += $NF }
    END { printf "%d %d", n, b }'
}

# Common measurement around one scenario: before/after counters.
measure_begin() {
  start_controller
  sleep 10
  M_CPU0=$(ctrl_metric process_cpu_seconds_total)
  M_RSS_IDLE=$(mib "$(ctrl_metric process_resident_memory_bytes)")
  M_CTRL0=$(identity_requests nodeimage-controller)
  M_CTRLOWN0=$(ctrl_metric nodeimage_api_requests_total 2>/dev/null || echo NA)
  M_SIM0=$(identity_requests ni-sim)
  M_SIMOWN0=$(sim_stat requests)
  M_ALL0=$(apiserver_metric apiserver_request_total)
  M_REC0=$(ctrl_metric nodeimage_controller_reconciles_total)
  M_PATCH0=$(nodeimage_patches)
  M_WRITES0=$(nodeimage_writes)
  M_APICPU0=$(proc_cpu "$(recorded_pid apiserver)")
  M_SIMCPU0=$(proc_cpu "$(bench_pid ni-sim)")
  M_MACHINE0=$(machine_cpu)
  M_WATCH0=$(nodeimage_watch_events)
  record "$1.etcd.nodeimages.before" "$(etcd_nodeimages | tr -d '\n')"
  record "$1.controller.idle_rss_mib[$NODES]" "$M_RSS_IDLE (fresh controller, $NODES NodeImages cached, before the jobs)"
  M_T0=$(now)
}
measure_end() {
  local s=$1 t1 cpu hwm ctrl sim simown all rec own
  t1=$(now)
  cpu=$(ctrl_metric process_cpu_seconds_total)
  hwm=$(vmhwm_mib "$(ctrl_pid)")
  ctrl=$(ident_diff "$M_CTRL0" "$(identity_requests nodeimage-controller)")
  sim=$(ident_diff "$M_SIM0" "$(identity_requests ni-sim)")
  simown=$(($(sim_stat requests) - M_SIMOWN0))
  all=$(apiserver_metric apiserver_request_total)
  rec=$(ctrl_metric nodeimage_controller_reconciles_total)
  local apicpu simcpu
  apicpu=$(proc_cpu "$(recorded_pid apiserver)")
  simcpu=$(proc_cpu "$(bench_pid ni-sim)")
  record "$s.seconds[$NODES]" "$(elapsed "$M_T0" "$t1")"
  record "$s.cpu_seconds.by_process" "apiserver+etcd $(awk -v a="$M_APICPU0" -v b="$apicpu" 'BEGIN { printf "%.1f", b - a }'), simulator $(awk -v a="$M_SIMCPU0" -v b="$simcpu" 'BEGIN { printf "%.1f", b - a }'), controller $(awk -v a="$M_CPU0" -v b="$cpu" 'BEGIN { printf "%.1f", b - a }') (of $(awk -v t="$(elapsed "$M_T0" "$t1")" -v n="$(nproc)" 'BEGIN { printf "%.0f", t * n }') core-seconds on $(nproc) cores)"
  record "$s.machine.cpu_seconds" "$(machine_cpu | awk -v a="$M_MACHINE0" '{ split(a, z, " "); printf "idle %.1f, iowait %.1f, steal %.1f", $1 - z[1], $2 - z[2], $3 - z[3] }') (whole machine, /proc/stat)"
  record "$s.controller.cpu_seconds" "$(awk -v a="$M_CPU0" -v b="$cpu" 'BEGIN { printf "%.1f", b - a }')"
  record "$s.controller.peak_rss_mib" "$hwm (VmHWM since the controller started)"
  record "$s.controller.requests" "$ctrl"
  own=$(ctrl_metric nodeimage_api_requests_total 2>/dev/null || echo NA)
  record "$s.controller.requests.own_count" "$(awk -v a="$M_CTRLOWN0" -v b="$own" 'BEGIN { if (a == "NA" || b == "NA") print "NA"; else printf "%d", b - a }') (nodeimage_api_requests_total, the controller's own count; BENCH_APF=$BENCH_APF)"
  record "$s.controller.reconciles" "$(awk -v a="$M_REC0" -v b="$rec" 'BEGIN { printf "%d", b - a }')"
  record "$s.simulator.requests" "$sim (its own count: $simown)"
  record "$s.apiserver.nodeimage_patches" "$(awk -v a="$M_PATCH0" -v b="$(nodeimage_patches)" 'BEGIN { split(a, x); split(b, y); printf "%d, of which %d refused with 409 (resourceVersion moved) and %d with 422 (a failed test: a status write guard, the spec test of an entry write, or invalid)", y[1] - x[1], y[2] - x[2], y[3] - x[3] }')"
  record "$s.apiserver.nodeimage_writes" "$(($(nodeimage_writes) - M_WRITES0)) (PATCH, PUT and apply of NodeImages, all clients, all codes)"
  record "$s.apiserver.nodeimage_watch_events" "$(awk -v a="$M_WATCH0" -v b="$(nodeimage_watch_events)" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%d events, %d bytes", y[1] - x[1], y[2] - x[2] }') (apiserver_watch_events_total and _sizes_sum for NodeImages, all watchers)"
  record "$s.apiserver.rss_mib" "$(vmrss_mib "$(recorded_pid apiserver)") now, peak $(vmhwm_mib "$(recorded_pid apiserver)") since it started (kube-apiserver and its embedded etcd, one process)"
  record "$s.etcd.nodeimages.after" "$(etcd_nodeimages | tr -d '\n')"
  record "$s.apiserver.requests_all_clients" "$(awk -v a="$M_ALL0" -v b="$all" 'BEGIN { printf "%d", b - a }')"
  record "$s.registry.peak_pulling_nodes" "$(sim_stat peakPullingNodes | jq -c . 2>/dev/null) (most simulated nodes Pulling from each registry at once since the simulator started; REGISTRY_LIMIT=$REGISTRY_LIMIT)"
}
# Reconciles per second once everything is complete, over SETTLE_SECONDS.
settle() {
  local s=$1 r0 r1 c0 c1
  sleep 5
  r0=$(ctrl_metric nodeimage_controller_reconciles_total)
  c0=$(ctrl_metric process_cpu_seconds_total)
  sleep "$SETTLE_SECONDS"
  r1=$(ctrl_metric nodeimage_controller_reconciles_total)
  c1=$(ctrl_metric process_cpu_seconds_total)
  record "$s.settled.reconciles_per_second" "$(awk -v a="$r0" -v b="$r1" -v t="$SETTLE_SECONDS" 'BEGIN { printf "%.3f", (b - a) / t }') ($(awk -v a="$r0" -v b="$r1" 'BEGIN { printf "%d", b - a }') in ${SETTLE_SECONDS} s; controller CPU $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }') s; per kind now: $(curl -fsS "http://$CTRL_HEALTH/metrics" | grep '^nodeimage_controller_reconciles_total' | sed 's/nodeimage_controller_reconciles_total//' | tr '\n' ' '))"
  record "$s.controller.rss_mib.settled" "$(vmrss_mib "$(ctrl_pid)")"
}
jobs_gone() {
  sleep 2
  [[ -z $(kc get "$1" -A -o name) ]]
}
# Deletes the scenario's jobs and waits until they are gone (entries released).
clean_up_jobs() {
  local s=$1 kind=$2 t0
  t0=$(now)
  kc delete "$kind" --all -n "$NS" --wait=false >/dev/null 2>&1 || true
  kc delete "$kind" --all --wait=false >/dev/null 2>&1 || true
  # A job is gone once its finalizer has taken its entries out of every
  # NodeImage. Poll the (small) job list, not the NodeImages: listing 1,000
  # NodeImages with 100 tags each is 160 MB, and polling that saturates the
  # API server the benchmark measures.
  wait_until "$TIMEOUT_SECONDS" "$kind gone" scale-controller jobs_gone "$kind"
  t1=$(now)
  record "$s.cleanup.seconds" "$(elapsed "$t0" "$t1") (delete the jobs until every one is gone, its entries released; $(sim_tags) tag entries left)"
  # VmHWM covers the whole life of the controller: rollout and cleanup.
  record "$s.controller.peak_rss_mib.with_cleanup" "$(vmhwm_mib "$(ctrl_pid)") (VmHWM after the cleanup)"
}

# ---------------------------------------------------------------------------
# The probe client (issue 50 part 3): with PROBE set ("sa", "node" or both),
# `ni-sim probe` renews PROBE_LEASES Leases every PROBE_INTERVAL_MS as
# kubelets renew theirs, from the imagepulljob scenario's creation of its
# jobs to their completion, once per identity (impersonated by the admin):
#   sa    ServiceAccount probe/probe, allowed Leases in namespace probe:
#         FlowSchema service-accounts, level workload-low, where nodeimage's
#         requests fall without the chart's level (BENCH_APF=none);
#   node  each Lease as its node (system:node:NAME, group system:nodes) in
#         kube-node-lease, as kubelets renew theirs: FlowSchema
#         system-node-high, level node-high.
# The result line (count, p50, p99 and max time of the renewals, errors by
# code) is recorded as imagepulljob.probe.<identity>.
# ---------------------------------------------------------------------------
probe_setup() {
  [[ -n ${PROBE:-} ]] || return 0
  kc get namespace probe >/dev/null 2>&1 || kc create namespace probe >/dev/null
  kc apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: lease-probe, namespace: probe}
rules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, create, update, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lease-probe, namespace: probe}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: lease-probe}
subjects: [{kind: ServiceAccount, name: probe, namespace: probe}]
EOF
}
probe_start() {
  local id args
  for id in ${PROBE:-}; do
    case $id in
      sa) args=(--namespace probe --prefix probe --as system:serviceaccount:probe:probe
        --as-group system:serviceaccounts --as-group system:serviceaccounts:probe --as-group system:authenticated) ;;
      node) args=(--namespace kube-node-lease --prefix probe-node --as 'system:node:{name}'
        --as-group system:nodes --as-group system:authenticated) ;;
      *) die "PROBE: unknown identity $id (sa, node)" ;;
    esac
    rm -f "$RESULTS/probe-$id.json"
    bench_start "probe-$id" "$BIN/ni-sim" --kubeconfig "$KUBECONFIG" probe "${args[@]}" \
      --leases "$PROBE_LEASES" --interval-ms "$PROBE_INTERVAL_MS" --stats-file "$RESULTS/probe-$id.json"
  done
}
probe_stop() {
  local id
  for id in ${PROBE:-}; do
    bench_stop "probe-$id"
    record "$1.probe.$id" "$(cat "$RESULTS/probe-$id.json" 2>/dev/null || echo "no result: see $LOGS/probe-$id.log") (BENCH_APF=$BENCH_APF)"
  done
}

# ---------------------------------------------------------------------------
# Scenario: JOBS ImagePullJobs over all simulated nodes
# ---------------------------------------------------------------------------
imagepulljob() {
  local s=imagepulljob jobs j t done_n last=0 succeeded failed
  measure_begin "$s"
  jobs=$(for ((j = 1; j <= JOBS; j++)); do
    jq -cn --arg name "scale-$j" --arg image "$REG/bench/scale-$j:v1" --arg ns "$NS" --argjson p "$PARALLELISM" \
      '{apiVersion: "apps.kruise.io/v1alpha1", kind: "ImagePullJob",
        metadata: {name: $name, namespace: $ns},
        spec: {image: $image, selector: {matchLabels: {"nodeimage.dev/sim": "true"}},
               parallelism: $p, completionPolicy: {type: "Always"}}}'
  done | jq -s '{apiVersion: "v1", kind: "List", items: .}')
  probe_setup
  M_T0=$(now)
  probe_start
  kc create -f - >/dev/null <<<"$jobs"
  record "$s.create.seconds" "$(elapsed "$M_T0" "$(now)") (kubectl create of $JOBS jobs)"
  while :; do
    # curl, not kubectl: one poll a second must cost the machine little.
    t=$(api_curl "/apis/apps.kruise.io/v1alpha1/namespaces/$NS/imagepulljobs")
    done_n=$(jq '[.items[] | select(.status.completionTime != null)] | length' <<<"$t")
    ((done_n >= JOBS)) && break
    if (($(elapsed "$M_T0" "$(now)" | cut -d. -f1) >= last + 30)); then
      last=$(elapsed "$M_T0" "$(now)" | cut -d. -f1)
      log "$s: ${last}s: $done_n/$JOBS jobs completed, $(jq '[.items[].status.succeeded // 0] | add' <<<"$t") node pulls succeeded, $(jq '[.items[].status.active // 0] | add' <<<"$t") active; controller RSS $(vmrss_mib "$(ctrl_pid)") MiB; sim $(cat "$SIM_STATS" 2>/dev/null); load $(load_avg)"
    fi
    if (($(elapsed "$M_T0" "$(now)" | cut -d. -f1) > TIMEOUT_SECONDS)); then
      # Record how far it got and what it cost, then give up.
      record "$s.timeout" "not complete after $TIMEOUT_SECONDS s: $done_n/$JOBS jobs completed, $(sim_tags) tag entries in the NodeImages (of $((JOBS * NODES))), $(jq '[.items[] | select(.status != null)] | length' <<<"$t") jobs with a status"
      probe_stop "$s"
      measure_end "$s"
      die "$s: not complete after $TIMEOUT_SECONDS s"
    fi
    sleep 1
  done
  probe_stop "$s"
  measure_end "$s"
  succeeded=$(jq '[.items[].status.succeeded // 0] | add' <<<"$t")
  failed=$(jq '[.items[].status.failed // 0] | add' <<<"$t")
  record "$s.result" "$JOBS jobs completed: $succeeded node pulls succeeded, $failed failed (expected $((JOBS * NODES)) succeeded)"
  record "$s.job_status_bytes.max" "$(jq -c '[.items[] | .status | tostring | length] | max' <<<"$t")"
  record "$s.nodeimage_bytes.example" "$(kc get nodeimage sim-00001 -o json | wc -c) (sim-00001 -o json, with $JOBS tags)"
  settle "$s"
  clean_up_jobs "$s" imagepulljobs
  bench_stop scale-controller
}

# ---------------------------------------------------------------------------
# Scenario: one ImagePrePullJob, 2 images, over all simulated nodes
# ---------------------------------------------------------------------------
imageprepulljob() {
  local s=imageprepulljob t state last=0 job=scale-prepull
  measure_begin "$s"
  local sp0
  sp0=$(status_patches imageprepulljobs)
  M_T0=$(now)
  kc create -f - >/dev/null <<EOF
apiVersion: operations.kubeedge.io/v1alpha1
kind: ImagePrePullJob
metadata:
  name: $job
spec:
  imagePrePullTemplate:
    images: ["$REG/bench/prepull-a:v1", "$REG/bench/prepull-b:v1"]
    labelSelector: {matchLabels: {"nodeimage.dev/sim": "true"}}
    concurrency: $PREPULL_CONCURRENCY
EOF
  while :; do
    t=$(api_curl "/apis/operations.kubeedge.io/v1alpha1/imageprepulljobs/$job")
    state=$(jq -r '.status.state // "" | ascii_downcase' <<<"$t")
    [[ $state == successful || $state == failed ]] && break
    if (($(elapsed "$M_T0" "$(now)" | cut -d. -f1) >= last + 30)); then
      last=$(elapsed "$M_T0" "$(now)" | cut -d. -f1)
      log "$s: ${last}s: state '$state', $(jq '[.status.status[]? | select(.nodeStatus.state | ascii_downcase == "successful")] | length' <<<"$t") nodes successful; controller RSS $(vmrss_mib "$(ctrl_pid)") MiB; sim $(cat "$SIM_STATS" 2>/dev/null); load $(load_avg)"
    fi
    if (($(elapsed "$M_T0" "$(now)" | cut -d. -f1) > TIMEOUT_SECONDS)); then die "$s: not finished after $TIMEOUT_SECONDS s"; fi
    sleep 1
  done
  measure_end "$s"
  local sp secs
  sp=$(($(status_patches imageprepulljobs) - sp0))
  secs=$(elapsed "$M_T0" "$(now)")
  record "$s.status_patches" "$sp ($(awk -v n="$sp" -v t="$secs" 'BEGIN { printf "%.2f", n / t }') per second over ${secs}s)"
  t=$(kc get imageprepulljob "$job" -o json)
  echo "$t" >"$RESULTS/imageprepulljob-$NODES.json"
  record "$s.result" "state $(jq -r .status.state <<<"$t"), reason '$(jq -r '.status.reason // ""' <<<"$t")', $(jq '[.status.status[]?] | length' <<<"$t") node entries"
  record "$s.status_object_bytes" "$(wc -c <<<"$t") (kubectl get imageprepulljob $job -o json | wc -c)"
  settle "$s"
  clean_up_jobs "$s" imageprepulljobs
  bench_stop scale-controller
}

# ---------------------------------------------------------------------------
# Scenario: one ImageRemovalJob over all simulated nodes
# ---------------------------------------------------------------------------
imageremovaljob() {
  local s=imageremovaljob t done_at last=0 job=scale-removal w0 w1 w2 t0
  measure_begin "$s"
  w0=$(nodeimage_writes_split)
  M_T0=$(now)
  kc create -f - >/dev/null <<EOF
apiVersion: nodeimage.dev/v1alpha1
kind: ImageRemovalJob
metadata:
  name: $job
spec:
  images: ["$REG/bench/removal@sha256:$(printf '%064d' 7)"]
  selector: {matchLabels: {"nodeimage.dev/sim": "true"}}
  parallelism: $PARALLELISM
EOF
  while :; do
    t=$(api_curl "/apis/nodeimage.dev/v1alpha1/imageremovaljobs/$job")
    done_at=$(jq -r '.status.completionTime // ""' <<<"$t")
    [[ -n $done_at ]] && break
    if (($(elapsed "$M_T0" "$(now)" | cut -d. -f1) >= last + 30)); then
      last=$(elapsed "$M_T0" "$(now)" | cut -d. -f1)
      log "$s: ${last}s: $(jq -r '.status.message // ""' <<<"$t" | cut -c1-160); controller RSS $(vmrss_mib "$(ctrl_pid)") MiB; load $(load_avg)"
    fi
    if (($(elapsed "$M_T0" "$(now)" | cut -d. -f1) > TIMEOUT_SECONDS)); then die "$s: not finished after $TIMEOUT_SECONDS s"; fi
    sleep 1
  done
  measure_end "$s"
  w1=$(nodeimage_writes_split)
  record "$s.result" "$(jq -c '.status | {desired, succeeded, kept, failed, bytesFreed}' <<<"$t")"
  record "$s.nodeimage_writes_per_node.running" "$(awk -v a="$w0" -v b="$w1" -v n="$NODES" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.2f (spec %d: the controller'"'"'s entries; status %d: the answers; over %d nodes)", (y[1] + y[2] - x[1] - x[2]) / n, y[1] - x[1], y[2] - x[2], n }')"
  t0=$(now)
  kc delete imageremovaljob "$job" --wait=false >/dev/null
  wait_until "$TIMEOUT_SECONDS" "imageremovaljobs gone" scale-controller jobs_gone imageremovaljobs
  w2=$(nodeimage_writes_split)
  record "$s.cleanup.seconds" "$(elapsed "$t0" "$(now)") (delete the job until it is gone, its entries taken back)"
  record "$s.nodeimage_writes_per_node.deletion" "$(awk -v a="$w1" -v b="$w2" -v n="$NODES" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.2f (spec %d, status %d)", (y[1] + y[2] - x[1] - x[2]) / n, y[1] - x[1], y[2] - x[2] }')"
  bench_stop scale-controller
}

# ---------------------------------------------------------------------------
# Scenario: pre-download of one Deployment's new image onto its 1,000 nodes
# ---------------------------------------------------------------------------
# A Deployment of NODES replicas, one Pod bound to each simulated node (by
# `ni-sim bind-pods`: the cluster runs no scheduler, and the Pods stay
# Pending without a kubelet, which is all a podSelector reads), annotated
# for pre-download with parallelism PARALLELISM and its rollout paused.
# ROUNDS rounds, each of two runs with a fresh controller (in turn first):
#   workload     `kubectl set image` on the Deployment: pre-download makes
#                the ImagePullJob; until it is Complete with NODES nodes
#                succeeded. Then `set image` back to the Pods' image: the
#                controller deletes the job (the rollout is "over").
#   handwritten  the ImagePullJob a user would write without pre-download
#                (same podSelector, parallelism, a fresh image): `kubectl
#                create` until Complete with NODES nodes succeeded; then
#                deleted.
# Each run pulls a fresh image (so no node holds it yet).
PREDL=predl
PREDL_SEL=app=predl-bench
PREDL_BASE=$REG/bench/predl-base:v1

# Makes the Deployment and binds its Pods, unless it is there with NODES
# Pods bound; annotates it and pauses its rollout.
predownload_setup() {
  local t0 out
  t0=$(now)
  kc apply -f - >/dev/null <<EOD
apiVersion: apps/v1
kind: Deployment
metadata: {name: $PREDL, namespace: $NS}
spec:
  replicas: $NODES
  selector: {matchLabels: {app: predl-bench}}
  template:
    metadata: {labels: {app: predl-bench}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 0
      containers: [{name: app, image: "$PREDL_BASE"}]
EOD
  out=$("$BIN/ni-sim" --kubeconfig "$KUBECONFIG" bind-pods --namespace "$NS" --selector "$PREDL_SEL" \
    --node-selector "$SIM_SEL" --count "$NODES" --timeout-seconds 1200)
  record "predownload.setup.seconds" "$(elapsed "$t0" "$(now)") (Deployment of $NODES replicas to every Pod bound, one per simulated node: $out)"
  kc annotate deployment "$PREDL" -n "$NS" --overwrite nodeimage.dev/image-predownload=true \
    "apps.kruise.io/image-predownload-parallelism=$PARALLELISM" >/dev/null
  if [[ $(kc get deployment "$PREDL" -n "$NS" -o jsonpath='{.spec.paused}') != true ]]; then
    kc rollout pause deployment "$PREDL" -n "$NS" >/dev/null
  fi
  kc set image deployment "$PREDL" -n "$NS" "app=$PREDL_BASE" >/dev/null
  record "predownload.setup.nodes" "$(api_curl "/api/v1/namespaces/$NS/pods?labelSelector=app%3Dpredl-bench" |
    jq -r '[.items[] | select(.spec.nodeName != null)] | "\(length) Pods bound to \(map(.spec.nodeName) | unique | length) nodes, phases \(map(.status.phase) | group_by(.) | map("\(.[0])=\(length)") | join(","))"')"
}
predownload_teardown() {
  kc delete deployment "$PREDL" -n "$NS" --wait=false >/dev/null 2>&1 || true
  # Pods bound to a node without a kubelet are never confirmed gone: force.
  kc delete pods -n "$NS" -l "$PREDL_SEL" --grace-period=0 --force >/dev/null 2>&1 || true
}

# The ImagePullJobs of NS pulling IMAGE, as one JSON array.
jobs_of() {
  api_curl "/apis/apps.kruise.io/v1alpha1/namespaces/$NS/imagepulljobs" | jq -c --arg i "$1" '[.items[] | select(.spec.image == $i)]'
}
# ImagePullJob creations (POST) the API server has answered, all clients:
# "created refused" (201, any other code).
job_posts() {
  kc get --raw /metrics | { grep '^apiserver_request_total{.*resource="imagepulljobs".*verb="POST"' || true; } |
    awk '{ if ($0 ~ /code="201"/) c += $NF; else r += $NF } END { printf "%d %d", c, r }'
}
# NodeImage writes (PATCH, PUT, apply; all codes) by target: "spec status".
nodeimage_writes_split() {
  kc get --raw /metrics | { grep '^apiserver_request_total{.*resource="nodeimages".*verb="\(PATCH\|PUT\|APPLY\)"' || true; } |
    awk '{ if ($0 ~ /subresource="status"/) st += $NF; else sp += $NF } END { printf "%d %d", sp, st }'
}
# The controller's reconciles of one kind so far.
reconciles_of() {
  local v
  v=$(ctrl_metric nodeimage_controller_reconciles_total "kind=\"$1\"")
  [[ $v == NA ]] && v=0
  echo "${v%.*}"
}
# Simulated NodeImages whose status has IMAGE Succeeded.
nodes_with() {
  api_curl "/apis/apps.kruise.io/v1alpha1/nodeimages?labelSelector=nodeimage.dev%2Fsim%3Dtrue" |
    jq --arg i "${1%:*}" --arg t "${1##*:}" '[.items[] | select([.status.imageStatuses[$i].tags[]? | select(.tag == $t and .phase == "Succeeded")] | length > 0)] | length'
}

# Events on the Deployment so far, per type/reason: "Normal/X=3 Warning/Y=1".
deployment_events() {
  api_curl "/api/v1/namespaces/$NS/events?fieldSelector=involvedObject.name%3D$PREDL" |
    jq -r '[.items[] | select(.involvedObject.kind == "Deployment") | {r: "\(.type)/\(.reason)", n: (.count // .series.count // 1)}] | group_by(.r) | map("\(.[0].r)=\(map(.n) | add)") | join(" ")'
}
# The events of the second list that the first did not count: "Normal/X 2, …".
events_diff() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    n = split(a, x, " "); for (i = 1; i <= n; i++) { split(x[i], p, "="); was[p[1]] = p[2] }
    n = split(b, y, " "); out = ""
    for (i = 1; i <= n; i++) { split(y[i], q, "="); d = q[2] - was[q[1]]; if (d) out = out (out ? ", " : "") q[1] " " d }
    print (out ? out : "none") }'
}

# predownload_run VARIANT ROUND: one measured run (see above).
predownload_run() {
  local v=$1 r=$2 s image t j done_at="" first_at="" sim_at="" last=0 sp0 posts0 writes0 pr0 jr0 sim0 ev0 el
  s=predownload.$v.r$r
  image=$REG/bench/predl-$v-r$r-$(date -u +%H%M%S):v2
  measure_begin "$s"
  sp0=$(status_patches imagepulljobs)
  posts0=$(job_posts)
  writes0=$(nodeimage_writes_split)
  pr0=$(reconciles_of Predownload)
  jr0=$(reconciles_of ImagePullJob)
  sim0=$(sim_stat tagsSucceeded)
  ev0=$(deployment_events)
  M_T0=$(now)
  if [[ $v == workload ]]; then
    kc set image deployment "$PREDL" -n "$NS" "app=$image" >/dev/null
  else
    kc create -f - >/dev/null <<EOD
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: predl-handwritten-r$r, namespace: $NS}
spec:
  image: "$image"
  podSelector: {matchLabels: {app: predl-bench}}
  parallelism: $PARALLELISM
  completionPolicy: {type: Always}
EOD
  fi
  while :; do
    el=$(elapsed "$M_T0" "$(now)")
    t=$(jobs_of "$image")
    [[ -z $first_at && $(jq length <<<"$t") -gt 0 ]] && first_at=$el
    [[ -z $sim_at && $(($(sim_stat tagsSucceeded) - sim0)) -ge $NODES ]] && sim_at=$el
    j=$(jq -c '.[0] // {}' <<<"$t")
    if [[ $(jq -r '.status.completionTime // ""' <<<"$j") != "" ]]; then
      done_at=$el
      break
    fi
    if ((${el%.*} >= last + 30)); then
      last=${el%.*}
      log "$s: ${last}s: $(jq length <<<"$t") job(s); succeeded $(jq '.status.succeeded // 0' <<<"$j"), active $(jq '.status.active // 0' <<<"$j"); controller RSS $(vmrss_mib "$(ctrl_pid)") MiB; sim $(cat "$SIM_STATS" 2>/dev/null); load $(load_avg)"
    fi
    if ((${el%.*} > TIMEOUT_SECONDS)); then
      record "$s.timeout" "not complete after $TIMEOUT_SECONDS s: $(jq length <<<"$t") job(s), status $(jq -c '.status // {}' <<<"$j")"
      measure_end "$s"
      die "$s: not complete after $TIMEOUT_SECONDS s"
    fi
    sleep 1
  done
  measure_end "$s"
  PD_CPU[$v]+="$(awk -v a="$M_CPU0" -v b="$(ctrl_metric process_cpu_seconds_total)" 'BEGIN { printf "%.1f", b - a }') "
  [[ -n $sim_at ]] || sim_at="$(elapsed "$M_T0" "$(now)") (seen after the job)"
  local writes1 sp posts
  writes1=$(nodeimage_writes_split)
  sp=$(($(status_patches imagepulljobs) - sp0))
  posts=$(awk -v a="$posts0" -v b="$(job_posts)" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%d created, %d refused", y[1] - x[1], y[2] - x[2] }')
  record "$s.complete.seconds" "$done_at (set image or create to the first poll, 1 s apart, that shows the job Complete: the figure to compare)"
  record "$s.job_seen.seconds" "${first_at:-NA} (first poll, 1 s apart, that lists the job)"
  record "$s.simulator_all_succeeded.seconds" "$sim_at (the simulator has marked $NODES more tags Succeeded; its stats file is written every second)"
  record "$s.result" "$(jq -r '"\(.metadata.name): succeeded \(.status.succeeded // 0), failed \(.status.failed // 0), desired \(.status.desired // 0), conditions \([.status.conditions[]? | select(.status == "True") | .type] | join(","))"' <<<"$j"); $(nodes_with "$image") simulated NodeImages report $image Succeeded (expected $NODES)"
  record "$s.jobs" "$(jq length <<<"$t") ImagePullJob(s) with the image; ImagePullJob POSTs (all clients): $posts"
  record "$s.job_status_patches" "$sp"
  record "$s.apiserver.nodeimage_writes.split" "$(awk -v a="$writes0" -v b="$writes1" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "spec %d (the controller'"'"'s tag entries), status %d (the simulator'"'"'s reports)", y[1] - x[1], y[2] - x[2] }')"
  record "$s.controller.reconciles.by_kind" "Predownload $(($(reconciles_of Predownload) - pr0)), ImagePullJob $(($(reconciles_of ImagePullJob) - jr0))"
  PD_SECONDS[$v]+="$done_at "
  PD_HWM[$v]+="$(vmhwm_mib "$(ctrl_pid)") "
  PD_WRITES[$v]+="$(awk -v a="$writes0" -v b="$writes1" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%d", y[1] + y[2] - x[1] - x[2] }') "
  # Back to where the run started: no job, no tag entry.
  local t0
  t0=$(now)
  if [[ $v == workload ]]; then
    kc set image deployment "$PREDL" -n "$NS" "app=$PREDL_BASE" >/dev/null
  else
    kc delete imagepulljob "predl-handwritten-r$r" -n "$NS" --wait=false >/dev/null
  fi
  wait_until "$TIMEOUT_SECONDS" "$s: the job gone" scale-controller predownload_job_gone "$image"
  record "$s.cleanup.seconds" "$(elapsed "$t0" "$(now)") ($([[ $v == workload ]] && echo "set image back: the controller deletes its job" || echo "kubectl delete of the job") until it is gone, its entries released; $(sim_tags) tag entries left)"
  record "$s.deployment_events" "$(events_diff "$ev0" "$(deployment_events)") (on the Deployment, over the run and its cleanup)"
  bench_stop scale-controller
}
predownload_job_gone() {
  sleep 1
  [[ $(jobs_of "$1" | jq length) == 0 ]]
}

predownload() {
  local r v order
  declare -gA PD_SECONDS=() PD_CPU=() PD_HWM=() PD_WRITES=()
  predownload_setup
  for ((r = 1; r <= ROUNDS; r++)); do
    # Odd rounds pre-download first, even rounds the handwritten job first,
    # so a drift of the machine's load favours neither.
    order=(workload handwritten)
    ((r % 2)) || order=(handwritten workload)
    for v in "${order[@]}"; do predownload_run "$v" "$r"; done
  done
  for v in workload handwritten; do
    record "predownload.$v.summary" "to Complete $(tr ' ' '\n' <<<"${PD_SECONDS[$v]}" | grep . | summary) s; controller CPU $(tr ' ' '\n' <<<"${PD_CPU[$v]}" | grep . | summary) s; peak RSS $(tr ' ' '\n' <<<"${PD_HWM[$v]}" | grep . | summary) MiB; NodeImage writes $(tr ' ' '\n' <<<"${PD_WRITES[$v]}" | grep . | summary)"
  done
  [[ ${KEEP_NODES:-0} == 1 ]] || predownload_teardown
}

# ---------------------------------------------------------------------------
# landing: where a rollout's new Pods land (see the top of this file)
# ---------------------------------------------------------------------------
LANDING_REPLICAS=${LANDING_REPLICAS:-100}
LANDING_EXTRA=${LANDING_EXTRA:-"0 100 1000"}
LANDING_SEL=app=landing-bench

# landing_run EXTRA: one run with --predownload-max-extra-nodes EXTRA.
landing_run() {
  local extra=$1 s image t0 job share nodes
  s=landing.extra$extra
  image=$REG/bench/landing-$extra-$(date -u +%H%M%S):v2
  CONTROLLER_EXTRA_ARGS="--predownload-max-extra-nodes $extra"
  measure_begin "$s"
  M_T0=$(now)
  kc apply -f - >/dev/null <<EOD
apiVersion: apps/v1
kind: Deployment
metadata:
  name: landing
  namespace: $NS
  annotations: {nodeimage.dev/image-predownload: "true"}
spec:
  replicas: $LANDING_REPLICAS
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: "100%", maxUnavailable: 0}}
  selector: {matchLabels: {app: landing-bench}}
  template:
    metadata: {labels: {app: landing-bench}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 0
      nodeSelector: {nodeimage.dev/sim: "true"}
      # The API server taints a new Node not-ready, and no node-lifecycle
      # controller lifts it on this cluster: tolerated, as if a kubelet had.
      tolerations: [{key: node.kubernetes.io/not-ready, operator: Exists, effect: NoSchedule}]
      containers: [{name: app, image: "$PREDL_BASE"}]
EOD
  "$BIN/ni-sim" --kubeconfig "$KUBECONFIG" bind-pods --namespace "$NS" --selector "$LANDING_SEL" \
    --node-selector "$SIM_SEL" --count "$LANDING_REPLICAS" --timeout-seconds 1200 >/dev/null
  kc rollout pause deployment landing -n "$NS" >/dev/null
  kc set image deployment landing -n "$NS" "app=$image" >/dev/null
  wait_until "$TIMEOUT_SECONDS" "$s: its job Complete" scale-controller landing_job_complete "$image"
  job=$(jobs_of "$image" | jq -c '.[0]')
  record "$s.job" "$(jq -r '"succeeded \(.status.succeeded // 0) of desired \(.status.desired // 0), parallelism \(.spec.parallelism)"' <<<"$job") after $(elapsed "$M_T0" "$(now)") s"
  kc rollout resume deployment landing -n "$NS" >/dev/null
  t0=$(now)
  "$BIN/ni-sim" --kubeconfig "$KUBECONFIG" bind-pods --namespace "$NS" --selector "$LANDING_SEL" \
    --node-selector "$SIM_SEL" --count "$((2 * LANDING_REPLICAS))" --timeout-seconds 1200 >/dev/null
  # The new Pods' nodes, and the simulated NodeImages that report the new
  # image Succeeded (they did before the rollout resumed: the job had
  # completed, and nothing removes the image while the job lives).
  nodes=$(api_curl "/api/v1/namespaces/$NS/pods?labelSelector=app%3Dlanding-bench" |
    jq -c --arg i "$image" '[.items[] | select(.spec.containers[0].image == $i and .spec.nodeName != null) | .spec.nodeName]')
  share=$(api_curl "/apis/apps.kruise.io/v1alpha1/nodeimages?labelSelector=nodeimage.dev%2Fsim%3Dtrue" |
    jq -r --argjson n "$nodes" --arg i "${image%:*}" --arg t "${image##*:}" '
      [.items[] | select(.metadata.name as $m | $n | index($m)) |
       select([.status.imageStatuses[$i].tags[]? | select(.tag == $t and .phase == "Succeeded")] | length > 0)] | length as $held |
      "\($held) of \($n | length) new Pods (\(if ($n | length) > 0 then ($held * 1000 / ($n | length) | floor) / 10 else 0 end)%)"')
  record "$s.share" "$share were bound to a node holding $image (bound within $(elapsed "$t0" "$(now)") s of the resume)"
  measure_end "$s"
  kc delete deployment landing -n "$NS" --wait=false >/dev/null
  kc delete pods -n "$NS" -l "$LANDING_SEL" --grace-period=0 --force >/dev/null 2>&1 || true
  wait_until "$TIMEOUT_SECONDS" "$s: the job gone" scale-controller predownload_job_gone "$image"
  wait_until 600 "$s: no tag entries left" scale-controller bash -c '[[ $('"$KUBECTL"' get nodeimages -l '"$SIM_SEL"' -o json | jq "[.items[] | (.spec.images // {}) | to_entries[] | .value.tags | length] | add // 0") == 0 ]]'
  bench_stop scale-controller
  CONTROLLER_EXTRA_ARGS=""
}
landing_job_complete() {
  sleep 1
  [[ $(jobs_of "$1" | jq -r '.[0].status.completionTime // ""') != "" ]]
}
landing() {
  local extra
  for extra in $LANDING_EXTRA; do landing_run "$extra"; done
}

# ---------------------------------------------------------------------------
# Scenario p2p (issue 52): plain parallelism against seed-then-fan-out
# ---------------------------------------------------------------------------
# p2p_run VARIANT ROUND: one image onto every simulated node, timed from the
# job's creation to its completion; the registry's and the peers' modelled
# MB from the simulator's stats (written every second).
p2p_run() {
  local v=$1 r=$2 s=p2p image ann mb0 peer0 t0 el last=0 j
  image=$REG/bench/p2p-$v-r$r-$(date -u +%H%M%S):v1
  ann='{}'
  [[ $v == seeds ]] && ann=$(jq -cn --arg k "$P2P_SEEDS" '{"nodeimage.dev/p2p-seeds": $k}')
  mb0=$(sim_stat modelRegistryMb)
  peer0=$(sim_stat modelPeerMb)
  t0=$(now)
  jq -n --arg image "$image" --arg ns "$NS" --argjson p "$NODES" --argjson a "$ann" \
    '{apiVersion: "apps.kruise.io/v1alpha1", kind: "ImagePullJob",
      metadata: {name: "p2p", namespace: $ns, annotations: $a},
      spec: {image: $image, selector: {matchLabels: {"nodeimage.dev/sim": "true"}},
             parallelism: $p, completionPolicy: {type: "Always"}}}' | kc create -f - >/dev/null
  while :; do
    sleep 1
    el=$(elapsed "$t0" "$(now)")
    j=$(api_curl "/apis/apps.kruise.io/v1alpha1/namespaces/$NS/imagepulljobs/p2p")
    [[ $(jq -r '.status.completionTime // ""' <<<"$j") != "" ]] && break
    if ((${el%.*} >= last + 30)); then
      last=${el%.*}
      log "$s $v r$r: ${last}s: succeeded $(jq '.status.succeeded // 0' <<<"$j"), active $(jq '.status.active // 0' <<<"$j"); sim $(cat "$SIM_STATS" 2>/dev/null)"
    fi
    ((${el%.*} <= TIMEOUT_SECONDS)) || die "$s $v r$r: not complete after $TIMEOUT_SECONDS s"
  done
  sleep 2 # the simulator's stats file is written every second
  record "$s.$v.r$r" "$(jq -r '"succeeded \(.status.succeeded // 0) of \(.status.desired // 0), failed \(.status.failed // 0)"' <<<"$j") in $el s; registry $(awk -v a="$mb0" -v b="$(sim_stat modelRegistryMb)" 'BEGIN { printf "%.1f", b - a }') MB, peers $(awk -v a="$peer0" -v b="$(sim_stat modelPeerMb)" 'BEGIN { printf "%.1f", b - a }') MB"
  P2P_SECONDS[$v]+="$el "
  kc delete imagepulljob p2p -n "$NS" --wait=false >/dev/null
  wait_until "$TIMEOUT_SECONDS" "$s: the job gone" scale-controller bash -c "! $KUBECTL get imagepulljob p2p -n $NS >/dev/null 2>&1"
}
p2p() {
  local r v
  [[ -n $P2P_MODEL ]] || die "p2p: set P2P_MODEL (ni-sim --bandwidth-model), e.g. image_mb=10000,registry_mbps=1250,node_mbps=500,upload_mbps=500,speed=50"
  declare -gA P2P_SECONDS=()
  start_controller
  for ((r = 1; r <= ROUNDS; r++)); do
    for v in plain seeds; do p2p_run "$v" "$r"; done
  done
  for v in plain seeds; do
    record "p2p.$v.summary" "to Complete $(tr ' ' '\n' <<<"${P2P_SECONDS[$v]}" | grep . | summary) s (real time; model time is P2P_MODEL's speed times that)"
  done
  bench_stop scale-controller
}

for s in "${SCENARIOS[@]}"; do
  case $s in
    imagepulljob | imageprepulljob | imageremovaljob | predownload | landing | p2p) "$s" ;;
    *) die "unknown scenario $s (imagepulljob, imageprepulljob, imageremovaljob, predownload, landing, p2p)" ;;
  esac
done
record "simulator.stats.end" "$(cat "$SIM_STATS" 2>/dev/null)"
bench_stop ni-sim
if [[ ${KEEP_NODES:-0} != 1 ]]; then
  start_controller
  t0=$(now)
  "$BIN/ni-sim" --kubeconfig "$KUBECONFIG" delete-nodes --selector "$SIM_SEL" >/dev/null
  wait_until 1800 "simulated NodeImages gone" scale-controller bash -c "[[ \$($KUBECTL get nodeimages -l $SIM_SEL -o name | wc -l) == 0 ]]"
  record "nodes.delete.seconds[$NODES]" "$(elapsed "$t0" "$(now)") (delete-collection of the Nodes until the controller deleted every NodeImage)"
fi
echo "# load at end: $(load_avg)" | tee -a "$RESULTS_FILE"

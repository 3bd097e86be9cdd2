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
#                    object size, controller CPU seconds and peak RSS.
#
#   NODEIMAGE_STATE=/work/bench-state NODES=1000 tests/bench/scale.sh [imagepulljob] [imageprepulljob]
#   NODEIMAGE_STATE=/work/bench-state tests/bench/scale.sh reset   # after an aborted run
#
# The simulated Nodes (nodeimage.dev/sim=true) are created by `ni-sim
# create-nodes`; the controller's node mirror creates their NodeImages;
# `ni-sim run` plays their daemons (Pulling, then Succeeded, through the
# daemon's own status patch). The controller runs as ServiceAccount
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
# (100), SIM_CONCURRENCY (64 nodes written at once), PULL_MS (0: simulated
# pull time; above 0 pulls overlap), REGISTRY_LIMIT (0: nodeimage's
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
TIMEOUT_SECONDS=${TIMEOUT_SECONDS:-7200}
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
  for kind in imagepulljobs.apps.kruise.io imageprepulljobs.operations.kubeedge.io; do
    for j in $(kc get "$kind" -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}'); do
      ns=${j%%/*}
      kc patch "$kind" "${j#*/}" ${ns:+-n "$ns"} --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null || true
    done
    kc delete "$kind" --all -A --wait=false >/dev/null
  done
  "$BIN/ni-sim" --kubeconfig "$KUBECONFIG" delete-nodes --selector "$SIM_SEL"
  kc delete nodeimages -l "$SIM_SEL" --wait=false >/dev/null
  log "reset: jobs, simulated Nodes and NodeImages deleted"
  exit 0
fi
RESULTS_FILE=$RESULTS/scale-$(date -u +%Y%m%dT%H%M%SZ)-$NODES.txt
trap bench_cleanup EXIT

CONTROLLER_BIN=${CONTROLLER_BIN:-$BIN/nodeimage-controller}
CONTROLLER_ARGS=${CONTROLLER_ARGS:-"--kubeconfig {kubeconfig} --health-addr {health} --log-format json --registry-max-pulls $REGISTRY_LIMIT"}
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
} | tee "$RESULTS_FILE"

kc apply --server-side --force-conflicts -f "$CONTROLLER_CRDS" >/dev/null
kc wait --for=condition=Established --timeout=60s -f "$CONTROLLER_CRDS" >/dev/null
bench_identity nodeimage-controller 50
bench_identity ni-sim 60
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
  read -r -a args <<<"$(fill "$CONTROLLER_ARGS")"
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
  out=$("$BIN/ni-sim" --kubeconfig "$KUBECONFIG" create-nodes --count "$NODES" --concurrency 32)
  t1=$(now)
  record "nodes.create.seconds[$NODES]" "$(elapsed "$t0" "$t1") ($out)"
  wait_until 1800 "$NODES simulated NodeImages" scale-controller bash -c "[[ \$($KUBECTL get nodeimages -l $SIM_SEL -o name | wc -l) -ge $NODES ]]"
  record "nodes.mirrored.seconds[$NODES]" "$(elapsed "$t0" "$(now)") (Node creation to all NodeImages created by the controller)"
fi
(($(sim_tags) == 0)) || die "the simulated NodeImages still hold tags: clean them first (delete the jobs in $NS and wait)"
bench_stop scale-controller

bench_start ni-sim "$BIN/ni-sim" --kubeconfig "$SIM_KUBECONFIG" run --selector "$SIM_SEL" \
  --concurrency "$SIM_CONCURRENCY" --pull-ms "$PULL_MS" --stats-file "$SIM_STATS" --stats-interval 1
sim_stat() { jq -r ".$1" "$SIM_STATS" 2>/dev/null || echo 0; }

# PATCHes of NodeImages (spec and status) by all clients: "total 409s 422s".
nodeimage_patches() {
  local text
  text=$(kc get --raw /metrics | grep '^apiserver_request_total{.*resource="nodeimages".*verb="PATCH"')
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
  v=$(kc get --raw /metrics | grep '^apiserver_request_total{.*resource="nodeimages".*verb="\(PATCH\|PUT\|APPLY\)"' |
    awk '{ s += $NF } END { printf "%d", s }')
  echo "${v:-0}"
}

# Status PATCHes of a job resource (all codes), as the API server counts them.
status_patches() {
  local v
  v=$(kc get --raw /metrics | grep "^apiserver_request_total{.*resource=\"$1\".*subresource=\"status\".*verb=\"PATCH\"" |
    awk '{ s += $NF } END { printf "%d", s }')
  echo "${v:-0}"
}

# Common measurement around one scenario: before/after counters.
measure_begin() {
  start_controller
  sleep 10
  M_CPU0=$(ctrl_metric process_cpu_seconds_total)
  M_RSS_IDLE=$(mib "$(ctrl_metric process_resident_memory_bytes)")
  M_CTRL0=$(identity_requests nodeimage-controller)
  M_SIM0=$(identity_requests ni-sim)
  M_SIMOWN0=$(sim_stat requests)
  M_ALL0=$(apiserver_metric apiserver_request_total)
  M_REC0=$(ctrl_metric nodeimage_controller_reconciles_total)
  M_PATCH0=$(nodeimage_patches)
  M_WRITES0=$(nodeimage_writes)
  M_APICPU0=$(proc_cpu "$(recorded_pid apiserver)")
  M_SIMCPU0=$(proc_cpu "$(bench_pid ni-sim)")
  M_MACHINE0=$(machine_cpu)
  record "$1.controller.idle_rss_mib[$NODES]" "$M_RSS_IDLE (fresh controller, $NODES NodeImages cached, before the jobs)"
  M_T0=$(now)
}
measure_end() {
  local s=$1 t1 cpu hwm ctrl sim simown all rec
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
  record "$s.controller.reconciles" "$(awk -v a="$M_REC0" -v b="$rec" 'BEGIN { printf "%d", b - a }')"
  record "$s.simulator.requests" "$sim (its own count: $simown)"
  record "$s.apiserver.nodeimage_patches" "$(awk -v a="$M_PATCH0" -v b="$(nodeimage_patches)" 'BEGIN { split(a, x); split(b, y); printf "%d, of which %d refused with 409 (resourceVersion moved) and %d with 422 (a failed test: a status write guard, the spec test of an entry write, or invalid)", y[1] - x[1], y[2] - x[2], y[3] - x[3] }')"
  record "$s.apiserver.nodeimage_writes" "$(($(nodeimage_writes) - M_WRITES0)) (PATCH, PUT and apply of NodeImages, all clients, all codes)"
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
  M_T0=$(now)
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
      measure_end "$s"
      die "$s: not complete after $TIMEOUT_SECONDS s"
    fi
    sleep 1
  done
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

for s in "${SCENARIOS[@]}"; do
  case $s in
    imagepulljob | imageprepulljob) "$s" ;;
    *) die "unknown scenario $s (imagepulljob, imageprepulljob)" ;;
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

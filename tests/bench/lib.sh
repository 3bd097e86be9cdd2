# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
# Helpers shared by the benchmark scripts (tests/bench/*.sh). Sourced.
#
# Needs a running local cluster (tests/cluster/up.sh); NODEIMAGE_STATE picks
# it (default <repo>/.state; benchmarks should use their own instance, see
# docs/benchmarks.md). Processes are started with the cluster's start_daemon,
# so their PID files live in $NODEIMAGE_STATE/pids and down.sh stops them too;
# bench_cleanup (run on exit) stops the ones this script started.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$BENCH_DIR/../cluster/lib.sh"

ENV_FILE=$STATE/env.sh
[[ -f $ENV_FILE ]] || die "no $ENV_FILE: start the cluster first (NODEIMAGE_STATE=$STATE tests/cluster/up.sh)"
# shellcheck disable=SC1090
. "$ENV_FILE"

# Release binaries by default (benchmarks measure what ships). SRC is the
# source tree they were built from (its CRDs are installed): the repository,
# or a snapshot of it (NODEIMAGE_BENCH_SRC) while others edit the tree.
SRC=${NODEIMAGE_BENCH_SRC:-$REPO_ROOT}
BIN=${NODEIMAGE_BENCH_BIN:-$REPO_ROOT/target/release}
NI_CRI_BIN=$BIN/ni-cri
CA=$STATE/kube/pki/ca.crt
ADMIN_TOKEN=$(awk '$1 == "token:" {print $2; exit}' "$KUBECONFIG")
API=$NODEIMAGE_API_SERVER
RESULTS=${NODEIMAGE_BENCH_RESULTS:-$STATE/bench/results}
mkdir -p "$RESULTS"

kc() { "$KUBECTL" --request-timeout=60s "$@"; }

# Seconds since the epoch with microseconds.
now() { echo "$EPOCHREALTIME"; }
# Elapsed seconds between two now() values, 3 decimals.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
load_avg() { cut -d' ' -f1-3 /proc/loadavg; }
# The machine's CPU time so far, in seconds: "idle iowait steal" (from
# /proc/stat). Over a run, idle shows how saturated the machine was,
# iowait the time waiting on the disk (etcd's fsyncs), steal the time the
# hypervisor gave the CPU to others.
machine_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { printf "%.1f %.1f %.1f", $5 / hz, $6 / hz, $9 / hz; exit }' /proc/stat
}

# curl against the API server as admin: api_curl [curl args] PATH
api_curl() {
  local path=${*: -1}
  curl -sS --max-time 30 --cacert "$CA" -H "Authorization: Bearer $ADMIN_TOKEN" "${@:1:$#-1}" "$API$path"
}

# Value of a Prometheus series (sum over all label sets matching the filter)
# in the text on stdin: prom_value NAME [LABEL_REGEX]
prom_value() {
  awk -v n="$1" -v f="${2:-}" '
    $1 ~ "^" n "({|$)" && (f == "" || $1 ~ f) { s += $NF; found = 1 }
    END { if (found) printf "%.6f\n", s; else print "NA" }'
}
# metric URL NAME [LABEL_REGEX]: a series from a process's /metrics.
metric() { curl -fsS --max-time 10 "$1" | prom_value "$2" "${3:-}"; }
# apiserver_metric NAME [LABEL_REGEX]
apiserver_metric() { kc get --raw /metrics | prom_value "$1" "${2:-}"; }

# Peak and current resident memory of a pid, in MiB.
vm_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
vmhwm_mib() { awk -v kb="$(vm_kb "$1" VmHWM)" 'BEGIN { printf "%.1f", kb / 1024 }'; }
vmrss_mib() { awk -v kb="$(vm_kb "$1" VmRSS)" 'BEGIN { printf "%.1f", kb / 1024 }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
# CPU seconds (user + system) a pid has used so far.
proc_cpu() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.2f\n", ($14 + $15) / t }' "/proc/$1/stat"; }

# Processes started by this script, stopped by bench_cleanup.
BENCH_STARTED=()
# bench_start NAME CMD [ARGS...]: start_daemon, remembered for cleanup.
bench_start() {
  start_daemon "$@"
  BENCH_STARTED+=("$1")
}
bench_pid() { recorded_pid "$1"; }
bench_stop() { stop_daemon "$1"; }
bench_cleanup() {
  local i
  for ((i = ${#BENCH_STARTED[@]} - 1; i >= 0; i--)); do
    stop_daemon "${BENCH_STARTED[i]}" 2>/dev/null || true
  done
  BENCH_STARTED=()
}

# Median, min and max of numbers (one per line on stdin): "median (min–max)".
summary() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "NA"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3f (%.3f–%.3f, n=%d)\n", m, v[1], v[NR], NR }'
}

# Identity of a benchmarked process: a ServiceAccount bench/NAME bound to
# cluster-admin, a kubeconfig with its token in $RESULTS/NAME.kubeconfig,
# and FlowSchemas (exempt priority level, so nothing is throttled) that make
# the API server count its requests separately:
#   apiserver_flowcontrol_dispatched_requests_total{flow_schema="bench-NAME-watch|read|write|other"}
bench_identity() {
  local name=$1 prec=$2
  kc get namespace bench >/dev/null 2>&1 || kc create namespace bench >/dev/null
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: $name, namespace: bench}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bench-$name}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: $name, namespace: bench}]
EOF
  local group verbs i=0
  for group in watch:watch read:get,list write:create,update,patch,delete,deletecollection; do
    verbs=[${group#*:}]
    kc apply -f - >/dev/null <<EOF
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: bench-$name-${group%%:*}}
spec:
  matchingPrecedence: $((prec + i))
  priorityLevelConfiguration: {name: exempt}
  rules:
  - subjects: [{kind: ServiceAccount, serviceAccount: {name: $name, namespace: bench}}]
    resourceRules:
    - {verbs: $verbs, apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}
EOF
    i=$((i + 1))
  done
  kc apply -f - >/dev/null <<EOF
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: bench-$name-other}
spec:
  matchingPrecedence: $((prec + i))
  priorityLevelConfiguration: {name: exempt}
  rules:
  - subjects: [{kind: ServiceAccount, serviceAccount: {name: $name, namespace: bench}}]
    resourceRules:
    - {verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}
    nonResourceRules:
    - {verbs: ["*"], nonResourceURLs: ["*"]}
EOF
  local token
  token=$(kc create token "$name" -n bench --duration=24h)
  cat >"$RESULTS/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster: {server: "$API", certificate-authority: "$CA"}
users:
- name: $name
  user: {token: "$token"}
contexts:
- name: bench
  context: {cluster: bench, user: $name}
current-context: bench
EOF
  chmod 600 "$RESULTS/$name.kubeconfig"
}

# How API Priority and Fairness classifies the benchmarked identities
# (BENCH_APF; bench_identity must have run first):
#   exempt  bench_identity's FlowSchemas: the exempt level, counted per verb
#           group (the default, for request counts undisturbed by queuing);
#   chart   the chart's own priority level and FlowSchemas, rendered from
#           charts/nodeimage/templates/api-priority.yaml with the controller's
#           ServiceAccount bench/nodeimage-controller and the daemon's
#           bench/ni-sim; each one's requests counted by its FlowSchema
#           (nodeimage-controller, nodeimage-daemon), in total only;
#   none    no FlowSchema of ours: both fall into the built-in
#           service-accounts schema (level workload-low) with every other
#           ServiceAccount, as with apiPriority.enabled=false; not counted
#           per identity by the API server (the controller still counts its
#           own, nodeimage_api_requests_total).
BENCH_APF=${BENCH_APF:-exempt}
apf_chart() {
  "${HELM:-$STATE/bin/helm}" template nodeimage "$SRC/charts/nodeimage" --namespace bench \
    --show-only templates/api-priority.yaml --set controller.image.repository=unused \
    --set daemon.image.repository=unused --set controller.serviceAccount.name=nodeimage-controller \
    --set daemon.serviceAccount.name=ni-sim
}
bench_priority() {
  local name g chart
  case $BENCH_APF in
    exempt) return 0 ;;
    chart | none) ;;
    *) die "BENCH_APF=$BENCH_APF: exempt, chart or none" ;;
  esac
  for name in nodeimage-controller ni-sim; do
    for g in watch read write other; do
      kc delete flowschema "bench-$name-$g" --ignore-not-found >/dev/null
    done
  done
  chart=$(apf_chart) || die "helm template of the chart's api-priority.yaml failed"
  if [[ $BENCH_APF == chart ]]; then
    kc apply -f - >/dev/null <<<"$chart"
  else
    kc delete -f - --ignore-not-found >/dev/null <<<"$chart"
  fi
}

# Requests the API server dispatched for bench_identity NAME, per verb group:
# "watch=W read=R write=X other=O total=T" (BENCH_APF=chart: "total=T" from
# the chart's FlowSchema; none: "total=0", not counted).
identity_requests() {
  local name=$1 text g v total=0 out=""
  text=$(kc get --raw /metrics | grep '^apiserver_flowcontrol_dispatched_requests_total{')
  if [[ $BENCH_APF != exempt ]]; then
    v=0
    if [[ $BENCH_APF == chart ]]; then
      g=nodeimage-daemon
      [[ $name == nodeimage-controller ]] && g=nodeimage-controller
      v=$(prom_value apiserver_flowcontrol_dispatched_requests_total "flow_schema=\"$g\"" <<<"$text")
      [[ $v == NA ]] && v=0
    fi
    echo "total=${v%.*}"
    return
  fi
  for g in watch read write other; do
    v=$(prom_value apiserver_flowcontrol_dispatched_requests_total "flow_schema=\"bench-$name-$g\"" <<<"$text")
    [[ $v == NA ]] && v=0
    v=${v%.*}
    out+="$g=$v "
    total=$((total + v))
  done
  echo "${out}total=$total"
}
# Difference of two identity_requests lines: ident_diff BEFORE AFTER
ident_diff() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    n = split(a, x, " "); split(b, y, " ")
    for (i = 1; i <= n; i++) { split(x[i], p, "="); split(y[i], q, "="); printf "%s=%d ", p[1], q[2] - p[2] }
    print "" }' | sed 's/ $//'
}

# Which code is measured: the commit (and +dirty) or the snapshot's note.
code_version() {
  if [[ -f $SRC/.snapshot-head ]]; then
    echo "snapshot $SRC of $(head -c 12 "$SRC/.snapshot-head")"
  else
    (cd "$SRC" && echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo '+dirty')")
  fi
}
# Installs the CRDs of SRC and waits until they are Established.
install_crds() {
  kc apply --server-side --force-conflicts -f "$SRC/crds/yaml" >/dev/null
  kc wait --for=condition=Established --timeout=60s -f "$SRC/crds/yaml" >/dev/null
}

# Line for the results file: "KEY value  # load: 1m 5m 15m"
record() {
  local key=$1
  shift
  printf '%-44s %s   # load %s, %s\n' "$key" "$*" "$(load_avg)" "$(date -u +%H:%M:%SZ)" | tee -a "$RESULTS_FILE"
}

#!/usr/bin/env bash
# docs/migration.md (OpenKruise: way B, then A) against a real kruise-manager
# and OpenKruise's real chart, on a local cluster of its own.
#
#   tests/migration/real-kruise.sh KRUISE_MANAGER_BIN
#
# KRUISE_MANAGER_BIN is `go build -o <it> .` in a checkout of
# openkruise/kruise (main.go at its root). Needs helm and OpenKruise's chart
# (openkruise/charts, versions/kruise/<version>), which brings the CRDs. Not part
# of `make test` or CI: OpenKruise's own Go module is not served by the module
# proxy those use, so they cannot build kruise-manager.
#
# What it does:
#   1. starts a cluster with tests/cluster/up.sh in its own state dir, on its
#      own ports (below), and `helm install`s OpenKruise's chart: CRDs,
#      namespaces, RBAC, the kruise-controller-manager Deployment and
#      kruise-daemon DaemonSet (their pods never run: this cluster has no
#      scheduler or kubelet), the Service kruise-webhook-service and both
#      fail-closed webhook configurations;
#   2. runs kruise-manager out of cluster in place of the Deployment's pods,
#      with the Deployment's --feature-gates, and sends the Service's
#      ClusterIP:443 to it with an iptables DNAT rule (as kube-proxy would),
#      so the API server calls the webhooks exactly as the chart registers
#      them. kruise-manager admits ImagePullJobs and an ImageListPullJob and
#      writes their NodeImage entries. There is no kruise-daemon, so no
#      status moves: that is expected;
#   3. the old guide's path, in a sub-scenario: the Deployment scaled to 0
#      (kruise-manager stopped) with the configurations in place must make
#      Pod create, delete and eviction fail; then it is scaled back;
#   4. follows docs/migration.md way B step by step (a step the guide no
#      longer says fails the run), with real `helm upgrade`s, and starts
#      nodeimage (tests/nodeimage.sh start);
#   5. checks: the same jobs and NodeImages (UIDs, job specs, entries), every
#      job finished by nodeimage with its images on the nodes, Pods still
#      admitted (create, delete, eviction); a later `helm upgrade` of
#      OpenKruise and the guide's B.3 after it; then way A (A.1's check,
#      refusing with a CloneSet present and passing without; A.3, A.4);
#   6. last, the earlier guide's uninstall (keep annotation, then
#      `helm uninstall` without A.3) must delete the CRDs.
#
# Prints "RESULT: PASS|FAIL <check>" lines and "N passed, M failed" last;
# exits non-zero when a check failed. Everything it started is stopped at the
# end (the DNAT rule, then tests/cluster/down.sh on its state), failure or
# not; the daemons' logs and the object snapshots are copied to
# $NODEIMAGE_STATE-logs first.
#
# Environment (the defaults keep clear of the main cluster's ports):
#   KRUISE_CHART          OpenKruise's chart (default
#                         <repo>/../kruise-charts/versions/kruise/next, the
#                         chart matching kruise v1.9's webhook paths)
#   KRUISE_VERSION        only printed (e.g. v1.9.0)
#   HELM                  helm binary (default: helm on PATH, else
#                         $NODEIMAGE_STATE/bin/helm; tests/chart.sh
#                         --install-helm builds one)
#   NODEIMAGE_STATE       <repo>/../kruise-state
#   NODEIMAGE_API_PORT 26443, NODEIMAGE_ETCD_PORT 22379 (and 22380),
#   NODEIMAGE_REGISTRY_PORT 5100, NODEIMAGE_AUTH_REGISTRY_PORT 5101,
#   NODEIMAGE_CONTROLLER_HEALTH 127.0.0.1:28080,
#   NODEIMAGE_DAEMON_HEALTH_BASE 28100 (daemon i on 28100+i),
#   KRUISE_WEBHOOK_PORT 29876 (kruise-manager binds it on 0.0.0.0: its code
#     does), KRUISE_METRICS_ADDR 127.0.0.1:28090, KRUISE_HEALTH_ADDR
#     127.0.0.1:28091 (its pprof is off). The cluster's containerds use unix
#     sockets and random loopback stream ports; its controller-manager serves
#     no port.
#   KEEP_CLUSTER=1        leave the cluster running at the end (debugging)
set -Eeuo pipefail

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; }
[[ $# -eq 1 ]] || {
  usage
  exit 2
}
KRUISE_MANAGER_BIN=$(realpath -e "$1")
[[ -x $KRUISE_MANAGER_BIN ]] || {
  echo "not executable: $KRUISE_MANAGER_BIN" >&2
  exit 2
}

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PARENT=$(dirname "$REPO_ROOT")
export NODEIMAGE_STATE=${NODEIMAGE_STATE:-$PARENT/kruise-state}
export NODEIMAGE_API_PORT=${NODEIMAGE_API_PORT:-26443}
export NODEIMAGE_ETCD_PORT=${NODEIMAGE_ETCD_PORT:-22379}
export NODEIMAGE_REGISTRY_PORT=${NODEIMAGE_REGISTRY_PORT:-5100}
export NODEIMAGE_AUTH_REGISTRY_PORT=${NODEIMAGE_AUTH_REGISTRY_PORT:-5101}
export NODEIMAGE_CONTROLLER_HEALTH=${NODEIMAGE_CONTROLLER_HEALTH:-127.0.0.1:28080}
export NODEIMAGE_DAEMON_HEALTH_BASE=${NODEIMAGE_DAEMON_HEALTH_BASE:-28100}
export NODEIMAGE_NODES=${NODEIMAGE_NODES:-3}
KRUISE_CHART=${KRUISE_CHART:-$PARENT/kruise-charts/versions/kruise/next}
KRUISE_WEBHOOK_PORT=${KRUISE_WEBHOOK_PORT:-29876}
KRUISE_METRICS_ADDR=${KRUISE_METRICS_ADDR:-127.0.0.1:28090}
KRUISE_HEALTH_ADDR=${KRUISE_HEALTH_ADDR:-127.0.0.1:28091}
GUIDE=$REPO_ROOT/docs/migration.md

# shellcheck source=../cluster/lib.sh
. "$REPO_ROOT/tests/cluster/lib.sh"
check_state_path
[[ -f $KRUISE_CHART/Chart.yaml ]] || die "no OpenKruise chart at KRUISE_CHART=$KRUISE_CHART"
command -v jq >/dev/null || die "jq is needed (the guide's webhook step uses it)"
command -v iptables >/dev/null || die "iptables is needed (the webhook Service's ClusterIP)"
if [[ -z ${HELM:-} ]]; then
  HELM=$(command -v helm || true)
  if [[ -z $HELM && -x $NODEIMAGE_STATE/bin/helm ]]; then HELM=$NODEIMAGE_STATE/bin/helm; fi
fi
[[ -n $HELM && -x $HELM ]] || die "no helm: set HELM (tests/chart.sh --install-helm builds one)"

T0=$(date +%s)
PASSED=0 FAILED=0
pass() {
  echo "RESULT: PASS $*"
  PASSED=$((PASSED + 1))
}
fail() {
  echo "RESULT: FAIL $*"
  FAILED=$((FAILED + 1))
}
say() { printf '\n### %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
oneline() { tr '\n' ' ' <<<"$1" | cut -c1-"${2:-240}"; }

# The guide's words for a step, echoed; a step the guide no longer says is a
# failure (the test follows the guide, not a copy of it).
GUIDE_TEXT=$(cat "$GUIDE")
GUIDE_FLAT=$(sed 's/^ *//' <<<"$GUIDE_TEXT")
guide() {
  local words=$1
  if [[ $GUIDE_TEXT == *"$words"* ]]; then
    printf '\n=== docs/migration.md: %s\n' "$words"
  else
    fail "docs/migration.md no longer says: $words"
  fi
}
# guide_run CMD: the guide shows CMD verbatim (compared line by line without
# the leading indentation); run it from the repository's root.
guide_run() {
  local cmd=$1 flat
  flat=$(sed 's/^ *//' <<<"$cmd")
  if [[ $GUIDE_FLAT != *"$flat"* ]]; then
    fail "docs/migration.md no longer shows the command: $cmd"
    return 1
  fi
  printf '$ %s\n' "$cmd"
  (cd "$REPO_ROOT" && bash -Eeo pipefail -c "$cmd")
}

# ---------------------------------------------------------------------------
# Ports: the cluster's (up.sh), nodeimage's (nodeimage.sh), kruise-manager's
# ---------------------------------------------------------------------------
PORTS=("$NODEIMAGE_API_PORT" "$NODEIMAGE_ETCD_PORT" "$((NODEIMAGE_ETCD_PORT + 1))"
  "$NODEIMAGE_REGISTRY_PORT" "$NODEIMAGE_AUTH_REGISTRY_PORT" "${NODEIMAGE_CONTROLLER_HEALTH##*:}"
  "$KRUISE_WEBHOOK_PORT" "${KRUISE_METRICS_ADDR##*:}" "${KRUISE_HEALTH_ADDR##*:}")
for ((i = 1; i <= NODEIMAGE_NODES; i++)); do PORTS+=("$((NODEIMAGE_DAEMON_HEALTH_BASE + i))"); done
DNAT_CHAIN=NODEIMAGE-KRUISE-$NODEIMAGE_API_PORT
KDIR=$NODEIMAGE_STATE/kruise

dnat_down() {
  while iptables -w -t nat -D OUTPUT -j "$DNAT_CHAIN" 2>/dev/null; do :; done
  iptables -w -t nat -F "$DNAT_CHAIN" 2>/dev/null || true
  iptables -w -t nat -X "$DNAT_CHAIN" 2>/dev/null || true
}

# ---------------------------------------------------------------------------
# Clean-up: always
# ---------------------------------------------------------------------------
finish() {
  local rc=$?
  trap - EXIT
  set +e
  if [[ -d $LOGS ]]; then
    mkdir -p "$NODEIMAGE_STATE-logs"
    cp -f "$LOGS"/*.log "$NODEIMAGE_STATE-logs/" 2>/dev/null
    cp -f "$KDIR"/*.json "$KDIR"/*.yaml "$NODEIMAGE_STATE-logs/" 2>/dev/null
  fi
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    log "KEEP_CLUSTER=1: leaving the cluster in $NODEIMAGE_STATE running (stop it: tests/cluster/down.sh with that NODEIMAGE_STATE, and iptables -t nat -X $DNAT_CHAIN after removing its OUTPUT jump)"
  else
    dnat_down
    "$REPO_ROOT/tests/cluster/down.sh" >&2
  fi
  if ((rc != 0)); then fail "the run stopped early (exit $rc); logs in $NODEIMAGE_STATE-logs"; fi
  echo "real-kruise.sh took $(($(date +%s) - T0)) s; logs in $NODEIMAGE_STATE-logs"
  echo "$PASSED passed, $FAILED failed"
  if ((FAILED > 0)); then exit 1; fi
  exit 0
}
trap finish EXIT
trap 'exit 130' INT TERM

# A previous run's cluster (same state dir) goes first: every run starts empty.
dnat_down
if [[ -e $STATE_MARKER ]]; then "$REPO_ROOT/tests/cluster/down.sh" >&2; fi
rm -rf "$NODEIMAGE_STATE-logs"
for p in "${PORTS[@]}"; do
  if port_open "$p"; then die "127.0.0.1:$p is in use: choose other ports (see the header of $0)"; fi
done

say "cluster (state $NODEIMAGE_STATE, apiserver :$NODEIMAGE_API_PORT, registries :$NODEIMAGE_REGISTRY_PORT :$NODEIMAGE_AUTH_REGISTRY_PORT)"
ENV_FILE=$("$REPO_ROOT/tests/cluster/up.sh" | tail -n 1)
# shellcheck disable=SC1090
. "$ENV_FILE"
read -r -a NODES <<<"$NODEIMAGE_NODES"
kubectl() { "$KUBECTL" --request-timeout=40s "$@"; }
eval "helm() { \"$HELM\" \"\$@\"; }"
export -f kubectl helm
export KUBECTL KUBECONFIG
mkdir -p "$KDIR"

# ---------------------------------------------------------------------------
# OpenKruise, installed with its chart
# ---------------------------------------------------------------------------
say "helm install kruise $KRUISE_CHART ($(sed -n 's/^appVersion: //p' "$KRUISE_CHART/Chart.yaml"))"
# The chart's defaults, with the gates of this scenario and the webhook port
# kruise-manager listens on here.
cat >"$KDIR/values-initial.yaml" <<EOF
featureGates: "ImagePullJobGate=true,PodUnavailableBudgetDeleteGate=false"
manager:
  webhook:
    port: $KRUISE_WEBHOOK_PORT
EOF
helm install kruise "$KRUISE_CHART" -f "$KDIR/values-initial.yaml" >"$KDIR/helm-install.txt"
kubectl wait --for=condition=Established --timeout=60s crd --all >/dev/null
note "release: $(helm list -o json | jq -r '.[] | "\(.name) \(.chart) \(.status)"')"
note "webhooks: $(kubectl get mutatingwebhookconfiguration kruise-mutating-webhook-configuration -o jsonpath='{.webhooks[*].name}') $(kubectl get validatingwebhookconfiguration kruise-validating-webhook-configuration -o jsonpath='{.webhooks[*].name}')"

# The Service's ClusterIP:443 -> kruise-manager, as kube-proxy would send it
# to the Deployment's pods.
SVC_IP=$(kubectl get service -n kruise-system kruise-webhook-service -o jsonpath='{.spec.clusterIP}')
[[ $SVC_IP =~ ^[0-9.]+$ ]] || die "kruise-webhook-service has no ClusterIP"
iptables -w -t nat -N "$DNAT_CHAIN"
iptables -w -t nat -A "$DNAT_CHAIN" -d "$SVC_IP/32" -p tcp --dport 443 -j DNAT --to-destination "127.0.0.1:$KRUISE_WEBHOOK_PORT"
iptables -w -t nat -I OUTPUT 1 -j "$DNAT_CHAIN"
note "kruise-webhook-service $SVC_IP:443 -> 127.0.0.1:$KRUISE_WEBHOOK_PORT (iptables chain $DNAT_CHAIN)"

# ---------------------------------------------------------------------------
# kruise-manager, out of cluster, as the Deployment says
# ---------------------------------------------------------------------------
export POD_NAMESPACE=kruise-system WEBHOOK_PORT=$KRUISE_WEBHOOK_PORT WEBHOOK_CERT_DIR=$KDIR/certs
unset WEBHOOK_HOST
GATES=""
deployment_gates() {
  kubectl get deployment -n kruise-system kruise-controller-manager -o json 2>/dev/null |
    jq -r '.spec.template.spec.containers[0].args[] | select(startswith("--feature-gates=")) | ltrimstr("--feature-gates=")'
}
deployment_replicas() {
  kubectl get deployment -n kruise-system kruise-controller-manager -o jsonpath='{.spec.replicas}' 2>/dev/null || echo 0
}
start_kruise() { # start_kruise GATES
  GATES=$1
  KRUISE_LOG_FROM=1
  if [[ -f $LOGS/kruise-manager.log ]]; then KRUISE_LOG_FROM=$(($(wc -l <"$LOGS/kruise-manager.log") + 1)); fi
  start_daemon kruise-manager "$KRUISE_MANAGER_BIN" --kubeconfig="$KUBECONFIG" \
    --enable-leader-election=false --metrics-addr="$KRUISE_METRICS_ADDR" \
    --health-probe-addr="$KRUISE_HEALTH_ADDR" --enable-pprof=false \
    --protection-log-path="$KDIR/log" --feature-gates="$GATES" --v=2
  wait_until 180 "kruise-manager ready" kruise-manager curl -fsS "http://$KRUISE_HEALTH_ADDR/readyz"
  note "kruise-manager runs with --feature-gates=$GATES"
}
# follow_deployment: kruise-manager runs while the Deployment has replicas,
# with its --feature-gates (what rolling the Deployment would do).
follow_deployment() {
  local want replicas
  replicas=$(deployment_replicas)
  if [[ -z $replicas || $replicas == 0 ]]; then
    if daemon_alive kruise-manager; then
      note "kruise-controller-manager has no replicas (or is gone): kruise-manager stops"
      stop_daemon kruise-manager
    fi
    return 0
  fi
  want=$(deployment_gates)
  if daemon_alive kruise-manager && [[ $want == "$GATES" ]]; then return 0; fi
  stop_daemon kruise-manager
  start_kruise "$want"
}
kruise_log() { tail -n +"$KRUISE_LOG_FROM" "$LOGS/kruise-manager.log"; }
hooks_served() { # the configurations carry kruise-manager's CA
  [[ -n $(kubectl get validatingwebhookconfiguration kruise-validating-webhook-configuration -o jsonpath='{.webhooks[0].clientConfig.caBundle}') ]]
}

say "kruise-manager ${KRUISE_VERSION:-} ($KRUISE_MANAGER_BIN), out of cluster in place of the Deployment's pods"
follow_deployment
wait_until 60 "kruise-manager to put its CA into the webhook configurations" kruise-manager hooks_served
image_controllers() { # image controllers this kruise-manager run started
  kruise_log | grep '"Starting Controller"' | grep -o '"controller"="\(nodeimage\|imagepulljob\|imagelistpulljob\)-controller"' | sort -u | tr '\n' ' '
}
# Its controllers start in two waves (the second once slower caches have
# synced, ~15 s later): wait until no new one started for 25 s.
controllers_settled() {
  local n last=-1 same=0
  for _ in $(seq 1 90); do
    n=$(kruise_log | grep -c '"Starting Controller"' || true)
    if ((n > 0 && n == last)); then same=$((same + 1)); else same=0; fi
    ((same >= 25)) && return 0
    last=$n
    sleep 1
  done
  return 1
}
controllers_settled || die "kruise-manager's controllers did not settle"
if [[ $(image_controllers) == *nodeimage-controller* ]]; then
  note "kruise-manager started its nodeimage-controller, imagepulljob-controller and imagelistpulljob-controller"
else
  fail "kruise-manager's log shows no nodeimage-controller (expected with KruiseDaemon on)"
fi

# ---------------------------------------------------------------------------
# Pods: create, delete, evict
# ---------------------------------------------------------------------------
PODS_NS=migrate-pods
kubectl create namespace "$PODS_NS" >/dev/null
POD_SEQ=0
pod_create() { # pod_create NAME: prints the API server's answer
  kubectl create -f - 2>&1 <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $PODS_NS}
spec:
  containers: [{name: c, image: $NODEIMAGE_REGISTRY/test:v1}]
EOF
}
pod_delete() { kubectl delete pod -n "$PODS_NS" "$1" --wait=false 2>&1; }
pod_evict() {
  kubectl create --raw "/api/v1/namespaces/$PODS_NS/pods/$1/eviction" -f - 2>&1 <<EOF
{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "$1", "namespace": "$PODS_NS"}}
EOF
}
# pods_admitted: a Pod can be created and deleted, and another created and
# evicted. Prints what the API server said; true when all four worked.
pods_admitted() {
  local a b out ok=0
  POD_SEQ=$((POD_SEQ + 1))
  a=admit-$POD_SEQ-a b=admit-$POD_SEQ-b
  for step in "create $a" "delete $a" "create $b" "evict $b"; do
    set -- $step
    if out=$("pod_$1" "$2"); then
      note "pod $1 $2: ok"
    else
      note "pod $1 $2: REFUSED: $(tr '\n' ' ' <<<"$out")"
      ok=1
    fi
  done
  return $ok
}

say "Pods with kruise-manager running"
if pods_admitted; then pass "Pods are admitted while kruise-manager serves its webhooks"; else fail "Pods are admitted while kruise-manager serves its webhooks"; fi

# ---------------------------------------------------------------------------
# Work for OpenKruise: jobs it admits and starts
# ---------------------------------------------------------------------------
NS=kruise-migrate
say "ImagePullJobs and an ImageListPullJob, admitted and started by kruise-manager"
# kruise-manager creates a NodeImage per Ready Node (30 s after it became
# Ready). A job created before they exist matches no node and completes at
# once with nothing to do (seen in a first run): wait for them.
nodeimages_made() { [[ $(kubectl get nodeimages -o name | wc -l) == "${#NODES[@]}" ]]; }
wait_until 120 "kruise-manager to create a NodeImage per node" kruise-manager nodeimages_made
kubectl create namespace "$NS" >/dev/null
kubectl create secret docker-registry regcred -n "$NS" --docker-server="$NODEIMAGE_AUTH_REGISTRY" \
  --docker-username="$NODEIMAGE_AUTH_USER" --docker-password="$NODEIMAGE_AUTH_PASSWORD" >/dev/null
IMG_ALL=$NODEIMAGE_REGISTRY/test:v1
IMG_AUTH=$NODEIMAGE_AUTH_REGISTRY/test:v2
IMG_NEVER=$NODEIMAGE_REGISTRY/multi:v1
IMG_LIST=("$NODEIMAGE_REGISTRY/test:v3" "$NODEIMAGE_REGISTRY/big:v1")
kubectl apply -f - <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: all-nodes, namespace: $NS}
spec:
  image: $IMG_ALL
  parallelism: 3
  completionPolicy: {type: Always}
---
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: with-secret, namespace: $NS}
spec:
  image: $IMG_AUTH
  pullSecrets: [regcred]
  parallelism: 3
  completionPolicy: {type: Always, activeDeadlineSeconds: 1800}
---
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: never-node-2, namespace: $NS}
spec:
  image: $IMG_NEVER
  selector: {names: [${NODES[1]}]}
  completionPolicy: {type: Never}
---
apiVersion: apps.kruise.io/v1alpha1
kind: ImageListPullJob
metadata: {name: list, namespace: $NS}
spec:
  images: ["${IMG_LIST[0]}", "${IMG_LIST[1]}"]
  parallelism: 3
  completionPolicy: {type: Always}
EOF

ipj_uids() { kubectl get imagepulljobs -n "$NS" -o json | jq -r '.items[].metadata.uid'; }
# Number of NodeImages with an entry owned by UID.
entries_of() {
  kubectl get nodeimages -o json | jq --arg u "$1" \
    '[.items[] | select([.spec.images // {} | .[].tags[]? | .ownerReferences[]?.uid] | index($u))] | length'
}
kruise_started_all() {
  local n uid want
  n=$(kubectl get imagepulljobs -n "$NS" -o name | wc -l)
  ((n == 5)) || return 1 # 3 + the list's 2 children
  for uid in $(ipj_uids); do
    want=${#NODES[@]}
    [[ $(kubectl get imagepulljobs -n "$NS" -o json | jq -r --arg u "$uid" '.items[] | select(.metadata.uid == $u) | .metadata.name') == never-node-2 ]] && want=1
    (($(entries_of "$uid") == want)) || return 1
  done
  [[ $(kubectl get imagepulljobs -n "$NS" -o json | jq '[.items[] | select(.metadata.finalizers // [] | index("apps.kruise.io/deletion-protection"))] | length') == 5 ]]
}
wait_until 240 "kruise-manager to create NodeImages and write every job's entries" kruise-manager kruise_started_all
pass "kruise-manager created the NodeImages and wrote the entries of all 5 ImagePullJobs (3 + the list's 2 children)"
note "OpenKruise's view (no kruise-daemon here, so nothing progresses, as expected):"
kubectl get imagepulljobs -n "$NS" -o json |
  jq -r '.items[] | "      \(.metadata.name): desired=\(.status.desired) active=\(.status.active) succeeded=\(.status.succeeded) message=\(.status.message)"'
note "secret copies in kruise-daemon-config: $(kubectl get secrets -n kruise-daemon-config -o name | tr '\n' ' ')"

snapshot() { # snapshot FILE: jobs (name, uid, spec) and NodeImages (name, uid, entries)
  {
    kubectl get imagepulljobs,imagelistpulljobs -n "$NS" -o json |
      jq -S '[.items[] | {kind, name: .metadata.name, uid: .metadata.uid, spec}] | sort_by(.kind, .name)'
    kubectl get nodeimages -o json |
      jq -S '[.items[] | {name: .metadata.name, uid: .metadata.uid,
        entries: [.spec.images // {} | to_entries[] | .key as $i | .value.tags[] | {image: $i, tag, owners: [.ownerReferences[]?.uid]}]}] | sort_by(.name)'
  } | jq -s -S '{jobs: .[0], nodeimages: .[1]}' >"$1"
}
snapshot "$KDIR/before.json"
note "snapshot: $(jq '.jobs | length' "$KDIR/before.json") jobs, $(jq '[.nodeimages[].entries[]] | length' "$KDIR/before.json") NodeImage entries"

# ---------------------------------------------------------------------------
# The old guide's path: kruise-manager scaled to 0, configurations left
# ---------------------------------------------------------------------------
say "sub-scenario: the old guide's step"
pod_create victim-delete >/dev/null && pod_create victim-evict >/dev/null ||
  die "could not create the victim pods"
OLD_STEP="kubectl -n kruise-system scale deploy kruise-controller-manager --replicas=0"
printf '$ %s\n' "$OLD_STEP"
bash -c "$OLD_STEP"
follow_deployment
if out=$(pod_create old-path); then
  fail "the old path: a Pod was created with the fail-closed webhooks left without a server"
else
  pass "the old path refuses Pod creation: $(oneline "$out")"
fi
if out=$(pod_delete victim-delete); then
  fail "the old path: a Pod was deleted with the fail-closed webhooks left without a server"
else
  pass "the old path refuses Pod deletion: $(oneline "$out")"
fi
if out=$(pod_evict victim-evict); then
  fail "the old path: a Pod was evicted with the fail-closed webhooks left without a server"
else
  pass "the old path refuses eviction: $(oneline "$out")"
fi
if pods_admitted >/dev/null; then
  fail "the Pod admission check does not notice the old path"
else
  pass "the Pod admission check (used at the end) fails on the old path"
fi
note "scaled back up, as the guide now says to when this happened"
kubectl -n kruise-system scale deploy kruise-controller-manager --replicas=2
follow_deployment
pod_delete victim-delete >/dev/null || true
pod_delete victim-evict >/dev/null || true

# ---------------------------------------------------------------------------
# docs/migration.md, way B, step by step
# ---------------------------------------------------------------------------
say "docs/migration.md, OpenKruise way B"
guide "Never stop kruise-manager while its webhook configurations exist."
guide "B. You keep OpenKruise for other features: keep kruise-manager running
with its image work switched off."
guide "1. **Feature gates.** \`ImagePullJobGate=false\` is not enough"
DOC_GATES=$(sed -n 's/^ *featureGates: "\(.*\)"$/\1/p' "$GUIDE" | head -n 1)
[[ -n $DOC_GATES ]] || die "no featureGates line in $GUIDE"
guide "keep any other gate you set in the same string"
# The values file of this installation, with the guide's gates (and this
# run's other gate kept, as the guide says).
cat >"$KDIR/kruise-values.yaml" <<EOF
featureGates: "$DOC_GATES,PodUnavailableBudgetDeleteGate=false"
manager:
  webhook:
    port: $KRUISE_WEBHOOK_PORT
EOF
note "kruise-values.yaml: $(head -n 1 "$KDIR/kruise-values.yaml")"
HELM_UPGRADE="helm upgrade kruise openkruise/kruise -f kruise-values.yaml"
guide "$HELM_UPGRADE"
kruise_upgrade() { # the guide's upgrade, with this run's chart and values file
  printf '$ %s   (chart %s, values %s)\n' "$HELM_UPGRADE" "$KRUISE_CHART" "$KDIR/kruise-values.yaml"
  helm upgrade kruise "$KRUISE_CHART" -f "$KDIR/kruise-values.yaml" >"$KDIR/helm-upgrade.txt"
  follow_deployment
}
kruise_upgrade
if [[ $(deployment_gates) == "$DOC_GATES,PodUnavailableBudgetDeleteGate=false" ]]; then
  pass "helm upgrade put the guide's gates on the kruise-controller-manager Deployment"
else
  fail "the Deployment's gates after the upgrade: $(deployment_gates)"
fi
if kubectl get daemonset -n kruise-system kruise-daemon >/dev/null 2>&1; then
  fail "the chart still renders the kruise-daemon DaemonSet with KruiseDaemon=false"
else
  pass "with KruiseDaemon=false the upgrade removed the kruise-daemon DaemonSet"
fi
controllers_settled || die "kruise-manager's controllers did not settle"
if [[ -n $(image_controllers) ]]; then
  fail "with the guide's gates kruise-manager still starts image controllers: $(image_controllers)"
else
  pass "with the guide's gates kruise-manager starts none of nodeimage-, imagepulljob-, imagelistpulljob-controller"
fi

cat >"$KDIR/probe-ipj.yaml" <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: probe, namespace: $NS}
spec:
  image: $IMG_ALL
  completionPolicy: {type: Always}
EOF
if out=$(kubectl create --dry-run=server -f "$KDIR/probe-ipj.yaml" 2>&1); then
  fail "with the gates off and the image webhooks in place, an ImagePullJob is still admitted"
else
  pass "the gates off, the image webhooks still in place refuse ImagePullJobs, as the guide warns: $(oneline "$out")"
fi

guide "2. **Webhooks.** Remove the six image webhooks."
REMOVE_HOOKS='for kind in mutating validating; do
  kubectl get ${kind}webhookconfiguration kruise-${kind}-webhook-configuration -o json |
    jq '"'"'.metadata.annotations.template = "" | .webhooks |= map(select([.rules[].resources[]] | any(. == "imagepulljobs" or . == "imagelistpulljobs" or . == "nodeimages") | not))'"'"' |
    kubectl replace -f -
done'
remove_hooks() {
  for _ in 1 2 3; do
    guide_run "$REMOVE_HOOKS" && return 0
    note "(a conflict: kruise-manager wrote in between; the guide says to run it again)"
    sleep 1
  done
  return 1
}
image_hooks() {
  {
    kubectl get mutatingwebhookconfiguration kruise-mutating-webhook-configuration -o jsonpath='{.webhooks[*].name}'
    echo
    kubectl get validatingwebhookconfiguration kruise-validating-webhook-configuration -o jsonpath='{.webhooks[*].name}'
  } | tr ' ' '\n' | grep -E 'imagepulljob|imagelistpulljob|nodeimage' | tr '\n' ' ' || true
}
guide "Deleting them from the list
   is not enough either"
note "first what the guide warns about: the entries dropped, the template annotation left as it is"
for kind in mutating validating; do
  kubectl get "${kind}webhookconfiguration" "kruise-${kind}-webhook-configuration" -o json |
    jq '.webhooks |= map(select([.rules[].resources[]] | any(. == "imagepulljobs" or . == "imagelistpulljobs" or . == "nodeimages") | not))' |
    kubectl replace -f - >/dev/null || true
done
sleep 10
back=$(image_hooks)
if [[ -n $back ]]; then
  pass "kruise-manager put the dropped entries back from its template annotation within 10 s: $back"
else
  fail "with only the entries dropped, kruise-manager left them out: the guide's warning would be wrong"
fi
remove_hooks || fail "the guide's webhook removal failed"
note "waiting 70 s: kruise-manager re-syncs its configurations every minute"
sleep 70
left=$(image_hooks)
if [[ -z $left ]]; then
  pass "the image webhooks stay removed after kruise-manager's re-sync; left: $(kubectl get mutatingwebhookconfiguration kruise-mutating-webhook-configuration -o jsonpath='{.webhooks[*].name}') $(kubectl get validatingwebhookconfiguration kruise-validating-webhook-configuration -o jsonpath='{.webhooks[*].name}')"
else
  fail "kruise-manager brought image webhooks back: $left"
fi
guide 'Check with
   `kubectl create --dry-run=server -f <an ImagePullJob>`'
if out=$(kubectl create --dry-run=server -f "$KDIR/probe-ipj.yaml" 2>&1); then
  pass "an ImagePullJob is admitted again (dry run): $out"
else
  fail "an ImagePullJob is still refused: $out"
fi

say "docs/migration.md step 2"
guide "## 2. Make the CRDs nodeimage's"
guide "annotate them as in A.2 now"
guide_run "kubectl annotate crd imagepulljobs.apps.kruise.io imagelistpulljobs.apps.kruise.io nodeimages.apps.kruise.io helm.sh/resource-policy=keep"
CRD_STEP="helm show crds charts/nodeimage | kubectl apply --server-side --force-conflicts -f -"
guide_run "$CRD_STEP"

say "docs/migration.md step 3"
guide "## 3. Install nodeimage"
guide "After B (kruise-manager keeps running, its image work
off), install with \`--set takeOver=true\`."
note "(here: tests/nodeimage.sh start, nodeimage's controller and one daemon per node as processes)"
"$REPO_ROOT/tests/nodeimage.sh" start >&2

# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------
say "checks after the migration"
job_done() { # job_done NAME: Always jobs complete, the Never one succeeds
  local j
  j=$(kubectl get imagepulljob -n "$NS" "$1" -o json) || return 1
  if [[ $1 == never-node-2 ]]; then
    [[ $(jq '.status.succeeded // 0' <<<"$j") == 1 ]]
  else
    jq -e '.status.completionTime != null and .status.desired > 0 and .status.succeeded == .status.desired' <<<"$j" >/dev/null
  fi
}
# finished NAME: the job has come to an end, whichever way.
finished() {
  local j
  j=$(kubectl get imagepulljob -n "$NS" "$1" -o json) || return 1
  if [[ $1 == never-node-2 ]]; then
    jq -e '(.status.succeeded // 0) + (.status.failed // 0) >= 1' <<<"$j" >/dev/null
  else
    jq -e '.status.completionTime != null' <<<"$j" >/dev/null
  fi
}
list_done() {
  kubectl get imagelistpulljob -n "$NS" list -o json |
    jq -e --argjson n "${#IMG_LIST[@]}" '.status.completionTime != null and .status.succeeded == $n' >/dev/null
}
all_finished() {
  local n
  for n in $(kubectl get imagepulljobs -n "$NS" -o jsonpath='{.items[*].metadata.name}'); do
    finished "$n" || return 1
  done
  list_done
}
if (wait_until 420 "nodeimage to bring every job to an end" controller all_finished); then :; else
  fail "nodeimage did not bring every job OpenKruise had started to an end within 420 s"
fi
# A job OpenKruise was running with pullSecrets: a node may try before the
# controller has added its own copy of the secret (nodeimage's daemon does
# not use OpenKruise's copy), and the new version the controller then gives
# the job's tags makes the nodes pull again with it: the job succeeds, as
# the guide says.
guide "the nodes pull
    again with its copy: the job succeeds on every node"
if job_done with-secret; then
  pass "the pull-secret job OpenKruise had started succeeded on every node under nodeimage, as the guide says"
else
  fail "the pull-secret job OpenKruise had started did not succeed: $(kubectl get imagepulljob -n "$NS" with-secret -o json | jq -c .status)"
fi
for n in all-nodes never-node-2; do
  if job_done "$n"; then
    pass "the job $n OpenKruise had started succeeded on every node it selects, under nodeimage"
  else
    fail "the job $n OpenKruise had started did not succeed under nodeimage: $(kubectl get imagepulljob -n "$NS" "$n" -o json | jq -c '{desired: .status.desired, succeeded: .status.succeeded, failed: .status.failed, message: .status.message, failedNodes: .status.failedNodes}')"
  fi
done
if list_done; then
  pass "the ImageListPullJob OpenKruise had started completed with both images, under nodeimage"
else
  fail "the ImageListPullJob did not complete with both images: $(kubectl get imagelistpulljob -n "$NS" list -o json | jq -c .status)"
fi
kubectl get imagepulljobs,imagelistpulljobs -n "$NS" -o json |
  jq -r '.items[] | "      \(.kind) \(.metadata.name): desired=\(.status.desired) succeeded=\(.status.succeeded) failed=\(.status.failed) completed=\(.status.completed) message=\(.status.message) finalizers=\(.metadata.finalizers)"'

snapshot "$KDIR/after.json"
lost=$(jq -n --slurpfile a "$KDIR/before.json" --slurpfile b "$KDIR/after.json" \
  '[$a[0].jobs[] as $j | select([$b[0].jobs[] | select(.uid == $j.uid and .name == $j.name)] | length == 0) | $j.name]')
# A spec keeps every field OpenKruise admitted, with the same value; fields
# it did not set may have been defaulted since (the CRD's defaults).
SUBSET='def sub($a; $b): if ($a | type) == "object" then ($b | type) == "object" and all($a | keys[]; . as $k | sub($a[$k]; $b[$k])) else $a == $b end;'
changed=$(jq -n --slurpfile a "$KDIR/before.json" --slurpfile b "$KDIR/after.json" \
  "$SUBSET"' [$a[0].jobs[] as $j | $b[0].jobs[] | select(.uid == $j.uid and (sub($j.spec; .spec) | not)) | .name]')
added=$(jq -r -n --slurpfile a "$KDIR/before.json" --slurpfile b "$KDIR/after.json" \
  '[$a[0].jobs[] as $j | $b[0].jobs[] | select(.uid == $j.uid and .spec != $j.spec) | "\(.name): \([.spec | paths(scalars) | map(tostring) | join(".")] - [$j.spec | paths(scalars) | map(tostring) | join(".")] | join(","))"] | join("; ")')
if [[ $lost == "[]" && $changed == "[]" ]]; then
  pass "the same $(jq '.jobs | length' "$KDIR/before.json") jobs exist (same UIDs), every spec field OpenKruise admitted unchanged"
  [[ -z $added ]] || note "fields defaulted since: $added"
else
  fail "jobs lost: $lost; specs changed: $changed"
  diff <(jq -S .jobs "$KDIR/before.json") <(jq -S .jobs "$KDIR/after.json") | head -n 40 || true
fi
ni_lost=$(jq -n --slurpfile a "$KDIR/before.json" --slurpfile b "$KDIR/after.json" '
  [$a[0].nodeimages[] as $n | ($b[0].nodeimages[] | select(.name == $n.name)) as $m
   | if ($m | not) or $m.uid != $n.uid then "\($n.name): gone or recreated"
     else ($n.entries[] as $e | select([$m.entries[] | select(.image == $e.image and .tag == $e.tag and ((.owners - $e.owners) | length) >= 0 and ($e.owners - .owners) == [])] | length == 0)
           | "\($n.name): \($e.image):\($e.tag)") end]')
if [[ $ni_lost == "[]" ]]; then
  pass "the same NodeImages (same UIDs) keep every entry OpenKruise wrote, with its owners"
else
  fail "NodeImage entries lost: $ni_lost"
fi
adopted=$(kubectl get nodeimages -o json | jq '[.items[] | select(.metadata.annotations["nodeimage.dev/mirrored-labels"] != null)] | length')
finalized=$(kubectl get imagepulljobs -n "$NS" -o json | jq '[.items[] | select(.metadata.finalizers // [] | index("nodeimage.dev/imagepulljob-cleanup"))] | length')
if ((adopted == ${#NODES[@]} && finalized == $(kubectl get imagepulljobs -n "$NS" -o name | wc -l))); then
  pass "nodeimage owns them: $adopted NodeImages adopted (nodeimage.dev/mirrored-labels), $finalized ImagePullJobs carry nodeimage.dev/imagepulljob-cleanup"
else
  fail "nodeimage adopted $adopted of ${#NODES[@]} NodeImages and finalizes $finalized ImagePullJobs"
fi
kids=$(kubectl get imagepulljobs -n "$NS" -o json | jq -r '[.items[] | select(.metadata.ownerReferences[]?.kind == "ImageListPullJob")] | "\(length) children of the list: \([.[] | "\(.metadata.name)(\(if .metadata.labels["nodeimage.dev/imagelistpulljob"] then "nodeimage" else "OpenKruise" end))"] | join(" "))"')
note "$kids"

# Every image on every node it was meant for, and the NodeImages say so.
missing=()
for i in "${!NODES[@]}"; do
  sock_var=NODEIMAGE_CONTAINERD_$((i + 1))
  for img in "$IMG_ALL" "${IMG_LIST[@]}"; do
    "$NODEIMAGE_CRI" --socket "${!sock_var}" status "$img" >/dev/null 2>&1 || missing+=("${NODES[i]}:$img")
  done
done
"$NODEIMAGE_CRI" --socket "$NODEIMAGE_CONTAINERD_2" status "$IMG_NEVER" >/dev/null 2>&1 || missing+=("${NODES[1]}:$IMG_NEVER")
if ((${#missing[@]} == 0)); then
  pass "every image is in the containerd of every node it was meant for (the pull-secret job's: see its own check)"
else
  fail "images missing on nodes: ${missing[*]}"
fi
not_ok=$(kubectl get nodeimages -o json | jq -r '[.items[] | .metadata.name as $n | .spec.images // {} | to_entries[] | .key as $i | .value.tags[] | .tag as $t
  | select(true) | "\($n) \($i):\($t)"] | .[]' | while read -r n ref; do
  img=${ref%:*} tag=${ref##*:}
  ph=$(kubectl get nodeimage "$n" -o json | jq -r --arg i "$img" --arg t "$tag" '[.status.imageStatuses[$i].tags[]? | select(.tag == $t) | .phase] | first // "none"')
  [[ $ph == Succeeded || $ref == "$NODEIMAGE_AUTH_REGISTRY/"* ]] || echo "$n $ref=$ph"
done)
if [[ -z $not_ok ]]; then
  pass "every NodeImage entry reports phase Succeeded (the pull-secret job's: see its own check)"
else
  fail "NodeImage entries not Succeeded: $(tr '\n' ';' <<<"$not_ok")"
fi

if ! job_done with-secret; then
  guide "Let such jobs finish before the migration, or delete each and apply it"
  note "the guide's way round it: the job re-created under nodeimage"
  kubectl get imagepulljob -n "$NS" with-secret -o json |
    jq '{apiVersion, kind, metadata: {name: .metadata.name, namespace: .metadata.namespace}, spec}' >"$KDIR/with-secret.json"
  kubectl delete imagepulljob -n "$NS" with-secret --wait=true --timeout=60s >/dev/null
  kubectl create -f "$KDIR/with-secret.json" >/dev/null
  if (wait_until 180 "the re-created with-secret job to complete" controller job_done with-secret); then
    missing=()
    for i in "${!NODES[@]}"; do
      sock_var=NODEIMAGE_CONTAINERD_$((i + 1))
      "$NODEIMAGE_CRI" --socket "${!sock_var}" status "$IMG_AUTH" >/dev/null 2>&1 || missing+=("${NODES[i]}")
    done
    if ((${#missing[@]} == 0)); then
      pass "re-created under nodeimage, the pull-secret job succeeds and its image is on every node"
    else
      fail "the re-created pull-secret job completed but $IMG_AUTH is missing on ${missing[*]}"
    fi
  else
    fail "re-created under nodeimage, the pull-secret job still fails: $(kubectl get imagepulljob -n "$NS" with-secret -o json | jq -c .status)"
  fi
fi
if pods_admitted; then pass "Pods are admitted after the migration (create, delete, eviction)"; else fail "Pods are admitted after the migration"; fi

# ---------------------------------------------------------------------------
# A later `helm upgrade` of OpenKruise, and the guide's step for it
# ---------------------------------------------------------------------------
say "a later helm upgrade of OpenKruise, and the guide's B.3"
hooks_served_for() { # a configuration entry named $1 carries kruise-manager's CA
  kubectl get validatingwebhookconfiguration kruise-validating-webhook-configuration -o json |
    jq -e --arg n "$1" '.webhooks[] | select(.name == $n) | .clientConfig.caBundle // "" | length > 0' >/dev/null
}
kruise_upgrade
wait_until 60 "kruise-manager to serve the re-rendered image webhooks" kruise-manager hooks_served_for vimagepulljob-v1beta1.kb.io
sleep 2
if out=$(kubectl create --dry-run=server -f "$KDIR/probe-ipj.yaml" 2>&1); then
  fail "after the upgrade an ImagePullJob is admitted: the guide's B.3 warning would be wrong"
else
  pass "after an OpenKruise upgrade the image webhooks are back and refuse ImagePullJobs: $(oneline "$out")"
fi
crd_column() { kubectl get crd nodeimages.apps.kruise.io -o jsonpath='{.spec.versions[0].additionalPrinterColumns[0].description}'; }
NI_COLUMN_OURS=$(sed -n 's/^ *- description: \(.*\)$/\1/p' "$REPO_ROOT/charts/nodeimage/crds/apps.kruise.io_nodeimages.yaml" | head -n 1)
if [[ $(crd_column) != "$NI_COLUMN_OURS" ]]; then
  pass "the upgrade also put OpenKruise's schema back on the CRDs (NodeImage's first column: \"$(crd_column)\", nodeimage's: \"$NI_COLUMN_OURS\")"
else
  fail "the upgrade left nodeimage's CRD schema in place: the guide's B.3 says it does not"
fi
guide "3. **After every \`helm upgrade\` of OpenKruise**, run the webhook removal of
   B.2 and step 2's \`kubectl apply\` again."
remove_hooks || fail "the guide's webhook removal failed"
guide_run "$CRD_STEP"
sleep 3
if out=$(kubectl create --dry-run=server -f "$KDIR/probe-ipj.yaml" 2>&1) && [[ $(crd_column) == "$NI_COLUMN_OURS" && -z $(image_hooks) ]] && pods_admitted >/dev/null; then
  pass "after B.3 ImagePullJobs are admitted again, nodeimage's CRDs are back, Pods are admitted"
else
  fail "after B.3: $out; image webhooks left: $(image_hooks)"
fi
kubectl apply -f - >/dev/null <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: after-migration, namespace: $NS}
spec:
  image: $NODEIMAGE_REGISTRY/test:v2
  parallelism: 3
  completionPolicy: {type: Always}
EOF
if (wait_until 180 "a new ImagePullJob to complete" controller job_done after-migration); then
  pass "an ImagePullJob created after the migration completes on every node"
else
  fail "an ImagePullJob created after the migration did not complete within 180 s"
fi

# ---------------------------------------------------------------------------
# Way A: OpenKruise uninstalled later
# ---------------------------------------------------------------------------
say "docs/migration.md way A (OpenKruise goes after all)"
guide "A. OpenKruise is there only for pre-pulling: uninstall it."
note "A.2's annotation is on the CRDs since step 2: $(kubectl get crd nodeimages.apps.kruise.io -o jsonpath='{.metadata.annotations.helm\.sh/resource-policy}')"
guide "That annotation alone does not save them from \`helm uninstall\`"
# A.1: the check comes first. With a CloneSet in the cluster it must refuse
# (naming it, sending the reader to way B); without one it must pass.
A1="kubectl nodeimage openkruise-check"
guide "$A1"
PLUGIN=${NODEIMAGE_BIN:-$REPO_ROOT/target/debug}/kubectl-nodeimage
kubectl create -f - >/dev/null <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata: {name: keep-me, namespace: $PODS_NS}
spec:
  replicas: 0
  selector: {matchLabels: {app: keep-me}}
  template:
    metadata: {labels: {app: keep-me}}
    spec: {containers: [{name: c, image: registry.example.com/app:v1}]}
EOF
printf '$ %s   (a CloneSet %s/keep-me exists)\n' "$A1" "$PODS_NS"
rc=0
"$PLUGIN" openkruise-check >"$KDIR/check-with-cloneset.txt" 2>&1 || rc=$?
cat "$KDIR/check-with-cloneset.txt"
if [[ $rc == 4 ]] && grep -qF "CloneSet.apps.kruise.io: 1 ($PODS_NS/keep-me)" "$KDIR/check-with-cloneset.txt" &&
  grep -q "way B" "$KDIR/check-with-cloneset.txt"; then
  pass "A.1: the check refuses while a CloneSet exists, names it and sends the reader to way B"
else
  fail "A.1: the check with a CloneSet present: exit $rc, $(oneline "$(cat "$KDIR/check-with-cloneset.txt")")"
fi
kubectl delete cloneset -n "$PODS_NS" keep-me --wait=true >/dev/null
rc=0
"$PLUGIN" openkruise-check >"$KDIR/check-without.txt" 2>&1 || rc=$?
cat "$KDIR/check-without.txt"
if [[ $rc == 0 ]]; then
  pass "A.1: with no other OpenKruise object the check passes"
else
  fail "A.1: the check without a CloneSet: exit $rc, $(oneline "$(cat "$KDIR/check-without.txt")")"
fi
snapshot "$KDIR/before-uninstall.json"
A2="helm upgrade kruise openkruise/kruise --reuse-values --set crds.managed=false"
guide "$A2"
printf '$ %s   (chart %s)\n' "$A2" "$KRUISE_CHART"
helm upgrade kruise "$KRUISE_CHART" --reuse-values --set crds.managed=false >"$KDIR/helm-upgrade-a2.txt"
follow_deployment
crds_left=$(kubectl get crd -o name | grep -c 'kruise\.io' || true)
if kubectl get crd imagepulljobs.apps.kruise.io imagelistpulljobs.apps.kruise.io nodeimages.apps.kruise.io >/dev/null &&
  [[ $crds_left == 3 ]]; then
  pass "A.3: helm kept the three annotated CRDs and deleted OpenKruise's other CRDs"
else
  fail "A.3: kruise.io CRDs left: $(kubectl get crd -o name | grep 'kruise\.io' | tr '\n' ' ')"
fi
A3="helm uninstall kruise"
guide "Uninstall it: \`$A3\`"
printf '$ %s --no-hooks   (--no-hooks: the chart'"'"'s pre-delete check is a Job, and this cluster runs no pods)\n' "$A3"
helm uninstall kruise --no-hooks >"$KDIR/helm-uninstall.txt"
follow_deployment
if kubectl get mutatingwebhookconfiguration kruise-mutating-webhook-configuration >/dev/null 2>&1 ||
  kubectl get validatingwebhookconfiguration kruise-validating-webhook-configuration >/dev/null 2>&1; then
  fail "A.4: a webhook configuration of OpenKruise is left after helm uninstall"
else
  pass "A.4: helm uninstall removed both webhook configurations with the Deployment"
fi
snapshot "$KDIR/after-uninstall.json"
gone=$(jq -n --slurpfile a "$KDIR/before-uninstall.json" --slurpfile b "$KDIR/after-uninstall.json" \
  '[$a[0].jobs[] as $j | select([$b[0].jobs[] | select(.uid == $j.uid)] | length == 0) | $j.name] + [$a[0].nodeimages[] as $n | select([$b[0].nodeimages[] | select(.uid == $n.uid)] | length == 0) | $n.name]')
if [[ $gone == "[]" ]]; then
  pass "A.4: every job and NodeImage survived OpenKruise's uninstall"
else
  fail "A.4: gone with OpenKruise: $gone"
fi
if pods_admitted; then pass "A.4: Pods are admitted once OpenKruise is gone"; else fail "A.4: Pods are admitted once OpenKruise is gone"; fi
kubectl apply -f - >/dev/null <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {name: after-uninstall, namespace: $NS}
spec:
  image: $NODEIMAGE_REGISTRY/multi:v1
  parallelism: 3
  completionPolicy: {type: Always}
EOF
if (wait_until 180 "a new ImagePullJob to complete" controller job_done after-uninstall); then
  pass "A.4: nodeimage goes on: a new ImagePullJob completes on every node"
else
  fail "A.4: a new ImagePullJob did not complete within 180 s"
fi

# ---------------------------------------------------------------------------
# The earlier guide's uninstall: the keep annotation alone, then
# `helm uninstall` (last: it destroys the objects)
# ---------------------------------------------------------------------------
say "sub-scenario: the earlier guide's uninstall (annotation only, then helm uninstall)"
ns_gone() { ! kubectl get namespace kruise-system kruise-daemon-config >/dev/null 2>&1; }
wait_until 180 "the namespaces of the first install to go" - ns_gone
note "OpenKruise installed again: helm adopts the kept CRDs (they still carry its release's annotations)"
helm install kruise "$KRUISE_CHART" -f "$KDIR/kruise-values.yaml" >"$KDIR/helm-install-2.txt"
follow_deployment
note "keep annotation on the CRD: $(kubectl get crd imagepulljobs.apps.kruise.io -o jsonpath='{.metadata.annotations.helm\.sh/resource-policy}'), ImagePullJobs: $(kubectl get imagepulljobs -n "$NS" -o name | wc -l)"
printf '$ helm uninstall kruise --no-hooks   (without A.3)\n'
helm uninstall kruise --no-hooks >"$KDIR/helm-uninstall-2.txt"
follow_deployment
crd_going() {
  ! kubectl get crd imagepulljobs.apps.kruise.io >/dev/null 2>&1 ||
    [[ -n $(kubectl get crd imagepulljobs.apps.kruise.io -o jsonpath='{.metadata.deletionTimestamp}') ]]
}
sleep 3
if crd_going; then
  pass "without A.3, helm uninstall deletes the CRDs despite their keep annotation (and every job with them), as the guide now warns: $(grep -i -A4 'uninstalled\|kept' "$KDIR/helm-uninstall-2.txt" | tr '\n' ' ' | cut -c1-160)"
else
  fail "without A.3, helm uninstall kept the CRDs: A.2 would not be needed"
fi

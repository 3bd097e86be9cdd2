#!/usr/bin/env bash
# Side by side with OpenKruise (docs/benchmarks.md, issue 40): kruise-manager
# and nodeimage's controller on one bench cluster, in one session,
# alternating, ROUNDS rounds each, in scale.sh's imagepulljob scenario (JOBS
# ImagePullJobs, one image each, over NODES simulated nodes, parallelism
# PARALLELISM). Prints per round and as medians: creation → all jobs
# complete, controller CPU, API server + etcd CPU, requests of all clients
# and of the controller, NodeImage writes (PATCH, PUT, apply), peak RSS and
# the most nodes pulling at once; and nodeimage ÷ kruise-manager per round.
#
#   NODEIMAGE_STATE=/work/bench-state tests/bench/side-by-side.sh KRUISE_MANAGER KRUISE_SRC
#
# KRUISE_MANAGER is `go build -o <it> .` in KRUISE_SRC, a checkout of
# openkruise/kruise (recipe in docs/benchmarks.md); its three image CRDs are
# taken from KRUISE_SRC/config/crd/bases.
#
# Each round calls scale.sh once per controller (its CONTROLLER_* settings,
# KEEP_NODES=1), then `scale.sh reset`: every round creates its nodes, and
# the controller under test mirrors them into NodeImages. nodeimage runs with
# --registry-max-pulls for each of NODEIMAGE_PACING (default "100", the
# chart's controller.registryPacing.default; "100 0" adds a run without
# pacing). kruise-manager runs out of cluster with:
#   - only its NodeImage, ImagePullJob and ImageListPullJob CRDs;
#   - the namespaces kruise-system (its webhook certificate Secret) and
#     kruise-daemon-config (where it copies pull secrets);
#   - empty kruise-mutating- and kruise-validating-webhook-configuration: it
#     does not start without them, and with no webhook in them the API server
#     never calls it. It makes its own CA and serving certificate (written to
#     WEBHOOK_CERT_DIR) and serves on WEBHOOK_PORT (on 0.0.0.0), and checks
#     https://localhost:WEBHOOK_PORT/healthz before it sets up controllers;
#   - --feature-gates=ImagePullJobGate=true,PodUnavailableBudgetDeleteGate=false
#     (without the second, the PodUnavailableBudget controller, whose CRD
#     group is absent, waits 2 min for its cache and stops the manager);
#   - --rest-config-qps KRUISE_QPS (300) --rest-config-burst KRUISE_BURST (600);
#   - --nodeimage-creation-delay=0s (it waits 30 s after a Node turns Ready
#     before creating its NodeImage; that is before the measured part);
#   - no leader election, no pprof.
# It counts as ready once its log shows controller-runtime's "Starting
# workers" for imagepulljob-controller: about 3 minutes after its start on a
# 2-core machine, because each kind whose CRD is absent costs ~16 s of
# discovery retries; its /readyz and metrics answer minutes earlier. It is
# started twice per round (scale.sh: to mirror the nodes, then fresh for the
# measured part).
#
# Settings: ROUNDS (3), NODES (1000), JOBS (10), PARALLELISM (100),
# NODEIMAGE_PACING ("100"), KRUISE_QPS (300), KRUISE_BURST (600),
# SETTLE_SECONDS (10; scale.sh's reconcile-rate window), PULL_MS,
# SIM_CONCURRENCY and TIMEOUT_SECONDS as scale.sh; ports from
# BENCH_PORT_BASE (28000): metrics +90, kruise-manager's probes +91 and
# webhook +92. Results: $NODEIMAGE_STATE/bench/results/side-by-side-<time>/
# (summary.txt, each round's scale.sh output and controller log).
set -Eeuo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# == 2 ]] || die "usage: $0 KRUISE_MANAGER KRUISE_SRC"
KRUISE_BIN=$(realpath -e "$1")
KRUISE_SRC=$(realpath -e "$2")
[[ -x $KRUISE_BIN ]] || die "not executable: $KRUISE_BIN"
[[ -d $KRUISE_SRC/config/crd/bases ]] || die "no $KRUISE_SRC/config/crd/bases"
export NODES=${NODES:-1000} JOBS=${JOBS:-10} PARALLELISM=${PARALLELISM:-100} SETTLE_SECONDS=${SETTLE_SECONDS:-10}
ROUNDS=${ROUNDS:-3}
read -r -a PACING <<<"${NODEIMAGE_PACING:-100}"
KRUISE_QPS=${KRUISE_QPS:-300}
KRUISE_BURST=${KRUISE_BURST:-600}
PORT_BASE=${BENCH_PORT_BASE:-28000}
OUT=$RESULTS/side-by-side-$(date -u +%Y%m%dT%H%M%SZ)
KDIR=$OUT/kruise
mkdir -p "$KDIR/crds" "$KDIR/certs" "$KDIR/log"
SUMMARY=$OUT/summary.txt

# What kruise-manager needs out of cluster (see above).
for kind in nodeimages imagepulljobs imagelistpulljobs; do
  cp "$KRUISE_SRC/config/crd/bases/apps.kruise.io_$kind.yaml" "$KDIR/crds/"
done
for ns in kruise-system kruise-daemon-config; do
  kc get namespace "$ns" >/dev/null 2>&1 || kc create namespace "$ns" >/dev/null
done
kc apply -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: kruise-mutating-webhook-configuration}
webhooks: []
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: kruise-validating-webhook-configuration}
webhooks: []
EOF
KRUISE_ARGS=("--kubeconfig={kubeconfig}" "--metrics-addr={health}" --health-probe-addr=127.0.0.1:$((PORT_BASE + 91))
  --enable-leader-election=false --enable-pprof=false --protection-log-path="$KDIR/log"
  "--feature-gates=ImagePullJobGate=true,PodUnavailableBudgetDeleteGate=false"
  --rest-config-qps="$KRUISE_QPS" --rest-config-burst="$KRUISE_BURST" --nodeimage-creation-delay=0s)
KRUISE_ENV=(POD_NAMESPACE=kruise-system WEBHOOK_PORT=$((PORT_BASE + 92)) WEBHOOK_CERT_DIR="$KDIR/certs"
  CONTROLLER_BIN="$KRUISE_BIN" CONTROLLER_CRDS="$KDIR/crds" CONTROLLER_ARGS="${KRUISE_ARGS[*]}"
  CONTROLLER_READY="awk '/^===== /{ok=0} /\"Starting workers\"/ && /\"controller\"=\"imagepulljob-controller\"/{ok=1} END{exit !ok}' $LOGS/scale-controller.log"
  CONTROLLER_READY_TIMEOUT=1200 CONTROLLER_RECONCILES_METRIC=controller_runtime_reconcile_total)

# The sides of a round, in order, and how scale.sh runs each.
SIDES=(kruise)
for p in "${PACING[@]}"; do SIDES+=("nodeimage-pacing-$p"); done
side_env() {
  case $1 in
    kruise) printf '%s\n' "${KRUISE_ENV[@]}" ;;
    nodeimage-pacing-*) printf '%s\n' CONTROLLER_BIN="$BIN/nodeimage-controller" CONTROLLER_ARGS= CONTROLLER_CRDS= \
      CONTROLLER_READY= CONTROLLER_RECONCILES_METRIC= REGISTRY_LIMIT="${1#nodeimage-pacing-}" ;;
  esac
}
# Nothing simulated left (the nodes, their NodeImages, jobs): scale.sh reset.
reset_cluster() {
  "$BENCH_DIR/scale.sh" reset >&2
  wait_until 600 "simulated Nodes and NodeImages gone" - bash -c \
    "[[ -z \$($KUBECTL get nodes,nodeimages -l nodeimage.dev/sim=true -o name) ]]"
}
round() { # round SIDE N
  local side=$1 n=$2 envs
  mapfile -t envs < <(side_env "$side")
  log "round $n: $side"
  env "${envs[@]}" KEEP_NODES=1 "$BENCH_DIR/scale.sh" imagepulljob >"$OUT/$side-$n.txt"
  mv "$LOGS/scale-controller.log" "$OUT/$side-$n.controller.log"
  reset_cluster
  echo "round $n $side: $(for m in "${METRICS[@]}"; do printf '%s %s; ' "${m%%|*}" "$(value "$side" "$n" "$m")"; done)" | tee -a "$SUMMARY"
}
# The figures: "label|scale.sh key|regex of the value in its line".
METRICS=(
  "creation → all jobs complete, s|imagepulljob.seconds[$NODES]|^[0-9.]+"
  "controller CPU, s|imagepulljob.controller.cpu_seconds|^[0-9.]+"
  "API server + etcd CPU, s|imagepulljob.cpu_seconds.by_process|apiserver.etcd [0-9.]+"
  "requests, all clients|imagepulljob.apiserver.requests_all_clients|^[0-9]+"
  "controller requests|imagepulljob.controller.requests|total=[0-9]+"
  "NodeImage writes|imagepulljob.apiserver.nodeimage_writes|^[0-9]+"
  "controller peak RSS, MiB|imagepulljob.controller.peak_rss_mib|^[0-9.]+"
  "most nodes pulling at once|imagepulljob.registry.peak_pulling_nodes|\":[0-9]+"
  "node pulls succeeded|imagepulljob.result|[0-9]+ node pulls succeeded"
)
value() { # value SIDE N METRIC: the number, from the round's scale.sh output
  local key=${3#*|}
  awk -v k="${key%%|*}" -v re="${key#*|}" '$1 == k {
      sub(/^[^ ]+ +/, ""); if (match($0, re)) { v = substr($0, RSTART, RLENGTH); gsub(/[^0-9.]/, "", v); print v }; exit }' "$OUT/$1-$2.txt"
}

# "median (min–max)" of the numbers on stdin (one per line).
medians() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "NA"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    if (NR == 1) print m; else printf "%s (%s–%s)\n", m, v[1], v[NR] }'
}

{
  echo "# tests/bench/side-by-side.sh $(date -u +%FT%TZ) on $(nproc) cores; ROUNDS=$ROUNDS NODES=$NODES JOBS=$JOBS PARALLELISM=$PARALLELISM PULL_MS=${PULL_MS:-0}"
  echo "# nodeimage: $BIN/nodeimage-controller ($(code_version)), --registry-max-pulls ${PACING[*]}"
  echo "# kruise-manager: $KRUISE_BIN, source $KRUISE_SRC ($(git -C "$KRUISE_SRC" describe --tags --always 2>/dev/null), $(git -C "$KRUISE_SRC" rev-parse --short HEAD 2>/dev/null)), QPS $KRUISE_QPS, burst $KRUISE_BURST"
} | tee "$SUMMARY"
install_crds # scale.sh reset lists nodeimage's kinds
reset_cluster
for ((r = 1; r <= ROUNDS; r++)); do
  for side in "${SIDES[@]}"; do round "$side" "$r"; done
done

# Medians, and nodeimage ÷ kruise-manager per round.
{
  cols=("" "${SIDES[@]}")
  for side in "${SIDES[@]:1}"; do cols+=("$side ÷ kruise, per round"); done
  echo
  printf '| %s ' "${cols[@]}"
  echo '|'
  printf '|---%.0s' "${cols[@]}"
  echo '|'
  for m in "${METRICS[@]}"; do
    printf '| %s ' "${m%%|*}"
    for side in "${SIDES[@]}"; do
      printf '| %s ' "$(for ((r = 1; r <= ROUNDS; r++)); do value "$side" "$r" "$m"; done | medians)"
    done
    for side in "${SIDES[@]:1}"; do
      printf '| %s ' "$(for ((r = 1; r <= ROUNDS; r++)); do
        awk -v a="$(value "$side" "$r" "$m")" -v b="$(value kruise "$r" "$m")" 'BEGIN { if (b > 0) printf "%.2f\n", a / b; else print "NA" }'
      done | paste -sd, | sed 's/,/, /g')"
    done
    echo '|'
  done
  echo
  echo "Median (min–max) of $ROUNDS rounds. Each round's scale.sh output and controller log: $OUT"
} | tee -a "$SUMMARY"

#!/usr/bin/env bash
# The soak (issue 50): jobs of every kind created, edited and deleted for a
# set time while faults hit the controller, the API server, the registry and
# the node daemons, with invariants checked all along. It runs against the
# local cluster and the nodeimage started by tests/nodeimage.sh (it kills
# and restarts both):
#
#   tests/soak.sh        # the short form `make test` runs: 3 minutes, 40 nodes
#   SOAK_SECONDS=3600 SOAK_NODES=1000 SOAK_PARALLELISM=200 SOAK_FAULT_SECONDS=240 \
#     SOAK_CHECK_SECONDS=60 SOAK_CONTROLLER_KILLS_UNTIL=50 tests/soak.sh   # the long form (docs/benchmarks.md)
#
# Nodes: SOAK_NODES simulated nodes (played by `ni-sim run`) and the
# cluster's real daemons' nodes. The OpenKruise kinds select every one of
# them (label soak.nodeimage.dev/node=true), the KubeEdge kinds the simulated
# ones (soak.nodeimage.dev/sim=true, and KubeEdge's edge role).
#
# Churn: every 1 to SOAK_TICK_SECONDS (4) s one of: create a job
# (ImagePullJob, ImageListPullJob, ImagePrePullJob, NodeUpgradeJob or
# ImageRemovalJob of the simulated nodes, with a
# parallelism or concurrency between a quarter of SOAK_PARALLELISM (20) and
# all of it; some with a pull secret of the authenticated registry, so the
# controller copies it), edit one (parallelism, or a label on the KubeEdge
# kinds; an ImageListPullJob's template edit makes new children, as
# upstream does), delete one: a finished one, or now and then one still
# running. At most SOAK_MAX_JOBS (8) live at once.
#
# Faults: every SOAK_FAULT_SECONDS (30) on average one of SOAK_FAULTS
# ("controller apiserver registry daemon sim"): the controller SIGKILLed and
# started again; the API server (with its etcd) stopped and started; the
# anonymous registry down for 20 s; one real node daemon SIGKILLed and
# started again; the simulated daemons SIGKILLed and started again. After
# SOAK_CONTROLLER_KILLS_UNTIL percent of the run (100) the controller is no
# longer killed, so the last one lives long enough to show its memory trend.
#
# Invariants, every SOAK_CHECK_SECONDS (30):
#   - every finished job's counts are exact: an ImagePullJob's desired is the
#     number of nodes it selects and its succeeded + failed is desired; an
#     ImageListPullJob's desired is its images and all of them completed; a
#     finished ImagePrePullJob or NodeUpgradeJob has one result per node it
#     selects, each Successful or Failed; a finished ImageRemovalJob's
#     desired is the simulated nodes and succeeded + kept + failed is desired;
#   - no NodeImage entry (tag or removal) whose owner (a soak job) is gone,
#   - no pull-secret copy of the soak's secret that no live job refers to,
#   - no deleted job kept by a finalizer;
#   the last three can be true for a moment (the controller cleans up after a
#   delete), so one counts once it has lasted SOAK_GRACE_SECONDS (120); the
#   summary gives the longest such cleanup seen;
#   - the controller's RSS: sampled at each check; judged for the last
#     controller process once it has lived SOAK_RSS_WARMUP_SECONDS (300) and
#     then SOAK_RSS_MIN_SECONDS (900) more: the median of its last 5 minutes
#     at most 10 % above the median of its first 5 minutes after warm-up.
#     A shorter run prints the samples and says it did not judge.
# At the end every soak job is deleted and, within SOAK_SETTLE_SECONDS
# (180), no soak job, entry or copy may be left. The run fails on any
# violation, on a check that never ran, and when some kind finished no job
# (a soak that proves nothing must not pass).
#
# Settings: SOAK_SEED (random, printed; it seeds the choices, though timing
# makes no two runs alike), the ones
# above. Output: $STATE/soak/ (soak.log, rss.tsv, violations).
set -Eeuo pipefail
# shellcheck source=tests/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

ENV_FILE=$STATE/env.sh
[[ -f $ENV_FILE ]] || die "no $ENV_FILE: start the cluster first (tests/cluster/up.sh)"
# shellcheck disable=SC1090
. "$ENV_FILE"

RUN_SECONDS=${SOAK_SECONDS:-180}
SIM_NODES=${SOAK_NODES:-40}
FAULT_SECONDS=${SOAK_FAULT_SECONDS:-30}
CHECK_SECONDS=${SOAK_CHECK_SECONDS:-30}
GRACE=${SOAK_GRACE_SECONDS:-120}
SETTLE=${SOAK_SETTLE_SECONDS:-180}
MAX_JOBS=${SOAK_MAX_JOBS:-8}
PARALLELISM=${SOAK_PARALLELISM:-20}
TICK=${SOAK_TICK_SECONDS:-4}
FAULTS=${SOAK_FAULTS:-controller apiserver registry daemon sim}
KILLS_UNTIL=${SOAK_CONTROLLER_KILLS_UNTIL:-100}
RSS_WARMUP=${SOAK_RSS_WARMUP_SECONDS:-300}
RSS_MIN=${SOAK_RSS_MIN_SECONDS:-900}
SEED=${SOAK_SEED:-$(($(date +%s%N) % 32768))}
# The binaries nodeimage.sh started (its default: the workspace's debug build).
BIN=${NODEIMAGE_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug}
SIM=$BIN/ni-sim
[[ -x $SIM ]] || die "no $SIM (cargo build -p nodeimage-tests --bin ni-sim)"

NS=nodeimage-soak
NODE_LABEL=soak.nodeimage.dev/node
SIM_LABEL=soak.nodeimage.dev/sim
SECRETS_NS=nodeimage-secrets
REGISTRY_DAEMON=registry-${NODEIMAGE_REGISTRY##*:}
OUT=$STATE/soak
rm -rf "$OUT" && mkdir -p "$OUT" && touch "$OUT/violations" "$OUT/confirmed" "$OUT/finished" "$OUT/linger" "$OUT/resolved"
exec > >(tee -a "$OUT/soak.log") 2>&1

k() { "$KUBECTL" --request-timeout=20s "$@"; }
say() { log "soak: $*"; }

# ---------------------------------------------------------------------------
# Setup and teardown
# ---------------------------------------------------------------------------
setup() {
  say "seed $SEED, ${RUN_SECONDS}s, $SIM_NODES simulated nodes, faults every ~${FAULT_SECONDS}s ($FAULTS)"
  leftovers
  k create namespace "$NS" --dry-run=client -o yaml | k apply -f - >/dev/null
  k -n "$NS" create secret docker-registry soak-auth --docker-server="$NODEIMAGE_AUTH_REGISTRY" \
    --docker-username="$NODEIMAGE_AUTH_USER" --docker-password="$NODEIMAGE_AUTH_PASSWORD" \
    --dry-run=client -o yaml | k apply -f - >/dev/null
  "$SIM" --kubeconfig "$KUBECONFIG" create-nodes --count "$SIM_NODES" --prefix soak >/dev/null
  k label nodes -l nodeimage.dev/sim=true --overwrite "$NODE_LABEL=true" "$SIM_LABEL=true" \
    node-role.kubernetes.io/edge= >/dev/null
  local n
  for n in $NODEIMAGE_NODES; do k label node "$n" --overwrite "$NODE_LABEL=true" >/dev/null; done
  ALL_NODES=$(k get nodes -l "$NODE_LABEL=true" -o name | wc -l)
  SIMULATED=$(k get nodes -l "$SIM_LABEL=true" -o name | wc -l)
  ((SIMULATED == SIM_NODES)) || die "$SIMULATED simulated nodes, expected $SIM_NODES"
  APISERVER_CMD=$(recorded_cmd apiserver)
  REGISTRY_CMD=$(recorded_cmd "$REGISTRY_DAEMON")
  [[ -n $APISERVER_CMD && -n $REGISTRY_CMD ]] || die "no recorded command line of the API server or $REGISTRY_DAEMON"
  start_sim
}

# An earlier run stopped before its teardown finished may have left jobs
# (the KubeEdge kinds are cluster-scoped) or its namespace still going: a
# job of that run must not be judged by this one.
leftovers() {
  local kinds=imagepulljobs,imagelistpulljobs,imageprepulljobs,nodeupgradejobs,imageremovaljobs names i
  names=$(k get "$kinds" -A -o json |
    jq -r '.items[] | select(.metadata.name | startswith("soak-")) |
      "\(.kind | ascii_downcase)/\(.metadata.name) \(.metadata.namespace // "")"')
  if [[ -n $names ]]; then
    say "deleting $(wc -l <<<"$names") jobs an earlier run left"
    local ns ref
    while read -r ref ns; do
      k ${ns:+-n "$ns"} delete --wait=false "$ref" >/dev/null
    done <<<"$names"
  fi
  for ((i = 0; i < SETTLE; i++)); do
    [[ -z $(k get "$kinds" -A -o name | grep '/soak-') ]] &&
      [[ $(k get namespace "$NS" -o jsonpath='{.status.phase}' 2>/dev/null) != Terminating ]] && return 0
    sleep 1
  done
  die "an earlier run's jobs (or its namespace $NS, terminating) still there after ${SETTLE}s"
}

start_sim() {
  start_daemon soak-sim "$SIM" --kubeconfig "$KUBECONFIG" run --selector "$SIM_LABEL=true"
}

teardown() {
  stop_daemon soak-sim
  "$SIM" --kubeconfig "$KUBECONFIG" delete-nodes --selector "$SIM_LABEL=true" >/dev/null || true
  local n
  for n in $NODEIMAGE_NODES; do k label node "$n" "$NODE_LABEL-" >/dev/null 2>&1 || true; done
  k delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------------------
# Churn
# ---------------------------------------------------------------------------
KINDS=(imagepulljob imagelistpulljob imageprepulljob nodeupgradejob imageremovaljob)
declare -A CREATED=() EDITED=() DELETED=()
LIVE=() # kind/name of the soak's own jobs
SEQ=0
IMAGES=("$NODEIMAGE_REGISTRY/test:v1" "$NODEIMAGE_REGISTRY/test:v2" "$NODEIMAGE_REGISTRY/test:v3"
  "$NODEIMAGE_REGISTRY/multi:v1" "$NODEIMAGE_AUTH_REGISTRY/test:v1")
image() { printf '%s' "${IMAGES[RANDOM % ${#IMAGES[@]}]}"; }
width() { printf '%s' $((PARALLELISM / 4 + 1 + RANDOM % (PARALLELISM - PARALLELISM / 4))); }
auth() { [[ $1 == "$NODEIMAGE_AUTH_REGISTRY"/* ]]; }

manifest() {
  local kind=$1 name=$2 img img2
  img=$(image)
  case $kind in
    imagepulljob)
      cat <<EOF
{"apiVersion":"apps.kruise.io/v1alpha1","kind":"ImagePullJob","metadata":{"name":"$name","namespace":"$NS"},
 "spec":{"image":"$img","parallelism":$(width),$(auth "$img" && printf '"pullSecrets":["soak-auth"],')
  "selector":{"matchLabels":{"$NODE_LABEL":"true"}},
  "completionPolicy":{"type":"Always","activeDeadlineSeconds":900},
  "pullPolicy":{"backoffLimit":1,"timeoutSeconds":60}}}
EOF
      ;;
    imagelistpulljob)
      img2=$(image)
      [[ $img2 == "$img" ]] && img2=${IMAGES[0]/%v1/v2}
      [[ $img2 == "$img" ]] && img2=${IMAGES[2]}
      cat <<EOF
{"apiVersion":"apps.kruise.io/v1alpha1","kind":"ImageListPullJob","metadata":{"name":"$name","namespace":"$NS"},
 "spec":{"images":["$img","$img2"],"parallelism":$(width),"pullSecrets":["soak-auth"],
  "selector":{"matchLabels":{"$NODE_LABEL":"true"}},
  "completionPolicy":{"type":"Always","activeDeadlineSeconds":900},
  "pullPolicy":{"backoffLimit":1,"timeoutSeconds":60}}}
EOF
      ;;
    imageprepulljob)
      cat <<EOF
{"apiVersion":"operations.kubeedge.io/v1alpha1","kind":"ImagePrePullJob","metadata":{"name":"$name","labels":{"$SIM_LABEL":"job"}},
 "spec":{"imagePrePullTemplate":{"images":["$img"],$(auth "$img" && printf '"imageSecrets":"%s/soak-auth",' "$NS")
  "labelSelector":{"matchLabels":{"$SIM_LABEL":"true"}},"concurrency":$(width),
  "retryTimes":1,"timeoutSeconds":120}}}
EOF
      ;;
    nodeupgradejob)
      cat <<EOF
{"apiVersion":"operations.kubeedge.io/v1alpha1","kind":"NodeUpgradeJob","metadata":{"name":"$name","labels":{"$SIM_LABEL":"job"}},
 "spec":{"version":"v1.16.$SEQ","image":"$NODEIMAGE_REGISTRY/installation-package",
  "labelSelector":{"matchLabels":{"$SIM_LABEL":"true"}},"concurrency":$(width),"timeoutSeconds":120}}
EOF
      ;;
    imageremovaljob)
      cat <<EOF
{"apiVersion":"nodeimage.dev/v1alpha1","kind":"ImageRemovalJob","metadata":{"name":"$name","labels":{"$SIM_LABEL":"job"}},
 "spec":{"images":["$img"],"selector":{"matchLabels":{"$SIM_LABEL":"true"}},"parallelism":$(width),
  "activeDeadlineSeconds":900}}
EOF
      ;;
  esac
}

create_job() {
  local kind=${KINDS[RANDOM % ${#KINDS[@]}]} name
  # One of each kind first, so even a short run sees every kind finish.
  ((SEQ < ${#KINDS[@]})) && kind=${KINDS[SEQ]}
  SEQ=$((SEQ + 1))
  name=soak-${kind}-$SEQ
  if manifest "$kind" "$name" | k apply -f - >/dev/null 2>>"$OUT/churn-errors"; then
    LIVE+=("$kind/$name")
    CREATED[$kind]=$((${CREATED[$kind]:-0} + 1))
  else
    say "create $kind/$name failed (kept going): $(tail -n 1 "$OUT/churn-errors")"
  fi
}

pick() { printf '%s' "${LIVE[RANDOM % ${#LIVE[@]}]}"; }

# A live job of the soak's own that a check has seen finished, if any.
pick_finished() {
  local n=${#LIVE[@]} start=$RANDOM i job
  for ((i = 0; i < n; i++)); do
    job=${LIVE[(start + i) % n]}
    grep -qixF "$job" "$OUT/finished" && printf '%s' "$job" && return 0
  done
  return 1
}

edit_job() {
  local job kind
  job=$(pick)
  kind=${job%%/*}
  case $kind in
    imagepulljob | imagelistpulljob)
      k -n "$NS" patch "$job" --type=merge -p "{\"spec\":{\"parallelism\":$(width)}}" ;;
    *) k -n "$NS" label "$job" --overwrite "soak.nodeimage.dev/edit=$RANDOM" ;;
  esac >/dev/null 2>>"$OUT/churn-errors" && EDITED[$kind]=$((${EDITED[$kind]:-0} + 1)) ||
    say "edit $job failed (kept going): $(tail -n 1 "$OUT/churn-errors")"
}

delete_job() {
  local job=$1 i
  if k -n "$NS" delete "$job" --wait=false >/dev/null 2>>"$OUT/churn-errors"; then
    for i in "${!LIVE[@]}"; do [[ ${LIVE[i]} == "$job" ]] && unset 'LIVE[i]'; done
    LIVE=("${LIVE[@]}")
    DELETED[${job%%/*}]=$((${DELETED[${job%%/*}]:-0} + 1))
  else
    say "delete $job failed (kept going): $(tail -n 1 "$OUT/churn-errors")"
  fi
}

churn_step() {
  local r=$((RANDOM % 20)) job
  if ((${#LIVE[@]} < 2 || (${#LIVE[@]} < MAX_JOBS && r < 8))); then
    create_job
  elif ((r >= 8 && r < 11)); then
    edit_job
  elif job=$(pick_finished); then
    delete_job "$job"
  elif ((RANDOM % 8 == 0)); then
    # Now and then a job still running (a delete mid-pull must leave
    # nothing behind either).
    delete_job "$(pick)"
  fi
}

# ---------------------------------------------------------------------------
# Faults (a background loop; a fault it cannot recover from ends the run)
# ---------------------------------------------------------------------------
restart_nodeimage() {
  NODEIMAGE_BIN=$BIN "$TESTS_DIR/nodeimage.sh" start >>"$OUT/restarts.log" 2>&1
}

# restart_recorded NAME CMD DOWN_SECONDS: stop the cluster daemon NAME,
# wait, start it again with its command line CMD (as setup recorded it).
restart_recorded() {
  local name=$1 cmd=$2 down=$3 argv
  read -ra argv <<<"$cmd"
  stop_daemon "$name" 2>>"$OUT/restarts.log"
  sleep "$down"
  start_daemon "$name" "${argv[@]}" 2>>"$OUT/restarts.log"
}

api_ready() { "$KUBECTL" --request-timeout=5s get --raw /readyz >/dev/null 2>&1; }

fault() {
  local f=$1 pid nodes
  case $f in
    controller)
      pid=$(recorded_pid controller)
      kill -KILL "$pid"
      sleep 2
      restart_nodeimage
      ;;
    apiserver)
      restart_recorded apiserver "$APISERVER_CMD" 3
      wait_until 180 "the API server ready again" apiserver api_ready
      ;;
    registry)
      restart_recorded "$REGISTRY_DAEMON" "$REGISTRY_CMD" 20
      ;;
    daemon)
      read -ra nodes <<<"$NODEIMAGE_NODES"
      pid=$(recorded_pid "daemon-${nodes[RANDOM % ${#nodes[@]}]}")
      kill -KILL "$pid"
      sleep 2
      restart_nodeimage
      ;;
    sim)
      kill -KILL "$(recorded_pid soak-sim)"
      sleep 2
      start_sim 2>>"$OUT/restarts.log"
      ;;
  esac
}

fault_loop() {
  RANDOM=$((SEED + 1))
  local faults f started=$SECONDS wait_s
  read -ra faults <<<"$FAULTS"
  while :; do
    wait_s=$((FAULT_SECONDS / 2 + RANDOM % (FAULT_SECONDS + 1)))
    while ((wait_s-- > 0)); do
      [[ -f $OUT/stop ]] && return 0
      sleep 1
    done
    f=${faults[RANDOM % ${#faults[@]}]}
    if [[ $f == controller ]] && (((SECONDS - started) * 100 >= RUN_SECONDS * KILLS_UNTIL)); then
      f=daemon
    fi
    say "fault: $f"
    echo "$f" >>"$OUT/faults"
    if ! (fault "$f"); then
      say "fault $f: could not recover (logs in $OUT/restarts.log)"
      touch "$OUT/fatal"
      return 1
    fi
  done
}

# ---------------------------------------------------------------------------
# Invariants
# ---------------------------------------------------------------------------
CHECKS=0
SKIPPED=0
# shellcheck disable=SC2016 # jq programs
COUNTS_JQ='
  .items[] | select(.metadata.name | startswith("soak-")) |
  (.kind + "/" + .metadata.name) as $job | .status as $s |
  if .kind == "ImagePullJob" then
    select($s.completionTime != null) |
    if ($s.desired // 0) != $all or (($s.succeeded // 0) + ($s.failed // 0)) != ($s.desired // 0)
    then "counts \($job): desired \($s.desired) succeeded \($s.succeeded) failed \($s.failed), \($all) nodes selected" else empty end,
    "finished \($job)"
  elif .kind == "ImageListPullJob" then
    select($s.completionTime != null) |
    if ($s.desired // 0) != (.spec.images | length) or ($s.completed // 0) != ($s.desired // 0)
    then "counts \($job): desired \($s.desired) completed \($s.completed), \(.spec.images | length) images" else empty end,
    "finished \($job)"
  elif .kind == "ImageRemovalJob" then
    select($s.completionTime != null) |
    if ($s.desired // 0) != $sim or (($s.succeeded // 0) + ($s.kept // 0) + ($s.failed // 0)) != ($s.desired // 0)
    then "counts \($job): desired \($s.desired) succeeded \($s.succeeded) kept \($s.kept) failed \($s.failed), \($sim) nodes selected" else empty end,
    "finished \($job)"
  else
    select($s.state == "Successful" or $s.state == "Failed") |
    ([$s.nodeStatus[]? | select(.phase | IN("Successful", "Failure", "Unknown"))] | length) as $done |
    if $done != $sim or ($s.nodeStatus | length) != $sim
    then "counts \($job): \($s.state) with \($s.nodeStatus | length) node results (\($done) finished), \($sim) nodes selected" else empty end,
    "finished \($job)"
  end'
# Things that may last a moment, keyed so that a later check finds them again.
# shellcheck disable=SC2016
LINGER_JQ='
  ($jobs.items | map(.metadata.uid)) as $uids |
  ($jobs.items | map("\(.kind)/\(.metadata.namespace // "")/\(.metadata.name)")) as $refs |
  ($nis.items[] | .metadata.name as $n | (.spec.images // {}) | to_entries[] | .key as $i |
    .value.tags[]? | .tag as $t | .ownerReferences[]? |
    select((.name | startswith("soak-")) and (.uid | IN($uids[]) | not)) |
    "entry nodeimage/\($n) \($i):\($t) owned by gone \(.kind)/\(.name)"),
  ($nis.items[] | .metadata.name as $n | .spec.removals[]? |
    select((.job | startswith("soak-")) and (.uid | IN($uids[]) | not)) |
    "removal entry nodeimage/\($n) of gone ImageRemovalJob/\(.job)"),
  ($copies.items[] | select(.metadata.annotations["nodeimage.dev/source"] == ($ns + "/soak-auth")) |
    (.metadata.annotations["nodeimage.dev/references"] // "" | split(",") | map(select(. != ""))) as $r |
    select([$r[] | select(IN($refs[]))] | length == 0) |
    "copy secret/\(.metadata.name) with no live job (references: \($r | join(",")))"),
  ($jobs.items[] | select(.metadata.name | startswith("soak-")) | select(.metadata.deletionTimestamp != null) |
    "finalizer \(.kind)/\(.metadata.name) deleted at \(.metadata.deletionTimestamp), kept by \(.metadata.finalizers)")'

fetch() {
  k get imagepulljobs,imagelistpulljobs -n "$NS" -o json >"$OUT/kruise.json" &&
    k get imageprepulljobs,nodeupgradejobs,imageremovaljobs -o json >"$OUT/kubeedge.json" &&
    jq -s '{items: (.[0].items + .[1].items)}' "$OUT/kruise.json" "$OUT/kubeedge.json" >"$OUT/jobs.json" &&
    k get nodeimages -o json >"$OUT/nodeimages.json" &&
    k get secrets -n "$SECRETS_NS" -l nodeimage.dev/pull-secret-copy -o json >"$OUT/copies.json"
}

violation() {
  say "VIOLATION: $*"
  echo "$*" >>"$OUT/violations"
}

check() {
  local now line first key
  now=$(date +%s)
  sample_rss "$now"
  if ! fetch 2>>"$OUT/check-errors"; then
    SKIPPED=$((SKIPPED + 1))
    say "check skipped: the API did not answer ($(tail -n 1 "$OUT/check-errors"))"
    return 0
  fi
  CHECKS=$((CHECKS + 1))
  while IFS= read -r line; do
    case $line in
      finished*) echo "${line#finished }" >>"$OUT/finished" ;;
      *) grep -qxF "$line" "$OUT/confirmed" || { echo "$line" >>"$OUT/confirmed" && violation "$line"; } ;;
    esac
  done < <(jq -r --argjson all "$ALL_NODES" --argjson sim "$SIMULATED" "$COUNTS_JQ" "$OUT/jobs.json")
  sort -u -o "$OUT/finished" "$OUT/finished" 2>/dev/null || true
  # Lingering things: a key seen before keeps its first time.
  : >"$OUT/linger.new"
  while IFS= read -r key; do
    first=$(awk -F'\t' -v k="$key" '$2 == k { print $1; exit }' "$OUT/linger" 2>/dev/null)
    first=${first:-$now}
    printf '%s\t%s\n' "$first" "$key" >>"$OUT/linger.new"
    if ((now - first >= GRACE)) && ! grep -qxF "$key" "$OUT/confirmed"; then
      echo "$key" >>"$OUT/confirmed"
      violation "$key (for $((now - first)) s)"
    fi
  done < <(jq -nr --slurpfile j "$OUT/jobs.json" --slurpfile n "$OUT/nodeimages.json" \
    --slurpfile c "$OUT/copies.json" --arg ns "$NS" \
    "\$j[0] as \$jobs | \$n[0] as \$nis | \$c[0] as \$copies | $LINGER_JQ")
  # What lingered before and is gone now: how long cleaning it up took.
  awk -F'\t' -v now="$now" 'NR == FNR { seen[$2] = 1; next } !($2 in seen) { printf "%d\t%s\n", now - $1, $2 }' \
    "$OUT/linger.new" "$OUT/linger" >>"$OUT/resolved"
  mv "$OUT/linger.new" "$OUT/linger"
  say "check $CHECKS: ${#LIVE[@]} live jobs, $(sort -u "$OUT/finished" 2>/dev/null | wc -l) finished so far, $(wc -l <"$OUT/linger") lingering, $(wc -l <"$OUT/violations") violations"
}

sample_rss() {
  local pid rss
  pid=$(recorded_pid controller)
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
  # No sample while a fault has the controller down (a check that came
  # then ended the whole run: `[[ ]] &&` as the last command failed it).
  if [[ -n $rss ]]; then
    printf '%s\t%s\t%s\n' "$1" "$pid" "$rss" >>"$OUT/rss.tsv"
  fi
}

# The last controller's RSS trend (see the header).
judge_rss() {
  local verdict
  verdict=$(awk -F'\t' -v warm="$RSS_WARMUP" -v need="$RSS_MIN" '
    { t[NR] = $1; p[NR] = $2; r[NR] = $3 }
    function median(a, n,   i, j, x) {
      for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
      if (NR == 0) { print "none no RSS samples"; exit }
      pid = p[NR]; for (i = NR; i >= 1 && p[i] == pid; i--) start = t[i]
      life = t[NR] - start
      if (life < warm + need) { printf "skip controller pid %s lived %d s of the %d s needed to judge its RSS\n", pid, life, warm + need; exit }
      na = 0; nb = 0
      for (i = 1; i <= NR; i++) if (p[i] == pid) {
        if (t[i] >= start + warm && t[i] < start + warm + 300) a[++na] = r[i]
        if (t[i] > t[NR] - 300) b[++nb] = r[i]
      }
      ma = median(a, na); mb = median(b, nb)
      printf "%s controller pid %s: RSS median %d KiB after warm-up, %d KiB in the last 5 min (%+.1f %%)\n", (mb <= ma * 1.10 ? "flat" : "grew"), pid, ma, mb, (mb - ma) * 100 / ma
    }' "$OUT/rss.tsv" 2>/dev/null)
  say "RSS: ${verdict#* }"
  [[ $verdict != grew* ]] || violation "controller RSS grew more than 10 %: ${verdict#* }"
}

# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------
FAULT_PID=
finish() {
  local rc=$?
  touch "$OUT/stop"
  [[ -n $FAULT_PID ]] && kill "$FAULT_PID" 2>/dev/null || true
  teardown
  exit "$rc"
}
trap finish EXIT

# Everything the faults stopped is running again (nodeimage.sh reuses what runs).
recover_all() {
  local argv
  read -ra argv <<<"$REGISTRY_CMD"
  daemon_alive "$REGISTRY_DAEMON" || start_daemon "$REGISTRY_DAEMON" "${argv[@]}"
  read -ra argv <<<"$APISERVER_CMD"
  daemon_alive apiserver || start_daemon apiserver "${argv[@]}"
  wait_until 120 "the API server" - api_ready
  restart_nodeimage
  start_sim
}

# After the churn: every soak job deleted; nothing of theirs may stay.
settle() {
  local job deadline=$((SECONDS + SETTLE)) left
  for job in "${LIVE[@]}"; do k -n "$NS" delete "$job" --wait=false >/dev/null 2>&1 || true; done
  LIVE=()
  k -n "$NS" delete imagepulljobs,imagelistpulljobs --all --wait=false >/dev/null 2>&1 || true
  k delete imageprepulljobs,nodeupgradejobs -l "$SIM_LABEL=job" --wait=false >/dev/null 2>&1 || true
  while ((SECONDS < deadline)); do
    left=""
    if fetch 2>/dev/null; then
      left=$(jq -r '.items[] | select(.metadata.name | startswith("soak-")) | "job \(.kind)/\(.metadata.name) still there (finalizers \(.metadata.finalizers))"' "$OUT/jobs.json")
      left+=$(jq -r --arg ns "$NS" '(.items[] | .metadata.name as $n | (.spec.images // {}) | to_entries[] | .key as $i | .value.tags[]? | .tag as $t | .ownerReferences[]? | select(.name | startswith("soak-")) | "entry nodeimage/\($n) \($i):\($t) of \(.kind)/\(.name)")' "$OUT/nodeimages.json")
      left+=$(jq -r '.items[] | .metadata.name as $n | .spec.removals[]? | select(.job | startswith("soak-")) | "removal entry nodeimage/\($n) of ImageRemovalJob/\(.job)"' "$OUT/nodeimages.json")
      left+=$(jq -r --arg ns "$NS" '.items[] | select(.metadata.annotations["nodeimage.dev/source"] == ($ns + "/soak-auth")) | "copy secret/\(.metadata.name)"' "$OUT/copies.json")
      [[ -z $left ]] && { say "settled: every soak job, entry and secret copy is gone"; return 0; }
    else
      left="(the API did not answer)"
    fi
    sleep 5
  done
  while IFS= read -r line; do violation "left ${SETTLE}s after the end: $line"; done <<<"$left"
}

summary() {
  local kind fails=0 n
  say "summary (seed $SEED): $CHECKS checks ($SKIPPED skipped while the API was down), faults: $(sort "$OUT/faults" 2>/dev/null | uniq -c | awk '{ printf "%s %s, ", $1, $2 }')"
  for kind in "${KINDS[@]}"; do
    n=$(grep -ci "^$kind/" "$OUT/finished" 2>/dev/null || true)
    say "  $kind: created ${CREATED[$kind]:-0}, edited ${EDITED[$kind]:-0}, deleted ${DELETED[$kind]:-0}, seen finished ${n:-0}"
    if ((${n:-0} == 0)); then
      violation "no $kind finished during the soak: the run proves nothing for it"
    fi
  done
  ((CHECKS > 0)) || violation "no check ran"
  if [[ -s $OUT/resolved ]]; then
    say "cleanups seen lingering at a check: $(wc -l <"$OUT/resolved"), gone within $(sort -n "$OUT/resolved" | tail -n 1 | cut -f1) s at the most ($(sort -n "$OUT/resolved" | tail -n 1 | cut -f2 | cut -c1-120))"
  fi
  if [[ -s $OUT/violations ]]; then
    fails=$(wc -l <"$OUT/violations")
    say "FAILED: $fails violations ($OUT/violations)"
    return 1
  fi
  say "passed: every invariant held"
}

setup
RANDOM=$SEED
fault_loop &
FAULT_PID=$!
end=$((SECONDS + RUN_SECONDS))
next_check=$((SECONDS + CHECK_SECONDS))
while ((SECONDS < end)); do
  [[ -f $OUT/fatal ]] && die "a fault could not be recovered from; see $OUT/restarts.log"
  churn_step
  sleep $((1 + RANDOM % TICK))
  if ((SECONDS >= next_check)); then
    check
    next_check=$((SECONDS + CHECK_SECONDS))
  fi
done
touch "$OUT/stop"
say "churn over; waiting for the fault under way, if any"
wait "$FAULT_PID" || true
FAULT_PID=
recover_all
check
judge_rss
settle
summary

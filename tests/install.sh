#!/usr/bin/env bash
# nodeimage installed as a platform team installs it: the Helm chart with
# `helm install`, its images from the local registry, pods on the local
# cluster's real kubelet node. The steps are the ones docs/install.md gives
# ("On your cluster"); keep the two in step.
#
#   1. the process-run nodeimage of the e2e tests is stopped (two controllers
#      must not reconcile the same objects) and nodeimage's CRDs are deleted,
#      so Helm installs them as on a new cluster;
#   2. the release namespace is created with the Pod Security label the
#      daemon's hostPath needs, and `helm install --wait` of the *previous*
#      chart (tests/fixtures: what users run before they upgrade) runs the
#      controller (2 replicas, one leader) and the daemon (on the real
#      node); the local API server admits critical priority classes only
#      under a quota, as GKE does, so the quota that chart needed is made by
#      hand first, as its users had to;
#   3. an ImagePullJob in a tenant namespace pulls an image of the auth
#      registry with the tenant's pull secret, through the daemon pod and the
#      node's containerd;
#   4. with the auth registry stopped, a Pod of that image
#      (imagePullPolicy: IfNotPresent) reaches Running on the real node:
#      kubelet uses what nodeimage pulled;
#   5. the README's CRD upgrade command works on CRDs that Helm installed;
#   6. the release (release/release.sh, `make release`, run before this):
#      the daemon image's signature is verified as docs/install.md says,
#      then the documented `helm upgrade --reset-then-reuse-values` to the
#      released chart, from its OCI reference, with both images by digest,
#      rolls the daemon while a slow pull is in flight, and the job still
#      completes; the hand-made quota then goes and a new daemon pod is
#      admitted under the chart's own (daemon.priorityQuota);
#   7. uninstall in the documented order (jobs first, then `helm uninstall`):
#      nothing is left stuck on a finalizer and the CRDs stay.
#
# It runs last in tests/run-all.sh: it replaces the e2e tests' nodeimage and
# deletes every nodeimage object. Needs the cluster with its real node
# (tests/cluster/real-node.sh), the release (release/release.sh: images,
# signatures, the chart in the registry; RELEASE_DIR, default dist/), and
# helm (tests/chart.sh installs it).
set -Eeuo pipefail
# shellcheck source=tests/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

CHART=$REPO_ROOT/charts/nodeimage
# The chart users upgrade from (tests/fixtures/README.md).
PREVIOUS_CHART=$REPO_ROOT/tests/fixtures/nodeimage-chart-28f48b6.tgz
RELEASE=nodeimage
NS=nodeimage-system
SECRETS_NS=nodeimage-secrets
TENANT=install-tenant
HELM=${HELM:-$STATE/bin/helm}

step() { printf '\n---- install: %s (%s)\n' "$*" "$(date +%H:%M:%S)" >&2; }
pass() { printf '  ok: %s\n' "$*" >&2; }
WORK=$(mktemp -d /tmp/nodeimage-install.XXXXXX)
fail() {
  printf '\nFAIL: %s\n' "$*" >&2
  diagnose >&2 || true
  exit 1
}
ENV_FILE=$STATE/env.sh
[[ -f $ENV_FILE ]] || { echo "no $ENV_FILE: start the local cluster first (tests/cluster/up.sh)" >&2; exit 1; }
# shellcheck disable=SC1090
. "$ENV_FILE"
RELEASE_DIR=${RELEASE_DIR:-$REPO_ROOT/dist}
for f in "$STATE/real-node.env" "$STATE/nodeimage-images.env" "$RELEASE_DIR/release.env"; do
  [[ -f $f ]] || { echo "no $f: run tests/cluster/real-node.sh and release/release.sh first" >&2; exit 1; }
  # shellcheck disable=SC1090
  . "$f"
done
kc() { "$KUBECTL" --request-timeout=30s "$@"; }
[[ -x $HELM ]] || { echo "no helm at $HELM (tests/chart.sh installs it)" >&2; exit 1; }
NODE=$NODEIMAGE_REAL_NODE
IMAGE_TAG=$NODEIMAGE_IMAGE_TAG
IMAGE_PREFIX=$NODEIMAGE_IMAGE_PREFIX

# What a failing step leaves for the reader: pods, events, logs.
diagnose() {
  echo "---- pods in $NS and $TENANT"
  kc get pods -n "$NS" -o wide 2>&1 || true
  kc get pods -n "$TENANT" -o wide 2>&1 || true
  echo "---- recent events in $NS and $TENANT"
  kc get events -n "$NS" --sort-by=.lastTimestamp 2>&1 | tail -n 20 || true
  kc get events -n "$TENANT" --sort-by=.lastTimestamp 2>&1 | tail -n 20 || true
  for p in $(kc get pods -n "$NS" -o name 2>/dev/null); do
    echo "---- logs of $p"
    kc logs -n "$NS" "$p" --tail=30 --all-containers 2>&1 || true
  done
}

SLOW_PROXY_PID=
cleanup() {
  local rc=$?
  [[ -n $SLOW_PROXY_PID ]] && kill "$SLOW_PROXY_PID" 2>/dev/null || true
  # The auth registry is back for whatever runs next.
  # shellcheck disable=SC2086
  [[ -n ${REGISTRY_CMD:-} ]] && { start_daemon "$REGISTRY_DAEMON" $REGISTRY_CMD >/dev/null 2>&1 || true; }
  if [[ -z ${KEEP_INSTALL_TEST:-} ]]; then
    kc delete pod -n "$TENANT" app --ignore-not-found --wait=false >/dev/null 2>&1 || true
    "$HELM" uninstall "$RELEASE" -n "$NS" --wait --timeout 2m >/dev/null 2>&1 || true
    kc delete namespace "$TENANT" "$NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
  if ((rc == 0)); then echo "install tests passed" >&2; else echo "install tests FAILED" >&2; fi
  exit "$rc"
}
trap cleanup EXIT

# wait_for WHAT SECONDS CMD...: until CMD succeeds.
wait_for() {
  local what=$1 secs=$2 deadline
  shift 2
  deadline=$((SECONDS + secs))
  until "$@" >"$WORK/wait.out" 2>&1; do
    ((SECONDS < deadline)) || fail "$what: not within ${secs}s (last: $(tail -n 3 "$WORK/wait.out"))"
    sleep 2
  done
}

# ---------------------------------------------------------------------------
step "a clean slate: the e2e tests' nodeimage stopped, nodeimage's CRDs deleted"
"$REPO_ROOT/tests/nodeimage.sh" stop >/dev/null 2>&1 || true
# Finalizers of jobs left by the e2e tests would hold the CRDs' deletion with
# no controller to clear them: nodeimage's own finalizers are dropped first.
for kind in imagepulljobs.apps.kruise.io imagelistpulljobs.apps.kruise.io \
  imageprepulljobs.operations.kubeedge.io nodeupgradejobs.operations.kubeedge.io; do
  { kc get "$kind" -A -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' 2>/dev/null || true; } |
    while read -r ns name; do
      [[ -n $name ]] || continue
      if [[ -n $ns ]]; then set -- -n "$ns"; else set --; fi
      kc patch "$kind" "$name" "$@" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    done
done
for f in "$CHART"/crds/*.yaml; do
  kc delete -f "$f" --ignore-not-found --wait=true --timeout=120s >/dev/null ||
    fail "deleting the CRD of $f failed"
done
# The e2e tests' controller made the secrets namespace outside Helm, which
# Helm refuses to adopt (docs/install.md, Uninstalling): remove it.
kc delete namespace "$SECRETS_NS" --ignore-not-found --wait=true --timeout=120s >/dev/null ||
  fail "deleting namespace $SECRETS_NS did not finish"
pass "nodeimage CRDs removed; no nodeimage process running"

# ---------------------------------------------------------------------------
step "helm install (docs/install.md, On your cluster)"
kc create namespace "$NS" --dry-run=client -o yaml | kc apply -f - >/dev/null
kc label namespace "$NS" pod-security.kubernetes.io/enforce=privileged --overwrite >/dev/null
# As on GKE (tests/kube/main.go), a Pod of a critical priority class is
# refused in a namespace with no quota for its class: the chart brings one
# (daemon.priorityQuota), or the DaemonSet would create no pods.
probe=$(kc run gke-quota-probe -n "$NS" --image="$NODEIMAGE_PAUSE_IMAGE" --restart=Never \
  --overrides='{"apiVersion":"v1","spec":{"priorityClassName":"system-node-critical"}}' \
  --dry-run=server -o name 2>&1 || true)
[[ $probe == *"insufficient quota to match these scopes"* ]] ||
  fail "the local API server admits a system-node-critical Pod without a quota, unlike GKE: $probe"
pass "a system-node-critical Pod without a quota is refused, as on GKE"
# What users of the previous chart, which brought no quota, made on GKE.
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ResourceQuota
metadata:
  name: by-hand-critical-pods
  namespace: $NS
spec:
  hard: {pods: "100"}
  scopeSelector:
    matchExpressions:
      - {scopeName: PriorityClass, operator: In, values: [system-node-critical]}
EOF
# The local cluster's specifics: its real node's containerd lives under the
# state directory, and pods go to the real node only (the simulated nodes
# have no kubelet).
VALUES=(--set "controller.image.repository=$IMAGE_PREFIX/controller"
  --set "controller.image.tag=$IMAGE_TAG"
  --set "daemon.image.repository=$IMAGE_PREFIX/daemon"
  --set "daemon.image.tag=$IMAGE_TAG"
  --set "daemon.containerdSocket=$NODEIMAGE_REAL_NODE_CONTAINERD"
  --set "daemon.containerdRoot=$NODEIMAGE_REAL_NODE_CONTAINERD_ROOT"
  --set "controller.nodeSelector.kubernetes\.io/hostname=$NODE"
  --set "daemon.nodeSelector.kubernetes\.io/hostname=$NODE"
  --set "secretsNamespace=$SECRETS_NS"
  --set logFormat=text)
t0=$SECONDS
"$HELM" install "$RELEASE" "$PREVIOUS_CHART" -n "$NS" "${VALUES[@]}" --wait --timeout 5m >"$WORK/install.out" 2>&1 ||
  fail "helm install of the previous chart failed: $(cat "$WORK/install.out")"
pass "helm install --wait of the previous chart ($(basename "$PREVIOUS_CHART")) returned in $((SECONDS - t0))s"
grep -q "rollout status" "$WORK/install.out" || fail "helm install printed no NOTES: $(cat "$WORK/install.out")"
for crd in nodeimages.apps.kruise.io imagepulljobs.apps.kruise.io imagelistpulljobs.apps.kruise.io \
  imageprepulljobs.operations.kubeedge.io nodeupgradejobs.operations.kubeedge.io; do
  kc get crd "$crd" >/dev/null 2>&1 || fail "helm install did not create CRD $crd"
done
pass "Helm installed the 5 CRDs"

CONTROLLER=$RELEASE-controller
DAEMON=$RELEASE-daemon
kc get deploy -n "$NS" "$CONTROLLER" >/dev/null 2>&1 || { CONTROLLER=$RELEASE-nodeimage-controller; DAEMON=$RELEASE-nodeimage-daemon; }
kc rollout status -n "$NS" "deploy/$CONTROLLER" --timeout=180s >/dev/null ||
  fail "the controller Deployment did not become available"
ready=$(kc get deploy -n "$NS" "$CONTROLLER" -o jsonpath='{.status.readyReplicas}')
[[ $ready == 2 ]] || fail "controller: $ready ready replicas, want 2"
kc rollout status -n "$NS" "ds/$DAEMON" --timeout=180s >/dev/null || fail "the daemon DaemonSet did not become ready"
dpod=$(kc get pods -n "$NS" -l app.kubernetes.io/component=daemon --field-selector "spec.nodeName=$NODE" -o jsonpath='{.items[0].metadata.name}')
[[ -n $dpod ]] || fail "no daemon pod on $NODE"
pass "controller 2/2 ready, daemon pod $dpod ready on $NODE (system-node-critical, under the hand-made quota)"

holder_ok() {
  local h
  h=$(kc get lease -n "$NS" nodeimage-controller -o jsonpath='{.spec.holderIdentity}')
  [[ -n $h ]] && kc get pod -n "$NS" "$h" >/dev/null
}
wait_for "a controller pod holds the leader Lease" 60 holder_ok
pass "one leader: $(kc get lease -n "$NS" nodeimage-controller -o jsonpath='{.spec.holderIdentity}')"
wait_for "the controller creates NodeImage $NODE" 60 kc get nodeimage "$NODE"
pass "NodeImage $NODE exists (the controller in a pod reaches the API server)"

# ---------------------------------------------------------------------------
step "an ImagePullJob with a pull secret, pulled by the daemon pod"
APP=$NODEIMAGE_AUTH_REGISTRY/install/app:v1
skopeo copy --quiet --src-tls-verify=false --dest-tls-verify=false \
  --dest-creds "$NODEIMAGE_AUTH_USER:$NODEIMAGE_AUTH_PASSWORD" \
  "docker://$NODEIMAGE_PAUSE_IMAGE" "docker://$APP" >"$WORK/push.out" 2>&1 ||
  fail "pushing $APP failed: $(cat "$WORK/push.out")"
"$NODEIMAGE_CRI" --socket "$NODEIMAGE_REAL_NODE_CONTAINERD" rmi "$APP" >/dev/null 2>&1 || true
kc create namespace "$TENANT" --dry-run=client -o yaml | kc apply -f - >/dev/null
kc create secret docker-registry -n "$TENANT" regcred --docker-server="$NODEIMAGE_AUTH_REGISTRY" \
  --docker-username="$NODEIMAGE_AUTH_USER" --docker-password="$NODEIMAGE_AUTH_PASSWORD" \
  --dry-run=client -o yaml | kc apply -f - >/dev/null
kc apply -f - >/dev/null <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: app
  namespace: $TENANT
spec:
  image: $APP
  pullSecrets: [regcred]
  selector:
    names: [$NODE]
  completionPolicy:
    type: Always
    activeDeadlineSeconds: 600
EOF
kc wait -n "$TENANT" ipj/app --for=condition=Complete --timeout=300s >/dev/null ||
  fail "the ImagePullJob did not complete: $(kc get ipj -n "$TENANT" app -o jsonpath='{.status}')"
succeeded=$(kc get ipj -n "$TENANT" app -o jsonpath='{.status.succeeded}')
[[ $succeeded == 1 ]] || fail "ImagePullJob: succeeded=$succeeded, want 1: $(kc get ipj -n "$TENANT" app -o jsonpath='{.status}')"
"$NODEIMAGE_CRI" --socket "$NODEIMAGE_REAL_NODE_CONTAINERD" status "$APP" >/dev/null ||
  fail "$APP is not in $NODE's containerd although the job succeeded"
pass "ImagePullJob app Complete; $APP is in $NODE's containerd"

# ---------------------------------------------------------------------------
step "the registry stopped, a Pod of that image starts on $NODE"
REGISTRY_DAEMON=registry-${NODEIMAGE_AUTH_REGISTRY##*:}
REGISTRY_CMD=$(recorded_cmd "$REGISTRY_DAEMON")
[[ -n $REGISTRY_CMD ]] || fail "no recorded command of $REGISTRY_DAEMON in $PIDS"
stop_daemon "$REGISTRY_DAEMON" 2>/dev/null
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://$NODEIMAGE_AUTH_REGISTRY/v2/" || true)
[[ $code == 000 ]] || fail "the auth registry still answers (HTTP $code)"
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: app
  namespace: $TENANT
spec:
  nodeSelector:
    kubernetes.io/hostname: $NODE
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: $APP
      imagePullPolicy: IfNotPresent
EOF
kc wait -n "$TENANT" pod/app --for=jsonpath='{.status.phase}'=Running --timeout=120s >/dev/null ||
  fail "the Pod did not reach Running: $(kc get pod -n "$TENANT" app -o jsonpath='{.status}')"
pass "Pod app Running on $NODE with the registry down"
# shellcheck disable=SC2086 # the recorded command line, split as it was given
start_daemon "$REGISTRY_DAEMON" $REGISTRY_CMD 2>/dev/null
REGISTRY_CMD=
wait_for "the auth registry to answer again" 30 curl -s -o /dev/null --max-time 2 "http://$NODEIMAGE_AUTH_REGISTRY/v2/"
kc delete pod -n "$TENANT" app --wait=false >/dev/null

# ---------------------------------------------------------------------------
step "the README's CRD upgrade command on CRDs Helm installed"
"$HELM" show crds "$CHART" | kc apply --server-side --force-conflicts -f - >"$WORK/crds.out" 2>&1 ||
  fail "helm show crds | kubectl apply --server-side --force-conflicts failed: $(cat "$WORK/crds.out")"
applied=$(grep -c "serverside-applied" "$WORK/crds.out" || true)
[[ $applied == 5 ]] || fail "the CRD upgrade command applied $applied CRDs, not 5: $(cat "$WORK/crds.out")"
pass "helm show crds | kubectl apply --server-side --force-conflicts: the 5 CRDs applied over Helm's"

# ---------------------------------------------------------------------------
step "the release's daemon image signature, verified as docs/install.md says"
DAEMON_REPO=${NODEIMAGE_DAEMON_IMAGE%@*} DAEMON_DIGEST=${NODEIMAGE_DAEMON_IMAGE#*@}
skopeo copy --quiet --src-tls-verify=false "docker://$DAEMON_REPO:${DAEMON_DIGEST/:/-}.sig" "oci:$WORK/sig:sig" \
  >"$WORK/sig.out" 2>&1 || fail "fetching the signature of $NODEIMAGE_DAEMON_IMAGE: $(cat "$WORK/sig.out")"
"$STATE/bin/imagesign" verify -pub "$RELEASE_DIR/cosign.pub" -repository "$DAEMON_REPO" -digest "$DAEMON_DIGEST" \
  "$WORK/sig" >"$WORK/verify.out" 2>&1 || fail "the daemon image's signature does not verify: $(cat "$WORK/verify.out")"
other=${NODEIMAGE_CONTROLLER_IMAGE#*@}
! "$STATE/bin/imagesign" verify -pub "$RELEASE_DIR/cosign.pub" -repository "$DAEMON_REPO" -digest "$other" \
  "$WORK/sig" >/dev/null 2>&1 || fail "the daemon's signature verified for another digest ($other)"
pass "$(cat "$WORK/verify.out"); not for another digest"

step "helm upgrade --reset-then-reuse-values to the released chart (OCI) with the images by digest while a pull is in flight"
"$HELM" pull "$NODEIMAGE_CHART" --version "$NODEIMAGE_VERSION" --plain-http -d "$WORK" >"$WORK/pull.out" 2>&1 ||
  fail "helm pull $NODEIMAGE_CHART failed: $(cat "$WORK/pull.out")"
grep -q "Digest: $NODEIMAGE_CHART_DIGEST" "$WORK/pull.out" ||
  fail "the chart in the registry is not the one released ($NODEIMAGE_CHART_DIGEST): $(cat "$WORK/pull.out")"
# A ~50 MB image through a proxy at 2 MB/s: about 25 s in flight.
coproc SLOW { "$REPO_ROOT/target/debug/ni-slow-proxy" "$NODEIMAGE_REGISTRY" 2000000; }
SLOW_PROXY_PID=$SLOW_PID
read -r -t 10 -u "${SLOW[0]}" SLOW_ADDR || fail "ni-slow-proxy did not start"
BIG=$SLOW_ADDR/big:v1  # tests/cluster/up.sh's ~50 MB image
kc apply -f - >/dev/null <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: big
  namespace: $TENANT
spec:
  image: $BIG
  selector:
    names: [$NODE]
  pullPolicy:
    timeoutSeconds: 300
  completionPolicy:
    type: Always
    activeDeadlineSeconds: 900
EOF
pulling() { [[ "$(kc get nodeimage "$NODE" -o jsonpath='{.status.pulling}')" -ge 1 ]]; }
wait_for "the daemon starts pulling $BIG" 60 pulling
old_pod=$dpod
# As README.md and docs/install.md say: the values given at install are kept,
# the new chart's defaults (new values included) apply to the rest.
"$HELM" upgrade "$RELEASE" "$NODEIMAGE_CHART" --version "$NODEIMAGE_VERSION" --plain-http -n "$NS" \
  --reset-then-reuse-values \
  --set "controller.image.digest=${NODEIMAGE_CONTROLLER_IMAGE#*@}" --set "daemon.image.digest=$DAEMON_DIGEST" \
  --wait --timeout 5m >"$WORK/upgrade.out" 2>&1 || fail "helm upgrade failed: $(cat "$WORK/upgrade.out")"
kc rollout status -n "$NS" "ds/$DAEMON" --timeout=180s >/dev/null || fail "the daemon did not roll"
kc rollout status -n "$NS" "deploy/$CONTROLLER" --timeout=180s >/dev/null || fail "the controller did not roll"
args=$(kc get deploy -n "$NS" "$CONTROLLER" -o jsonpath='{.spec.template.spec.containers[0].args}')
[[ $args == *--skip-nodes-labelled=* && $args == *--secrets-namespace=$SECRETS_NS* ]] ||
  fail "after the upgrade the controller lacks the new chart's default or the value given at install: $args"
dpod=$(kc get pods -n "$NS" -l app.kubernetes.io/component=daemon --field-selector "spec.nodeName=$NODE" -o jsonpath='{.items[0].metadata.name}')
[[ $dpod != "$old_pod" ]] || fail "the daemon pod was not replaced by helm upgrade"
img=$(kc get pod -n "$NS" "$dpod" -o jsonpath='{.spec.containers[0].image}')
[[ $img == "$NODEIMAGE_DAEMON_IMAGE" ]] || fail "the new daemon pod runs $img, not $NODEIMAGE_DAEMON_IMAGE"
cimg=$(kc get deploy -n "$NS" "$CONTROLLER" -o jsonpath='{.spec.template.spec.containers[0].image}')
[[ $cimg == "$NODEIMAGE_CONTROLLER_IMAGE" ]] || fail "the controller runs $cimg, not $NODEIMAGE_CONTROLLER_IMAGE"
pass "helm upgrade rolled the daemon ($old_pod -> $dpod, $img)"
kc wait -n "$TENANT" ipj/big --for=condition=Complete --timeout=600s >/dev/null ||
  fail "the in-flight job did not complete after the rollout: $(kc get ipj -n "$TENANT" big -o jsonpath='{.status}')"
succeeded=$(kc get ipj -n "$TENANT" big -o jsonpath='{.status.succeeded}')
[[ $succeeded == 1 ]] || fail "in-flight job: succeeded=$succeeded, want 1: $(kc get ipj -n "$TENANT" big -o jsonpath='{.status}')"
pass "the pull in flight during the rollout completed (ImagePullJob big Succeeded on $NODE)"
kc get resourcequota -n "$NS" "$DAEMON-priority" >/dev/null 2>&1 || fail "the upgraded chart made no priority quota"
kc delete resourcequota -n "$NS" by-hand-critical-pods >/dev/null
kc delete pod -n "$NS" "$dpod" --wait=true --timeout=60s >/dev/null
replaced_and_running() {
  local p
  p=$(kc get pods -n "$NS" -l app.kubernetes.io/component=daemon --field-selector "spec.nodeName=$NODE" \
    -o jsonpath='{.items[?(@.status.phase=="Running")].metadata.name}')
  [[ -n $p && $p != "$dpod" ]]
}
wait_for "a new daemon pod admitted under the chart's quota alone" 120 replaced_and_running
pass "the hand-made quota gone, a new system-node-critical daemon pod runs under the chart's quota"

# ---------------------------------------------------------------------------
step "uninstall in the documented order: jobs, then helm uninstall"
kc delete imagepulljobs,imagelistpulljobs -A --all --wait=true --timeout=120s >/dev/null ||
  fail "deleting the jobs before the uninstall did not finish (a finalizer stuck?)"
kc delete imageprepulljobs,nodeupgradejobs --all --wait=true --timeout=120s >/dev/null ||
  fail "deleting the KubeEdge jobs did not finish"
"$HELM" uninstall "$RELEASE" -n "$NS" --wait --timeout 3m >"$WORK/uninstall.out" 2>&1 ||
  fail "helm uninstall failed: $(cat "$WORK/uninstall.out")"
left=$(kc get imagepulljobs,imagelistpulljobs -A -o name 2>&1; kc get imageprepulljobs,nodeupgradejobs -o name 2>&1)
[[ -z $left ]] || fail "objects left after uninstall: $left"
for crd in nodeimages.apps.kruise.io imagepulljobs.apps.kruise.io; do
  kc get crd "$crd" >/dev/null 2>&1 || fail "helm uninstall deleted CRD $crd (CRDs must stay)"
done
kc get namespace "$SECRETS_NS" >/dev/null 2>&1 &&
  { kc wait --for=delete "namespace/$SECRETS_NS" --timeout=120s >/dev/null 2>&1 ||
    fail "the secrets namespace $SECRETS_NS is stuck terminating"; }
pass "uninstalled: no job left, no stuck namespace, the CRDs stay"

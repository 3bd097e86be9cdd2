#!/usr/bin/env bash
# Tests of the Helm chart charts/nodeimage against the local cluster:
#
#   1. charts/nodeimage/crds is an exact copy of crds/yaml;
#   2. `helm lint --strict`, with the default values and with every optional
#      part on; the dashboard is valid JSON;
#   3. renders: what the DaemonSet and Deployment must contain, and the value
#      combinations the chart must refuse;
#   4. the chart's CRDs, and `helm template` (defaults, and every optional
#      part on, once with ServiceMonitors and once with PodMonitors),
#      applied with `kubectl apply --dry-run=server` (stand-in Prometheus
#      Operator CRDs from tests/manifests/monitoring-crds.yaml, installed
#      only if absent; the nodeimage CRDs are installed only if absent);
#   4b. the chart refuses to install (helm install --dry-run=server) over
#      a CRD that is not nodeimage's, unless takeOver=true, and installs
#      once nodeimage's CRDs are applied as docs/migration.md says;
#   5. the RBAC, for real: the chart applied as release "chart-test" in
#      namespace nodeimage-chart-test (no kubelet here, so its pods never
#      run), then as the daemon's ServiceAccount (a token from the API
#      server) it can patch a NodeImage's status and get a secret in the
#      secrets namespace, and cannot get a secret elsewhere, change a
#      NodeImage's spec, or list secrets; its events only in "default"; the
#      node-identity admission policy: a token bound to a node (node-1) may patch
#      its NodeImage status and not another's (node-2), a token bound to no node
#      none; the controller's ServiceAccount is checked with `kubectl auth can-i`;
#   6. the real nodeimage-daemon run with a kubeconfig holding only that
#      token, against a fake NodeImage and node-1's containerd: it pulls an
#      image (status Succeeded), pulls from the auth registry with a pull
#      secret copied into the secrets namespace (Succeeded), and fails a tag
#      whose pull secret is in another namespace with "forbidden".
#
# Everything it creates is deleted at the end (also on failure). Needs a
# running local cluster (tests/cluster/up.sh); installs helm with
# `go install` into $STATE/bin when it is missing.
#
#   tests/chart.sh
#   KEEP_CHART_TEST=1 tests/chart.sh   # leave the test release in place
#
# Environment: HELM (a helm binary to use instead), HELM_VERSION (default
# v3.21.4), NODEIMAGE_DAEMON_BIN (daemon binary; default: cargo build).
set -Eeuo pipefail
# shellcheck source=tests/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh"

HELM_VERSION=${HELM_VERSION:-v3.21.4}
CHART=$REPO_ROOT/charts/nodeimage
RELEASE=chart-test
NS=nodeimage-chart-test                   # release namespace
SECRETS_NS=nodeimage-chart-test-secrets   # the chart's secretsNamespace
OTHER_NS=nodeimage-chart-test-other       # a namespace the daemon must not read
FAKE_NI=nodeimage-chart-test              # fake NodeImage (and a fake Node, no kubelet)
OTHER_NI=nodeimage-chart-test-other       # another fake NodeImage, of no Node
PULL_SECRET=chart-test-pull
TEST_LABEL=nodeimage.dev/chart-test=true
DAEMON_SA=$RELEASE-nodeimage-daemon
CONTROLLER_SA=$RELEASE-nodeimage-controller
# Values of the test release; the same for install and cleanup.
# The image repositories are required (no images are published); these
# renders never run the pods, so any well-formed name does.
IMAGES=(--set controller.image.repository=registry.example.test/nodeimage/controller
  --set daemon.image.repository=registry.example.test/nodeimage/daemon)
RELEASE_VALUES=("${IMAGES[@]}" --set "secretsNamespace=$SECRETS_NS"
  --set controller.replicas=2 --set controller.leaderElection.enabled=true)

step() { printf '\n---- chart: %s (%s)\n' "$*" "$(date +%H:%M:%S)" >&2; }
pass() { printf '  ok: %s\n' "$*" >&2; }
fail() {
  printf '\nFAIL: %s\n' "$*" >&2
  exit 1
}

ENV_FILE=$STATE/env.sh
[[ -f $ENV_FILE ]] || fail "no $ENV_FILE: start the local cluster first (tests/cluster/up.sh)"
# shellcheck disable=SC1090
. "$ENV_FILE"
kc() { "$KUBECTL" "$@"; }
kc get --raw /readyz >/dev/null 2>&1 || fail "the API server in $KUBECONFIG is not ready"

WORK=$(mktemp -d /tmp/nodeimage-chart-test.XXXXXX)
DAEMON_PID=
MONITORING_CRDS_OURS=0
CREATED_NIS=()
PULLED_REFS=()

# ---------------------------------------------------------------------------
# Cleanup: everything this script creates.
# ---------------------------------------------------------------------------
render_release() {
  "$HELM" template "$RELEASE" "$CHART" --namespace "$NS" "${RELEASE_VALUES[@]}"
}

cleanup_release() {
  if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill "$DAEMON_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$DAEMON_PID" 2>/dev/null || true
  fi
  DAEMON_PID=
  local ref
  for ref in "${PULLED_REFS[@]}"; do
    "$NODEIMAGE_CRI" --socket "$NODEIMAGE_CONTAINERD_1" rmi "$ref" >/dev/null 2>&1 || true
  done
  PULLED_REFS=()
  kc delete node "$FAKE_NI" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kc delete nodeimage "$FAKE_NI" "$OTHER_NI" "${CREATED_NIS[@]}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  if [[ -n ${HELM:-} && -x ${HELM:-} ]]; then
    render_release 2>/dev/null | kc delete --ignore-not-found --wait=false -f - >/dev/null 2>&1 || true
  fi
  # Pods of the Deployment/DaemonSet never run (no kubelet); none is bound to
  # a node either (no scheduler), but force them out to be sure nothing
  # holds the namespace.
  kc delete pods --all -n "$NS" --force --grace-period=0 >/dev/null 2>&1 || true
  kc delete namespace "$NS" "$SECRETS_NS" "$OTHER_NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  local t0=$SECONDS left
  while true; do
    left=$(kc get namespace "$NS" "$SECRETS_NS" "$OTHER_NS" --ignore-not-found -o name 2>&1) || true
    [[ -z $left ]] && break
    if ((SECONDS - t0 >= 120)); then
      echo "cleanup: still present after 120s: $left" >&2
      break
    fi
    sleep 1
  done
  if ((SECONDS - t0 > 5)); then echo "cleanup: namespaces deleted in $((SECONDS - t0))s" >&2; fi
}

on_exit() {
  local rc=$?
  if [[ -z ${KEEP_CHART_TEST:-} ]]; then
    cleanup_release
    if ((MONITORING_CRDS_OURS)); then
      kc delete -f "$REPO_ROOT/tests/manifests/monitoring-crds.yaml" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    fi
  else
    echo "KEEP_CHART_TEST set: leaving release $RELEASE in $NS and the daemon (pid ${DAEMON_PID:-none})" >&2
  fi
  if ((rc != 0)) && [[ -f $WORK/daemon.log ]]; then
    echo "---- last lines of the daemon's log ($WORK/daemon.log) ----" >&2
    tail -n 30 "$WORK/daemon.log" >&2 || true
  fi
  if [[ -z ${KEEP_CHART_TEST:-} ]]; then rm -rf "$WORK"; fi
  if ((rc == 0)); then echo "chart tests passed" >&2; else echo "chart tests FAILED" >&2; fi
  exit "$rc"
}
trap on_exit EXIT
trap 'echo "chart.sh: command failed at line $LINENO: $BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------------------
# 0. helm
# ---------------------------------------------------------------------------
step "helm"
# $STATE/bin survives tests/cluster/down.sh; helm.stamp records the version
# built (`helm version` shows only "v3.21": go install sets no ldflags).
if [[ -z ${HELM:-} ]]; then
  HELM=$STATE/bin/helm
  if [[ ! -x $HELM || "$(cat "$STATE/bin/helm.stamp" 2>/dev/null)" != "$HELM_VERSION" ]]; then
    command -v go >/dev/null 2>&1 || fail "helm is missing and go is not installed to build it"
    log "installing helm $HELM_VERSION with go install (about 3.5 minutes with cold Go caches)"
    t0=$SECONDS
    mkdir -p "$STATE/bin"
    GOBIN=$STATE/bin GOFLAGS=-buildvcs=false go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ||
      fail "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
    echo "$HELM_VERSION" >"$STATE/bin/helm.stamp"
    log "helm $HELM_VERSION installed in $((SECONDS - t0))s"
  fi
fi
[[ -x $HELM ]] || fail "helm binary $HELM is not executable"
pass "helm $(cat "$STATE/bin/helm.stamp" 2>/dev/null || "$HELM" version --short) at $HELM"

# ---------------------------------------------------------------------------
# 1. CRD copies
# ---------------------------------------------------------------------------
step "charts/nodeimage/crds is a copy of crds/yaml"
if ! diff -r "$REPO_ROOT/crds/yaml" "$CHART/crds" >"$WORK/crds.diff" 2>&1; then
  head -n 40 "$WORK/crds.diff" >&2
  fail "charts/nodeimage/crds differs from crds/yaml; refresh it with: rm -f charts/nodeimage/crds/*.yaml && cp crds/yaml/*.yaml charts/nodeimage/crds/ (make crds does this)"
fi
pass "$(find "$CHART/crds" -name '*.yaml' | wc -l) CRDs identical"

# ---------------------------------------------------------------------------
# 2. Lint
# ---------------------------------------------------------------------------
ALL_ON=(--set daemon.upgrades.enabled=true
  --set-json 'daemon.credentialProviders.config={"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"ecr-credential-provider","matchImages":["*.dkr.ecr.*.amazonaws.com"],"defaultCacheDuration":"12h","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}'
  --set daemon.upgrades.nodeVersionSource=file:/etc/kubeedge/version
  --set metrics.serviceMonitor.enabled=true
  --set prometheusRule.enabled=true
  --set grafanaDashboard.enabled=true
  --set controller.replicas=2
  --set controller.leaderElection.enabled=true
  --set controller.podDisruptionBudget.enabled=true)
ALL_ON_POD=(--set daemon.upgrades.enabled=true
  --set-json 'daemon.credentialProviders.config={"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"ecr-credential-provider","matchImages":["*.dkr.ecr.*.amazonaws.com"],"defaultCacheDuration":"12h","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}'
  --set daemon.upgrades.nodeVersionSource=file:/etc/kubeedge/version
  --set metrics.podMonitor.enabled=true
  --set prometheusRule.enabled=true
  --set grafanaDashboard.enabled=true
  --set controller.replicas=2
  --set controller.leaderElection.enabled=true
  --set controller.podDisruptionBudget.enabled=true)

step "helm lint"
"$HELM" lint --strict "$CHART" "${IMAGES[@]}" >"$WORK/lint.out" 2>&1 || {
  cat "$WORK/lint.out" >&2
  fail "helm lint --strict with the default values failed"
}
pass "helm lint --strict (defaults)"
"$HELM" lint --strict "$CHART" "${IMAGES[@]}" "${ALL_ON[@]}" >"$WORK/lint.out" 2>&1 || {
  cat "$WORK/lint.out" >&2
  fail "helm lint --strict with every optional part on failed"
}
pass "helm lint --strict (every optional part on)"

if command -v python3 >/dev/null 2>&1; then
  python3 -m json.tool "$CHART/dashboards/nodeimage.json" >/dev/null 2>"$WORK/json.err" ||
    fail "charts/nodeimage/dashboards/nodeimage.json is not valid JSON: $(cat "$WORK/json.err")"
elif command -v jq >/dev/null 2>&1; then
  jq empty "$CHART/dashboards/nodeimage.json" 2>"$WORK/json.err" ||
    fail "charts/nodeimage/dashboards/nodeimage.json is not valid JSON: $(cat "$WORK/json.err")"
else
  fail "neither python3 nor jq is installed to check the dashboard JSON"
fi
pass "dashboard JSON is valid"

# ---------------------------------------------------------------------------
# 3. Renders
# ---------------------------------------------------------------------------
step "rendered objects"
render() { "$HELM" template "$RELEASE" "$CHART" --namespace "$NS" "${IMAGES[@]}" "$@"; }
# render_bare: without the image repositories.
render_bare() { "$HELM" template "$RELEASE" "$CHART" --namespace "$NS" "$@"; }

# expect_in FILE TEXT WHAT: fixed-string match.
expect_in() {
  grep -qF -- "$2" "$1" || fail "$3: rendered manifest lacks: $2 (see $1)"
}
expect_not_in() {
  if grep -qF -- "$2" "$1"; then fail "$3: rendered manifest must not contain: $2 (see $1)"; fi
}

render --show-only templates/daemon-daemonset.yaml >"$WORK/ds.yaml"
expect_in "$WORK/ds.yaml" "- operator: Exists" "daemon tolerates every taint"
expect_in "$WORK/ds.yaml" "priorityClassName: system-node-critical" "daemon priority class"
expect_in "$WORK/ds.yaml" "fieldPath: spec.nodeName" "NODE_NAME from the downward API"
expect_in "$WORK/ds.yaml" "- name: NODE_NAME" "NODE_NAME env"
expect_in "$WORK/ds.yaml" "--containerd-socket=/run/containerd/containerd.sock" "default containerd socket"
expect_in "$WORK/ds.yaml" "path: /run/containerd" "hostPath of the socket's directory"
expect_in "$WORK/ds.yaml" "maxUnavailable: 10%" "DaemonSet rolling update"
expect_in "$WORK/ds.yaml" "--health-addr=0.0.0.0:10221" "daemon health address"
expect_in "$WORK/ds.yaml" "path: /readyz" "daemon readiness probe"
expect_in "$WORK/ds.yaml" "runAsUser: 0" "daemon runs as root (socket)"
pass "DaemonSet: tolerations, priority class, NODE_NAME, socket hostPath, probes, update strategy"

render --show-only templates/daemon-daemonset.yaml \
  --set daemon.containerdSocket=/run/k3s/containerd/containerd.sock >"$WORK/ds-k3s.yaml"
expect_in "$WORK/ds-k3s.yaml" "--containerd-socket=/run/k3s/containerd/containerd.sock" "custom socket flag"
expect_in "$WORK/ds-k3s.yaml" "path: /run/k3s/containerd" "custom socket hostPath"
pass "daemon.containerdSocket moves the flag and the hostPath"
render --show-only templates/daemon-daemonset.yaml "${ALL_ON[@]}" >"$WORK/ds-cp.yaml"
expect_in "$WORK/ds-cp.yaml" "--image-credential-provider-config=/etc/nodeimage/credential-providers/config.yaml" "credential provider config flag"
expect_in "$WORK/ds-cp.yaml" "--image-credential-provider-bin-dir=/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec" "credential provider bin dir flag"
expect_in "$WORK/ds-cp.yaml" "name: ecr-credential-provider" "the provider config in a ConfigMap"
expect_in "$WORK/ds-cp.yaml" "checksum/credential-providers:" "a changed provider config rolls the daemons"
expect_not_in "$WORK/ds.yaml" "credential-provider" "no credential providers by default"
pass "daemon.credentialProviders: ConfigMap, flags, plugin directory, rollout checksum"

render --show-only templates/controller-deployment.yaml >"$WORK/deploy.yaml"
expect_in "$WORK/deploy.yaml" "replicas: 2" "default controller replicas (HA)"
expect_in "$WORK/deploy.yaml" "--secrets-namespace=nodeimage-secrets" "secrets namespace flag"
expect_in "$WORK/deploy.yaml" "--health-addr=0.0.0.0:8080" "controller health address"
expect_in "$WORK/deploy.yaml" "fieldPath: metadata.name" "POD_NAME from the downward API"
expect_in "$WORK/deploy.yaml" "readOnlyRootFilesystem: true" "read-only root filesystem"
expect_in "$WORK/deploy.yaml" "runAsNonRoot: true" "controller runs as non-root"
expect_in "$WORK/deploy.yaml" "--leader-elect" "leader election on by default"
render --show-only templates/controller-deployment.yaml "${ALL_ON[@]}" >"$WORK/deploy-ha.yaml"
expect_in "$WORK/deploy-ha.yaml" "replicas: 2" "HA replicas"
expect_in "$WORK/deploy-ha.yaml" "- --leader-elect" "leader election flag"
expect_in "$WORK/deploy-ha.yaml" "- --leader-election-namespace=$NS" "lease namespace flag"
pass "Deployment: flags, probes, security context; two replicas with leader election by default"

render >"$WORK/default.yaml"
for kind in ServiceMonitor PodMonitor PrometheusRule ConfigMap; do
  expect_not_in "$WORK/default.yaml" "kind: $kind" "optional $kind off by default"
done
expect_in "$WORK/default.yaml" "kind: PodDisruptionBudget" "a PodDisruptionBudget for the 2 controller replicas by default"
expect_in "$WORK/default.yaml" "memory: 512Mi" "controller memory limit sized from the benchmarks"
render --set controller.replicas=1 --set controller.leaderElection.enabled=false >"$WORK/single.yaml"
expect_not_in "$WORK/single.yaml" "kind: PodDisruptionBudget" "no PodDisruptionBudget for a single replica (it would block drains)"
expect_in "$WORK/default.yaml" "name: nodeimage-secrets" "the secrets namespace"
render "${ALL_ON[@]}" >"$WORK/all-on.yaml"
for kind in ServiceMonitor PrometheusRule ConfigMap PodDisruptionBudget Service; do
  expect_in "$WORK/all-on.yaml" "kind: $kind" "optional $kind when enabled"
done
expect_in "$WORK/all-on.yaml" 'grafana_dashboard: "1"' "dashboard ConfigMap label"
expect_in "$WORK/all-on.yaml" "nodeimage_daemon_pulls_total" "dashboard and alerts"
render "${ALL_ON_POD[@]}" >"$WORK/all-on-pod.yaml"
expect_in "$WORK/all-on-pod.yaml" "kind: PodMonitor" "PodMonitor when enabled"
expect_not_in "$WORK/all-on-pod.yaml" "kind: ServiceMonitor" "no ServiceMonitor with podMonitor"
pass "optional parts off by default, rendered when enabled"

# expect_refused WHAT MESSAGE ARGS...: the chart must refuse these values.
expect_refused() {
  local what=$1 msg=$2
  shift 2
  if render "$@" >"$WORK/refused.out" 2>&1; then
    fail "the chart accepted $what ($*)"
  fi
  grep -qF -- "$msg" "$WORK/refused.out" ||
    fail "refusing $what: expected the message '$msg', got: $(cat "$WORK/refused.out")"
}
expect_refused "ServiceMonitor and PodMonitor together" "not both" \
  --set metrics.serviceMonitor.enabled=true --set metrics.podMonitor.enabled=true
expect_refused "2 replicas without leader election" "needs controller.leaderElection.enabled=true" \
  --set controller.replicas=2 --set controller.leaderElection.enabled=false
expect_refused "a relative containerd socket path" "/daemon/containerdSocket" \
  --set daemon.containerdSocket=containerd.sock
pass "refuses both monitors, replicas > 1 without leader election, a relative socket path"

# values.schema.json: wrong types and values are refused with the field named.
if render_bare >"$WORK/refused.out" 2>&1; then
  fail "the chart rendered without an image repository"
fi
grep -qF "image.repository is required" "$WORK/refused.out" ||
  fail "no image repository: expected 'image.repository is required', got: $(cat "$WORK/refused.out")"
expect_refused "replicas as a string" "/controller/replicas" --set-string controller.replicas=two
expect_refused "0 replicas" "/controller/replicas" --set controller.replicas=0
expect_refused "an unknown logFormat" "/logFormat" --set logFormat=xml
expect_refused "maxConcurrentPulls 0" "/daemon/maxConcurrentPulls" --set daemon.maxConcurrentPulls=0
expect_refused "maxConcurrentPulls as a string" "/daemon/maxConcurrentPulls" --set-string daemon.maxConcurrentPulls=many
expect_refused "a disk threshold over 100" "/daemon/thresholds/disk" --set daemon.thresholds.disk=150
expect_refused "a port out of range" "/daemon/port" --set daemon.port=70000
expect_refused "an unknown pull policy" "/controller/image/pullPolicy" --set controller.image.pullPolicy=Sometimes
expect_refused "a misspelt top-level key" "additional properties 'controler' not allowed" --set controler.replicas=3
expect_refused "a malformed responseTimeout" "/controller/responseTimeout" --set controller.responseTimeout=ten
pass "values.schema.json refuses a missing image repository, wrong types, out-of-range numbers, unknown enums and misspelt keys"

# ---------------------------------------------------------------------------
# 4. Server-side dry runs
# ---------------------------------------------------------------------------
step "kubectl apply --dry-run=server"
# Leftovers of an interrupted run first.
cleanup_release
# The chart's CRDs: validated by the API server (a dry run: the cluster is
# shared, and tests/nodeimage.sh installs crds/yaml, identical by step 1);
# installed only when absent (this script run on its own).
kc apply --server-side --force-conflicts --dry-run=server -f "$CHART/crds" >"$WORK/crds.out" 2>&1 || {
  cat "$WORK/crds.out" >&2
  fail "the API server rejects the chart's CRDs (kubectl apply --server-side --dry-run=server -f charts/nodeimage/crds)"
}
pass "the API server accepts the chart's $(grep -c . "$WORK/crds.out") CRDs (dry run)"
for f in "$CHART"/crds/*.yaml; do
  crd=$(basename "$f" .yaml) # <group>_<plural>.yaml
  crd="${crd#*_}.${crd%%_*}"
  if ! kc get crd "$crd" >/dev/null 2>&1; then
    kc apply --server-side -f "$f" >/dev/null || fail "installing CRD $crd failed"
    kc wait --for=condition=Established --timeout=60s "crd/$crd" >/dev/null ||
      fail "CRD $crd did not become Established"
    pass "installed the missing CRD $crd"
  fi
done
if ! kc get crd servicemonitors.monitoring.coreos.com podmonitors.monitoring.coreos.com \
  prometheusrules.monitoring.coreos.com >/dev/null 2>&1; then
  MONITORING_CRDS_OURS=1
  kc apply -f "$REPO_ROOT/tests/manifests/monitoring-crds.yaml" >/dev/null ||
    fail "installing the stand-in monitoring.coreos.com CRDs failed"
  kc wait --for=condition=Established --timeout=60s \
    -f "$REPO_ROOT/tests/manifests/monitoring-crds.yaml" >/dev/null ||
    fail "the stand-in monitoring.coreos.com CRDs did not become Established"
  pass "installed stand-in monitoring.coreos.com CRDs"
fi
# Namespaced objects need their namespaces to exist, even in a dry run.
for ns in "$NS" "$SECRETS_NS"; do
  kc create namespace "$ns" >/dev/null
  kc label namespace "$ns" "$TEST_LABEL" >/dev/null
done

dry_run() {
  local what=$1
  shift
  render "$@" --set "secretsNamespace=$SECRETS_NS" >"$WORK/dry.yaml" ||
    fail "helm template ($what) failed"
  kc apply --dry-run=server -f "$WORK/dry.yaml" >"$WORK/dry.out" 2>&1 || {
    cat "$WORK/dry.out" >&2
    fail "kubectl apply --dry-run=server of the chart ($what) was rejected (manifest: $WORK/dry.yaml)"
  }
  local n
  n=$(grep -c 'server dry run' "$WORK/dry.out" || true)
  pass "$what: $n objects accepted by the API server"
}
dry_run "default values"
dry_run "every optional part on, ServiceMonitor" "${ALL_ON[@]}"
dry_run "every optional part on, PodMonitor" "${ALL_ON_POD[@]}"

# ---------------------------------------------------------------------------
# 4b. Taking over from another controller
# ---------------------------------------------------------------------------
step "the chart refuses another controller's CRDs unless takeOver=true"
# --dry-run=server lets the chart's lookups see the cluster, as an install does.
takeover() { "$HELM" install takeover-check "$CHART" -n default --dry-run=server "${IMAGES[@]}" --set secretsNamespace=takeover-check-secrets "$@"; }
OWNER_LABEL=app.kubernetes.io/part-of
restore_owner() { kc label crd imagepulljobs.apps.kruise.io "$OWNER_LABEL=nodeimage" --overwrite >/dev/null; }
takeover >"$WORK/takeover-ours.out" 2>&1 || {
  cat "$WORK/takeover-ours.out" >&2
  fail "the chart refuses to install over nodeimage's own CRDs"
}
pass "installs over nodeimage's own CRDs (label $OWNER_LABEL=nodeimage)"
kc label crd imagepulljobs.apps.kruise.io "$OWNER_LABEL-" >/dev/null
if takeover >"$WORK/takeover-theirs.out" 2>&1; then
  restore_owner
  fail "the chart installed over a CRD that is not nodeimage's"
fi
if ! grep -q "CRD imagepulljobs.apps.kruise.io exists and is not nodeimage's" "$WORK/takeover-theirs.out"; then
  restore_owner
  cat "$WORK/takeover-theirs.out" >&2
  fail "the refusal does not name the CRD"
fi
pass "refuses another controller's CRD, naming it and docs/migration.md"
if ! takeover --set takeOver=true >"$WORK/takeover-forced.out" 2>&1; then
  restore_owner
  cat "$WORK/takeover-forced.out" >&2
  fail "takeOver=true does not let the chart install"
fi
pass "installs with takeOver=true"
# docs/migration.md's CRD step makes the CRDs nodeimage's again.
kc apply --server-side --force-conflicts -f "$CHART/crds" >/dev/null
takeover >"$WORK/takeover-applied.out" 2>&1 || {
  restore_owner
  cat "$WORK/takeover-applied.out" >&2
  fail "after applying nodeimage's CRDs the chart still refuses"
}
pass "after docs/migration.md's CRD step the chart installs without takeOver"

# ---------------------------------------------------------------------------
# 5. RBAC, for real
# ---------------------------------------------------------------------------
step "RBAC: the chart applied as release $RELEASE in $NS"
kc create namespace "$OTHER_NS" >/dev/null
kc label namespace "$OTHER_NS" "$TEST_LABEL" >/dev/null
render_release >"$WORK/release.yaml" || fail "helm template of the test release failed"
kc apply -f "$WORK/release.yaml" >"$WORK/apply.out" 2>&1 || {
  cat "$WORK/apply.out" >&2
  fail "kubectl apply of the test release failed"
}
pass "applied $(grep -c . "$WORK/apply.out") objects"

# A dockerconfigjson pull secret for the auth registry, in the secrets
# namespace (as the controller would copy it) and in another namespace.
auth=$(printf '%s:%s' "$NODEIMAGE_AUTH_USER" "$NODEIMAGE_AUTH_PASSWORD" | base64 -w0)
printf '{"auths":{"%s":{"auth":"%s"}}}' "$NODEIMAGE_AUTH_REGISTRY" "$auth" >"$WORK/dockerconfig.json"
for ns in "$SECRETS_NS" "$OTHER_NS"; do
  kc create secret generic "$PULL_SECRET" -n "$ns" --type=kubernetes.io/dockerconfigjson \
    --from-file=.dockerconfigjson="$WORK/dockerconfig.json" >/dev/null ||
    fail "creating secret $ns/$PULL_SECRET failed"
done

# token_kubeconfig SA PREFIX [ARGS...]: PREFIX.kubeconfig holds only a token
# of ServiceAccount SA (PREFIX.token and PREFIX.ca: the token and the CA);
# ARGS go to `kubectl create token` (e.g. to bind the token to a Node).
token_kubeconfig() {
  local sa=$1 prefix=$2 out=$2.kubeconfig token ca
  shift 2
  token=$(kc create token "$sa" -n "$NS" --duration=1h "$@") ||
    fail "kubectl create token $sa -n $NS $* failed (is the TokenRequest API enabled?)"
  ca=$(kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')
  if [[ -z $ca ]]; then
    kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
      base64 -d >"$WORK/ca.crt"
    ca=$WORK/ca.crt
  fi
  [[ -s $ca ]] || fail "no CA certificate found in $KUBECONFIG"
  printf '%s' "$token" >"$prefix.token"
  cp "$ca" "$prefix.ca"
  # A new kubeconfig file, so nothing from the admin config leaks in.
  KUBECONFIG=$out "$KUBECTL" config set-cluster local --server="$NODEIMAGE_API_SERVER" \
    --certificate-authority="$ca" --embed-certs=true >/dev/null
  KUBECONFIG=$out "$KUBECTL" config set-credentials "$sa" --token="$token" >/dev/null
  KUBECONFIG=$out "$KUBECTL" config set-context "$sa" --cluster=local --user="$sa" >/dev/null
  KUBECONFIG=$out "$KUBECTL" config use-context "$sa" >/dev/null
  chmod 600 "$out"
}
# The daemon's tokens are bound to a Node, as kubelet's pod tokens are: the
# node-identity policy lets a token write only its own node's NodeImage. The
# fake node (no kubelet) exists only so that a token can be bound to it.
kc create -f - >/dev/null <<EOF || fail "creating the fake Node $FAKE_NI failed"
apiVersion: v1
kind: Node
metadata:
  name: $FAKE_NI
  labels:
    nodeimage.dev/chart-test: "true"
EOF
token_kubeconfig "$DAEMON_SA" "$WORK/daemon" --bound-object-kind Node --bound-object-name "$FAKE_NI"
token_kubeconfig "$DAEMON_SA" "$WORK/daemon-node-1" --bound-object-kind Node --bound-object-name node-1
token_kubeconfig "$DAEMON_SA" "$WORK/daemon-unbound"
token_kubeconfig "$CONTROLLER_SA" "$WORK/controller"
as_daemon() { KUBECONFIG=$WORK/daemon.kubeconfig "$KUBECTL" "$@"; }
as_controller() { KUBECONFIG=$WORK/controller.kubeconfig "$KUBECTL" "$@"; }

who=$(as_daemon auth whoami -o jsonpath='{.status.userInfo.username}' 2>&1) ||
  fail "kubectl auth whoami with the daemon's token failed: $who"
[[ $who == "system:serviceaccount:$NS:$DAEMON_SA" ]] ||
  fail "the daemon kubeconfig authenticates as '$who', not system:serviceaccount:$NS:$DAEMON_SA"
pass "the token authenticates as $who"

# The NodeImage the daemon works on (the controller's node mirror may have
# created it for the fake Node already; the label keeps it a test object).
unique=$(date +%s)-$RANDOM
for ni in "$FAKE_NI" "$OTHER_NI"; do
  cat >"$WORK/nodeimage.yaml" <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: NodeImage
metadata:
  name: $ni
  labels:
    apps.kruise.io/fake-nodeimage: "true"
    nodeimage.dev/chart-test: "true"
spec: {}
EOF
  kc apply --server-side --force-conflicts -f "$WORK/nodeimage.yaml" >/dev/null ||
    fail "creating the fake NodeImage $ni failed"
done

# expect_ok WHAT CMD...: CMD must succeed.
expect_ok() {
  local what=$1
  shift
  "$@" >"$WORK/cmd.out" 2>&1 || fail "$what: expected success, got: $(cat "$WORK/cmd.out")"
  pass "$what"
}
# expect_forbidden WHAT CMD...: CMD must fail with Forbidden.
expect_forbidden() {
  local what=$1
  shift
  if "$@" >"$WORK/cmd.out" 2>&1; then
    fail "$what: expected Forbidden, but it succeeded: $(cat "$WORK/cmd.out")"
  fi
  grep -qi forbidden "$WORK/cmd.out" ||
    fail "$what: expected Forbidden, got: $(cat "$WORK/cmd.out")"
  pass "$what: Forbidden"
}

step "RBAC: the daemon's ServiceAccount"
# A merge patch of the status subresource, the daemon's only write. Through
# curl, not `kubectl patch --subresource=status`: kubectl first GETs the
# subresource, a verb the daemon does not need and is not granted.
# status_patch [PREFIX [NODEIMAGE [QUERY]]]: PATCH with PREFIX's token.
status_patch() {
  local prefix=${1:-$WORK/daemon} ni=${2:-$FAKE_NI} query=${3:-}
  curl -sS --fail-with-body --cacert "$prefix.ca" \
    -H "Authorization: Bearer $(cat "$prefix.token")" \
    -H 'Content-Type: application/merge-patch+json' -X PATCH \
    --data '{"status":{"desired":0,"waiting":0,"pulling":0,"succeeded":0,"failed":0}}' \
    "$NODEIMAGE_API_SERVER/apis/apps.kruise.io/v1alpha1/nodeimages/$ni/status$query"
}
step "node identity: the daemon's token writes only its own node's NodeImage"
# The admission policy takes effect once the API server has loaded it.
deadline=$((SECONDS + 60))
# node-1's and node-2's NodeImages: the controller's, when it runs; made here
# (and removed at the end) when it does not.
for n in node-1 node-2; do
  if ! kc get nodeimage "$n" >/dev/null 2>&1; then
    printf 'apiVersion: apps.kruise.io/v1alpha1\nkind: NodeImage\nmetadata:\n  name: %s\nspec: {}\n' "$n" |
      kc create -f - >/dev/null 2>&1 && CREATED_NIS+=("$n")
  fi
done
while status_patch "$WORK/daemon" "$OTHER_NI" '?dryRun=All' >"$WORK/cmd.out" 2>&1; do
  ((SECONDS < deadline)) ||
    fail "a token of node $FAKE_NI could still patch NodeImage $OTHER_NI's status 60s after the node-identity policy was applied: $(cat "$WORK/cmd.out")"
  sleep 1
done
grep -q '"code": *403' "$WORK/cmd.out" && grep -qF "may write only NodeImage $FAKE_NI, not $OTHER_NI" "$WORK/cmd.out" ||
  fail "a token of node $FAKE_NI on NodeImage $OTHER_NI's status: expected 403 naming both, got: $(cat "$WORK/cmd.out")"
pass "a token bound to node $FAKE_NI may not patch NodeImage $OTHER_NI's status (403: $(grep -o 'nodeimage daemon: [^"]*' "$WORK/cmd.out" | head -n 1))"
expect_ok "a token bound to node $FAKE_NI patches its own NodeImage's status (dry run)" \
  status_patch "$WORK/daemon" "$FAKE_NI" '?dryRun=All'
if status_patch "$WORK/daemon-node-1" node-2 '?dryRun=All' >"$WORK/cmd.out" 2>&1; then
  fail "a token bound to node-1 patched node-2's NodeImage status: $(cat "$WORK/cmd.out")"
fi
grep -q '"code": *403' "$WORK/cmd.out" && grep -qF "may write only NodeImage node-1, not node-2" "$WORK/cmd.out" ||
  fail "node-1's token on node-2's NodeImage status: expected 403 naming both nodes, got: $(cat "$WORK/cmd.out")"
pass "a token bound to node-1 may not patch node-2's NodeImage status (403)"
expect_ok "a token bound to node-1 patches node-1's NodeImage status (dry run)" \
  status_patch "$WORK/daemon-node-1" node-1 '?dryRun=All'
if status_patch "$WORK/daemon-unbound" "$FAKE_NI" '?dryRun=All' >"$WORK/cmd.out" 2>&1; then
  fail "a daemon token bound to no node patched a NodeImage's status: $(cat "$WORK/cmd.out")"
fi
grep -qF "the token is not bound to a node" "$WORK/cmd.out" ||
  fail "an unbound daemon token: expected the node-identity refusal, got: $(cat "$WORK/cmd.out")"
pass "a daemon token bound to no node may not patch any NodeImage's status"
expect_ok "daemon patches its own node's NodeImage status (PATCH .../nodeimages/$FAKE_NI/status)" status_patch
got=$(kc get nodeimage "$FAKE_NI" -o jsonpath='{.status.desired}')
[[ $got == 0 ]] || fail "the daemon's status patch did not stick (status.desired='$got')"
expect_ok "daemon gets a NodeImage" as_daemon get nodeimage "$FAKE_NI"
expect_ok "daemon lists NodeImages by field selector" \
  as_daemon get nodeimages --field-selector "metadata.name=$FAKE_NI"
expect_ok "daemon gets a secret in the secrets namespace $SECRETS_NS" \
  as_daemon get secret "$PULL_SECRET" -n "$SECRETS_NS"
expect_forbidden "daemon gets a secret in namespace $OTHER_NS" \
  as_daemon get secret "$PULL_SECRET" -n "$OTHER_NS"
expect_forbidden "daemon gets a secret in the release namespace $NS" \
  as_daemon get secret "$PULL_SECRET" -n "$NS"
expect_forbidden "daemon lists secrets in the secrets namespace" \
  as_daemon get secrets -n "$SECRETS_NS"
expect_forbidden "daemon updates a NodeImage's spec" \
  as_daemon patch nodeimage "$FAKE_NI" --type=merge \
  -p '{"spec":{"images":{"busybox":{"tags":[{"tag":"1.36"}]}}}}'
expect_forbidden "daemon deletes a NodeImage" as_daemon delete nodeimage "$FAKE_NI" --wait=false
expect_forbidden "daemon creates a NodeImage" as_daemon create -f "$WORK/nodeimage.yaml" --dry-run=server
expect_forbidden "daemon lists nodes" as_daemon get nodes

# can_i AS EXPECT VERB RESOURCE [ARGS...]: kubectl auth can-i must say EXPECT.
can_i() {
  local who=$1 expect=$2
  shift 2
  local got
  got=$("as_$who" auth can-i "$@" 2>/dev/null || true)
  [[ $got == "$expect" ]] ||
    fail "$who: 'kubectl auth can-i $*' says '$got', expected '$expect'"
}
can_i daemon yes watch nodeimages.apps.kruise.io
can_i daemon yes create events.events.k8s.io -n default
can_i daemon yes create events -n default
can_i daemon no create events.events.k8s.io -n "$OTHER_NS"
can_i daemon no create events -n kube-system
can_i daemon no create events.events.k8s.io -A
can_i daemon no update nodeimages.apps.kruise.io
can_i daemon no create secrets -n "$SECRETS_NS"
can_i daemon no watch secrets -n "$SECRETS_NS"
can_i daemon no get imagepulljobs.apps.kruise.io -A
pass "daemon: kubectl auth can-i agrees (watch NodeImages, events only in default; no NodeImage update, secret writes, jobs)"

step "RBAC: the controller's ServiceAccount"
can_i controller yes list nodes
can_i controller no patch nodes
can_i controller yes create nodeimages.apps.kruise.io
can_i controller yes delete nodeimages.apps.kruise.io
can_i controller yes patch nodeimages.apps.kruise.io --subresource=status
for r in imagepulljobs.apps.kruise.io imagelistpulljobs.apps.kruise.io \
  imageprepulljobs.operations.kubeedge.io nodeupgradejobs.operations.kubeedge.io; do
  can_i controller yes watch "$r" -A
  can_i controller yes patch "$r" -A --subresource=status
  can_i controller yes update "$r" -A --subresource=finalizers
  can_i controller no create "$r" -A
done
can_i controller yes watch pods -A
can_i controller no create pods -A
can_i controller yes get secrets -n "$OTHER_NS"
can_i controller yes watch secrets -A
can_i controller no create secrets -n "$OTHER_NS"
can_i controller no delete secrets -n "$OTHER_NS"
can_i controller yes create secrets -n "$SECRETS_NS"
can_i controller yes delete secrets -n "$SECRETS_NS"
can_i controller yes create namespaces
can_i controller no delete namespaces
can_i controller yes create events.events.k8s.io -n "$OTHER_NS"
can_i controller yes patch leases.coordination.k8s.io -n "$NS"
can_i controller no patch leases.coordination.k8s.io -n default
pass "controller: kubectl auth can-i agrees (nodes, NodeImages, jobs, secrets only written in $SECRETS_NS, leases only in $NS)"
expect_ok "controller creates a secret in the secrets namespace" \
  as_controller create secret generic chart-test-copy -n "$SECRETS_NS" --from-literal=k=v
expect_forbidden "controller creates a secret in namespace $OTHER_NS" \
  as_controller create secret generic chart-test-copy -n "$OTHER_NS" --from-literal=k=v

# ---------------------------------------------------------------------------
# 6. The real daemon with only the ServiceAccount's token
# ---------------------------------------------------------------------------
step "the real nodeimage-daemon with the daemon ServiceAccount's token"
if [[ -n ${NODEIMAGE_DAEMON_BIN:-} ]]; then
  DAEMON_BIN=$NODEIMAGE_DAEMON_BIN
else
  (cd "$REPO_ROOT" && cargo build --quiet -p nodeimage-daemon) || fail "cargo build -p nodeimage-daemon failed"
  DAEMON_BIN=${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/nodeimage-daemon
fi
[[ -x $DAEMON_BIN ]] || fail "no daemon binary at $DAEMON_BIN"
[[ -x $NODEIMAGE_CRI ]] || fail "no ni-cri at $NODEIMAGE_CRI (tests/cluster/up.sh builds it)"

# push_image REGISTRY REPOSITORY TAG [USER:PASSWORD]: a tiny image with a
# layer of random bytes (so its content is unique to this run) pushed
# through the distribution API.
push_blob() {
  local base=$1 repo=$2 file=$3 digest location
  shift 3
  digest=sha256:$(sha256sum "$file" | cut -d' ' -f1)
  location=$(curl -fsS "$@" -X POST -D - -o /dev/null "$base/v2/$repo/blobs/uploads/" |
    tr -d '\r' | sed -n 's/^[Ll]ocation: //p')
  [[ -n $location ]] || return 1
  [[ $location == http* ]] || location=$base$location
  if [[ $location == *\?* ]]; then location="$location&digest=$digest"; else location="$location?digest=$digest"; fi
  curl -fsS "$@" -X PUT -H 'Content-Type: application/octet-stream' \
    --data-binary "@$file" "$location" -o /dev/null || return 1
  echo "$digest"
}
push_image() {
  local registry=$1 repo=$2 tag=$3 auth=() dir layer_digest config_digest
  [[ -n ${4:-} ]] && auth=(-u "$4")
  dir=$(mktemp -d "$WORK/image.XXXXXX")
  mkdir "$dir/root"
  head -c 4096 /dev/urandom >"$dir/root/random"
  tar -C "$dir/root" -cf "$dir/layer.tar" random
  layer_digest=$(push_blob "http://$registry" "$repo" "$dir/layer.tar" "${auth[@]}") || return 1
  printf '{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
    "$layer_digest" >"$dir/config.json"
  config_digest=$(push_blob "http://$registry" "$repo" "$dir/config.json" "${auth[@]}") || return 1
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%d}]}' \
    "$config_digest" "$(stat -c %s "$dir/config.json")" "$layer_digest" "$(stat -c %s "$dir/layer.tar")" >"$dir/manifest.json"
  curl -fsS "${auth[@]}" -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
    --data-binary "@$dir/manifest.json" "http://$registry/v2/$repo/manifests/$tag" -o /dev/null
}
repo=chart-test/img-$unique
PLAIN=$NODEIMAGE_REGISTRY/$repo
AUTHED=$NODEIMAGE_AUTH_REGISTRY/$repo
FORBIDDEN=$NODEIMAGE_AUTH_REGISTRY/chart-test/denied-$unique
push_image "$NODEIMAGE_REGISTRY" "$repo" v1 || fail "pushing $PLAIN:v1 failed"
push_image "$NODEIMAGE_AUTH_REGISTRY" "$repo" v1 "$NODEIMAGE_AUTH_USER:$NODEIMAGE_AUTH_PASSWORD" ||
  fail "pushing $AUTHED:v1 failed"
PULLED_REFS=("$PLAIN:v1" "$AUTHED:v1")
pass "pushed $PLAIN:v1 and $AUTHED:v1"

# The NodeImage's spec (set as admin, as the controller would).
cat >"$WORK/spec.json" <<EOF
{"spec": {"images": {
  "$PLAIN": {"tags": [{"tag": "v1", "imagePullPolicy": "Always"}]},
  "$AUTHED": {"pullSecrets": [{"namespace": "$SECRETS_NS", "name": "$PULL_SECRET"}],
              "tags": [{"tag": "v1", "imagePullPolicy": "Always"}]},
  "$FORBIDDEN": {"pullSecrets": [{"namespace": "$OTHER_NS", "name": "$PULL_SECRET"}],
                 "tags": [{"tag": "v1", "imagePullPolicy": "Always"}]}
}}}
EOF
kc patch nodeimage "$FAKE_NI" --type=merge --patch-file "$WORK/spec.json" >/dev/null ||
  fail "setting the fake NodeImage's spec failed"

# A free port for the daemon's health endpoint.
port=18290
while port_open "$port"; do port=$((port + 1)); done
"$DAEMON_BIN" --node-name "$FAKE_NI" --kubeconfig "$WORK/daemon.kubeconfig" \
  --containerd-socket "$NODEIMAGE_CONTAINERD_1" --health-addr "127.0.0.1:$port" \
  >"$WORK/daemon.log" 2>&1 &
DAEMON_PID=$!
deadline=$((SECONDS + 60))
until curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
  kill -0 "$DAEMON_PID" 2>/dev/null || fail "the daemon exited (log above)"
  ((SECONDS < deadline)) || fail "the daemon with the ServiceAccount token was not ready within 60s"
  sleep 0.5
done
pass "the daemon is ready (listed and watched its NodeImage with the token)"

# Status lines "image|tag|phase|message".
statuses() {
  # shellcheck disable=SC2016 # a go-template, not shell
  kc get nodeimage "$FAKE_NI" -o go-template='{{range $img, $s := .status.imageStatuses}}{{range $s.tags}}{{$img}}|{{.tag}}|{{.phase}}|{{.message}}{{"\n"}}{{end}}{{end}}'
}
phase_of() { statuses | awk -F'|' -v i="$1" '$1 == i && $2 == "v1" {print $3}'; }
message_of() { statuses | awk -F'|' -v i="$1" '$1 == i && $2 == "v1" {print $4}'; }
deadline=$((SECONDS + 120))
while true; do
  p1=$(phase_of "$PLAIN") p2=$(phase_of "$AUTHED") p3=$(phase_of "$FORBIDDEN")
  if [[ $p1 =~ ^(Succeeded|Failed)$ && $p2 =~ ^(Succeeded|Failed)$ && $p3 =~ ^(Succeeded|Failed)$ ]]; then break; fi
  kill -0 "$DAEMON_PID" 2>/dev/null || fail "the daemon exited before finishing (log above)"
  ((SECONDS < deadline)) || {
    statuses >&2 || true
    fail "the daemon did not finish the three tags within 120s (phases: '$p1' '$p2' '$p3')"
  }
  sleep 1
done
[[ $p1 == Succeeded ]] || fail "$PLAIN:v1 is $p1, expected Succeeded: $(message_of "$PLAIN")"
pass "$PLAIN:v1 Succeeded: the daemon wrote its NodeImage's status with the token"
[[ $p2 == Succeeded ]] ||
  fail "$AUTHED:v1 (pull secret in $SECRETS_NS) is $p2, expected Succeeded: $(message_of "$AUTHED")"
pass "$AUTHED:v1 Succeeded: the daemon read the pull secret in $SECRETS_NS"
m3=$(message_of "$FORBIDDEN")
[[ $p3 == Failed ]] || fail "$FORBIDDEN:v1 (pull secret in $OTHER_NS) is $p3, expected Failed"
grep -qi forbidden <<<"$m3" ||
  fail "$FORBIDDEN:v1 failed, but not for a forbidden secret read: $m3"
pass "$FORBIDDEN:v1 Failed: $m3"
"$NODEIMAGE_CRI" --socket "$NODEIMAGE_CONTAINERD_1" status "$PLAIN:v1" >/dev/null ||
  fail "$PLAIN:v1 is not in node-1's containerd although its status says Succeeded"
pass "$PLAIN:v1 is in node-1's containerd"
# No permission error besides the expected one.
if grep -i forbidden "$WORK/daemon.log" | grep -vF "$OTHER_NS/$PULL_SECRET" | grep -q .; then
  grep -i forbidden "$WORK/daemon.log" | grep -vF "$OTHER_NS/$PULL_SECRET" | head -n 5 >&2
  fail "the daemon's log shows permission errors other than the expected secret in $OTHER_NS"
fi
pass "no other permission errors in the daemon's log"

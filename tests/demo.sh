#!/usr/bin/env bash
# The demo: a local cluster with nodeimage running, an image pre-pulled onto
# every node through NodeImage, exactly as the OpenKruise guide shows, and
# another through an ImagePullJob.
# Leaves everything running; stop it with `make cluster-down`.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"

env_file=$(tests/cluster/up.sh | tail -n 1)
tests/nodeimage.sh start
# shellcheck disable=SC1090
. "$env_file"
k() { "$KUBECTL" "$@"; }

image="$NODEIMAGE_REGISTRY/test"
echo
echo "== NodeImages, one per Node (made by the controller's node mirror):"
k get nodeimages
# A demo run before may have left this image's entry; clear it (the daemon
# then drops its status) so the pull below is a fresh one.
has_entry() {
  k get nodeimage "$1" -o json | python3 -c '
import json, sys
obj, image = json.load(sys.stdin), sys.argv[1]
st = ((obj.get("status") or {}).get("imageStatuses") or {})
sys.exit(0 if image in st or image in ((obj.get("spec") or {}).get("images") or {}) else 1)' "$image"
}
for node in $NODEIMAGE_NODES; do
  k wait --for=create "nodeimage/$node" --timeout=60s >/dev/null
  if has_entry "$node"; then
    k patch nodeimage "$node" --type=merge -p "{\"spec\":{\"images\":{\"$image\":null}}}" >/dev/null
    for _ in $(seq 1 60); do has_entry "$node" || break; sleep 0.5; done
  fi
done
for node in $NODEIMAGE_NODES; do
  echo "\$ kubectl patch nodeimage $node --type=merge -p '{\"spec\":{\"images\":{\"$image\":{\"tags\":[{\"tag\":\"v1\",\"pullPolicy\":{\"ttlSecondsAfterFinished\":300}}]}}}}'"
  k patch nodeimage "$node" --type=merge \
    -p "{\"spec\":{\"images\":{\"$image\":{\"tags\":[{\"tag\":\"v1\",\"pullPolicy\":{\"ttlSecondsAfterFinished\":300}}]}}}}"
done
# Wait until every node reports our tag Succeeded (other tags may be there too).
phase_of() {
  k get nodeimage "$1" -o json | python3 -c '
import json, sys
obj, image = json.load(sys.stdin), sys.argv[1]
tags = ((obj.get("status") or {}).get("imageStatuses") or {}).get(image, {}).get("tags", [])
print(next((t["phase"] for t in tags if t["tag"] == "v1"), "Waiting"))' "$image"
}
for node in $NODEIMAGE_NODES; do
  for _ in $(seq 1 240); do
    phase=$(phase_of "$node")
    [[ $phase == Succeeded || $phase == Failed ]] && break
    sleep 0.5
  done
  echo "$node: $image:v1 $phase"
  [[ $phase == Succeeded ]] || { echo "the pull on $node did not succeed" >&2; exit 1; }
done
echo
echo "== Every node holds the image:"
k get nodeimages
echo
first=${NODEIMAGE_NODES%% *}
echo "== kubectl get nodeimage $first -o jsonpath={.status}:"
k get nodeimage "$first" -o jsonpath='{.status}' | python3 -m json.tool
echo
echo "== The image in $first's containerd (CRI, namespace k8s.io):"
"$NODEIMAGE_CRI" --socket "$NODEIMAGE_CONTAINERD_1" images | grep "$image" || true

# The everyday way: an ImagePullJob, which picks the nodes, rolls the pulls
# out and reports back.
job_image="$NODEIMAGE_REGISTRY/test:v2"
echo
echo "== An ImagePullJob pulls $job_image onto every node:"
k delete imagepulljob demo -n default --ignore-not-found --wait=true >/dev/null
cat >"$NODEIMAGE_STATE/demo-job.yaml" <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: demo
  namespace: default
spec:
  image: $job_image
  parallelism: 2
  completionPolicy:
    type: Always
    ttlSecondsAfterFinished: 600
EOF
echo "\$ kubectl apply -f - <<EOF"
cat "$NODEIMAGE_STATE/demo-job.yaml"
echo "EOF"
k apply -f "$NODEIMAGE_STATE/demo-job.yaml"
echo "\$ kubectl wait imagepulljob/demo --for=condition=Complete"
k wait imagepulljob/demo -n default --for=condition=Complete --timeout=300s
echo "\$ kubectl get imagepulljob demo"
k get imagepulljob demo -n default
echo
echo "The NodeImage tags leave spec and status 300 s after they finished, the job 600 s."
echo
echo "Use kubectl on this cluster (the kubeconfig is in the state directory):"
echo "  . $env_file"
echo "  kubectl get nodeimages,imagepulljobs -A"
echo "Stop everything with: make cluster-down"

#!/usr/bin/env bash
# The demo: a local cluster with nodeimage running, and an image pre-pulled
# onto every node through NodeImage, exactly as the OpenKruise guide shows.
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
for node in $NODEIMAGE_NODES; do
  k wait --for=create "nodeimage/$node" --timeout=60s >/dev/null
  echo "\$ kubectl patch nodeimage $node --type=merge -p '{\"spec\":{\"images\":{\"$image\":{\"tags\":[{\"tag\":\"v1\",\"pullPolicy\":{\"ttlSecondsAfterFinished\":300}}]}}}}'"
  k patch nodeimage "$node" --type=merge \
    -p "{\"spec\":{\"images\":{\"$image\":{\"tags\":[{\"tag\":\"v1\",\"pullPolicy\":{\"ttlSecondsAfterFinished\":300}}]}}}}"
done
for node in $NODEIMAGE_NODES; do
  k wait --for=jsonpath='{.status.succeeded}'=1 "nodeimage/$node" --timeout=120s >/dev/null
done
echo
echo "== Every node holds the image:"
k get nodeimages
echo
first=${NODEIMAGE_NODES%% *}
echo "== kubectl get nodeimage $first -o yaml (status):"
k get nodeimage "$first" -o jsonpath='{.status}' | python3 -m json.tool
echo
echo "== The image in $first's containerd (CRI, namespace k8s.io):"
"$NODEIMAGE_CRI" --socket "$NODEIMAGE_CONTAINERD_1" images | grep "$image" || true
echo
echo "The tags leave spec and status 300 s after they finished. Stop everything with: make cluster-down"

#!/bin/sh
# nodeimage's image verifier for containerd 2.x (the bindir image-verifier
# API; containerd runs it before every pull, kubelet's and nodeimage's). It
# refuses a pull whose resolved digest an ImageRemovalJob with block: true
# keeps off this node, and allows every other. The node daemon installs this
# file and keeps the list beside its bin directory up to date; without a
# readable list it allows (nodeimage must never stop a node's pulls by
# failing). Arguments are compared as plain strings, never evaluated.
name=''
digest=''
while [ "$#" -gt 0 ]; do
  case $1 in
    -name=* | --name=*) name=${1#*=} ;;
    -digest=* | --digest=*) digest=${1#*=} ;;
    -name | --name) name=${2-} && shift ;;
    -digest | --digest) digest=${2-} && shift ;;
    -stdin-media-type | --stdin-media-type) shift ;;
  esac
  [ "$#" -gt 0 ] && shift
done
list=${0%/*}/../nodeimage-blocks
if [ ! -r "$list" ]; then
  echo "nodeimage: no block list; allowed"
  exit 0
fi
# The repository the pull names: no digest, and no tag (a colon after the
# last slash).
repo=${name%%@*}
case ${repo##*/} in
  *:*) repo=${repo%:*} ;;
esac
while read -r blocked_digest blocked_repo job; do
  if [ "$blocked_digest" = "$digest" ] && [ "$blocked_repo" = "$repo" ]; then
    echo "blocked by ImageRemovalJob $job: $repo@$digest is kept off this node while that job exists"
    exit 1
  fi
done <"$list"
echo "nodeimage: $repo@$digest is not blocked"
exit 0

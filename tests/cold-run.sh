#!/usr/bin/env bash
# Times `make test` as a new machine runs it: a fresh clone of this
# repository, and empty cargo, Go module and Go build caches, so every crate,
# Go module, Kubernetes, containerd and helm is fetched and built again.
# What this machine already has stays: the Debian packages and the Rust
# toolchain (a new machine also installs those; this run does not time
# that). Prints the time of each step of tests/run-all.sh at the end.
#
#   tests/cold-run.sh [WORK_DIR]     # default /tmp/nodeimage-cold
#
# It uses the default ports and the real-node lock (/work/realnode.lock if
# /work exists), so no other stack of this machine may use them meanwhile.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-/tmp/nodeimage-cold}

rm -rf "$WORK"
mkdir -p "$WORK"
git clone -q "$REPO_ROOT" "$WORK/repo"
# CI clones with ../shared beside the repository; the tests read it there.
if [[ -d $REPO_ROOT/../shared ]]; then
  ln -s "$(cd "$REPO_ROOT/../shared" && pwd)" "$WORK/shared"
fi

export CARGO_HOME=$WORK/cargo-home GOPATH=$WORK/go GOMODCACHE=$WORK/go/mod GOCACHE=$WORK/go/cache
unset CARGO_TARGET_DIR NODEIMAGE_STATE
mkdir -p "$CARGO_HOME"

lock=/dev/null
[[ -d /work ]] && lock=/work/realnode.lock
start=$(date +%s)
rc=0
(cd "$WORK/repo" && flock "$lock" make test) >"$WORK/make-test.log" 2>&1 || rc=$?
end=$(date +%s)

echo "make test exited $rc after $(((end - start) / 60)) min $(((end - start) % 60)) s (log: $WORK/make-test.log)"
echo "steps (start time, step):"
grep -E '^==== ' "$WORK/make-test.log" | sed 's/^==== \(.*\) (\([0-9:]*\))$/  \2  \1/' | cut -c1-150
exit "$rc"

#!/usr/bin/env bash
# cargo-cyclonedx (the CycloneDX project's cargo SBOM tool), installed from
# crates.io with its lock file into $NODEIMAGE_STATE/tools (which
# tests/cluster/down.sh keeps). Prints the path of the binary.
#
#   release/cyclonedx.sh        # release/release.sh calls it for the SBOMs
#
# Environment: CARGO_CYCLONEDX (a binary to use instead),
# CARGO_CYCLONEDX_VERSION (default 0.5.9). About 3.5 CPU-minutes cold.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${NODEIMAGE_STATE:-$REPO_ROOT/.state}
VERSION=${CARGO_CYCLONEDX_VERSION:-0.5.9}
log() { printf '[%s] cargo-cyclonedx: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ -n ${CARGO_CYCLONEDX:-} ]]; then
  [[ -x $CARGO_CYCLONEDX ]] || { log "CARGO_CYCLONEDX=$CARGO_CYCLONEDX is not executable"; exit 1; }
  echo "$CARGO_CYCLONEDX"
  exit 0
fi
root=$STATE/tools
bin=$root/bin/cargo-cyclonedx
mkdir -p "$root"
exec 9>"$root/cargo-cyclonedx.lock"
flock 9
if [[ ! -x $bin || "$(cat "$root/cargo-cyclonedx.stamp" 2>/dev/null)" != "$VERSION" ]]; then
  log "installing cargo-cyclonedx $VERSION with cargo install --locked"
  t0=$SECONDS
  # Its own target directory: the workspace's stays the workspace's.
  CARGO_TARGET_DIR=$root/target cargo install --locked --quiet --force \
    --root "$root" --version "$VERSION" cargo-cyclonedx >&2 ||
    { log "cargo install cargo-cyclonedx $VERSION failed"; exit 1; }
  rm -rf "$root/target"
  echo "$VERSION" >"$root/cargo-cyclonedx.stamp"
  log "cargo-cyclonedx $VERSION installed in $((SECONDS - t0))s"
fi
echo "$bin"

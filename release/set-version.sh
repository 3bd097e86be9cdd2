#!/usr/bin/env bash
# Sets nodeimage's version where it is written: Cargo.toml's workspace
# version (the one source: every crate inherits it, images/build.sh tags
# the images with it) and the copies that must equal it, the chart's
# version and appVersion, Cargo.lock, and the version of docs/release.md's
# install block. release/release.sh refuses to run
# when they differ; tests/tests/docs.rs fails the unit tests too.
#
#   release/set-version.sh 0.2.0
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
new=${1:-}
[[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "usage: release/set-version.sh X.Y.Z[-pre]" >&2; exit 2; }
sed -i '/^\[workspace.package\]/,/^\[/ s/^version = ".*"$/version = "'"$new"'"/' Cargo.toml
sed -i 's/^version: .*/version: '"$new"'/; s/^appVersion: .*/appVersion: "'"$new"'"/' charts/nodeimage/Chart.yaml
# docs/release.md's install block names the chart version (tests/tests/docs.rs).
sed -i 's/^\(REGISTRY=[^ ]* VERSION=\)[^ ]*$/\1'"$new"'/' docs/release.md
cargo update --workspace --offline --quiet
grep -qE "^## \[?$new\]?" CHANGELOG.md ||
  echo "CHANGELOG.md: rename '## Unreleased' to '## [$new] - $(date -u +%F)' when you release" >&2
echo "version $new: Cargo.toml, Cargo.lock, charts/nodeimage/Chart.yaml, docs/release.md" >&2

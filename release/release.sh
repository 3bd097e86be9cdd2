#!/usr/bin/env bash
# A nodeimage release, into one directory (`make release`):
#
#   1. the version: Cargo.toml's workspace version, the one source; the
#      chart's version and appVersion must say the same (release/
#      set-version.sh changes all three) and CHANGELOG.md must have it;
#   2. the images for linux/amd64 and linux/arm64 (images/build.sh, then
#      images/check.sh, which runs the arm64 binaries under qemu), pushed as
#      OCI image indexes tagged with the version;
#   3. a signature of each index by cosign with a key (release/cosign.sh
#      builds cosign from the Go module proxy), pushed beside it, then
#      verified from the registry with `cosign verify --key`;
#   4. SBOMs per image and architecture: CycloneDX of the binary's crates
#      (cargo-cyclonedx, release/cyclonedx.sh) and SPDX of the image
#      (release/sbom.py, which checks the first lists every linked crate);
#      the kubectl plugin for both architectures as archives, with a krew
#      manifest pointing at them (checked against the archives);
#   5. the chart packaged with the version and pushed as an OCI artifact;
#   6. release.env (what was published, by digest), SHA256SUMS.
#
#   release/release.sh                          # to the local cluster's registry
#   release/release.sh --packages-only          # only the Debian packages it needs
#   release/release.sh --binaries-only          # only its cargo build (tests/run-all.sh
#                                               # starts it first, in the background)
#   IMAGE_REGISTRY=registry.example.com/nodeimage \
#     RELEASE_SIGNING_KEY=cosign.key RELEASE_SIGNING_PASSPHRASE_FILE=pass release/release.sh
#
# Environment: RELEASE_DIR (default dist/), IMAGE_REGISTRY (default: the
# local cluster's registry + /nodeimage), CHART_REGISTRY (default
# oci://$IMAGE_REGISTRY/charts), IMAGE_DEST_CREDS, IMAGE_TLS_VERIFY (as
# images/build.sh), RELEASE_SIGNING_KEY and RELEASE_SIGNING_PASSPHRASE_FILE
# (without them a throwaway key pair is made for this run and the release
# says so: fine for tests, not for publishing), HELM (default: helm on
# PATH, else tests/chart.sh installs one), IMAGE_ARCHES (default "amd64
# arm64").
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
# shellcheck source=images/spec.sh
. images/spec.sh
# shellcheck source=images/oci.sh
. images/oci.sh
# shellcheck source=images/cross.sh
. images/cross.sh
STATE=${NODEIMAGE_STATE:-$REPO_ROOT/.state}
export NODEIMAGE_STATE=$STATE
DIST=${RELEASE_DIR:-$REPO_ROOT/dist}
log() { printf '[%s] release: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}
t_start=$SECONDS

# 1. The version, from its one source.
VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "Cargo.toml's workspace version '$VERSION' is not semver"
chart_version=$(sed -n 's/^version: *//p' charts/nodeimage/Chart.yaml)
app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/nodeimage/Chart.yaml)
[[ $chart_version == "$VERSION" && $app_version == "$VERSION" ]] ||
  die "Chart.yaml says version $chart_version, appVersion $app_version; Cargo.toml $VERSION (release/set-version.sh $VERSION)"
grep -qE "^## (\[?$VERSION\]?|Unreleased)" CHANGELOG.md || die "CHANGELOG.md has no section for $VERSION"
export IMAGE_TAG=$VERSION
export IMAGE_ARCHES=${IMAGE_ARCHES:-amd64 arm64}
# The plugin's binaries come from the same cargo run as the images' (one
# compile of the shared crates; the SBOMs read that run's feature set).
export IMAGE_BUILD_ALSO=nodeimage-kubectl
case ${1:-} in
  "") ;;
  --packages-only | --binaries-only) exec images/build.sh "$1" ;;
  *) die "unknown argument $1 (usage: release/release.sh [--packages-only | --binaries-only])" ;;
esac

if [[ -z ${IMAGE_REGISTRY:-} && -f $STATE/env.sh ]]; then
  # shellcheck disable=SC1091
  IMAGE_REGISTRY=$(. "$STATE/env.sh" && echo "$NODEIMAGE_REGISTRY/nodeimage")
fi
[[ -n ${IMAGE_REGISTRY:-} ]] || die "set IMAGE_REGISTRY (e.g. registry.example.com/nodeimage), or start the local cluster"
export IMAGE_REGISTRY
CHART_REGISTRY=${CHART_REGISTRY:-oci://$IMAGE_REGISTRY/charts}
tls=${IMAGE_TLS_VERIFY:-true}
case $IMAGE_REGISTRY in 127.0.0.1:* | localhost:* | localhost/* | "[::1]":*) tls=false ;; esac

rm -rf "$DIST"
mkdir -p "$DIST/sbom"
work=$(mktemp -d "$STATE/release.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 2. Images for both architectures.
log "images for ${IMAGE_ARCHES// /, } (images/build.sh, images/check.sh)"
images/build.sh
images/check.sh
# shellcheck disable=SC1091
. "$STATE/nodeimage-images.env"
LAYOUT=$STATE/nodeimage-oci

# 3. Signatures, by cosign with a key (no transparency log: a key is the
# trust root), stored in the registry beside each index (cosign 3's bundle
# under the tag sha256-<hex>), then verified from the registry with
# `cosign verify --key`, as a user does.
COSIGN_BIN=$(release/cosign.sh) || die "cosign could not be installed (release/cosign.sh)"
KEY=${RELEASE_SIGNING_KEY:-}
PASS=${RELEASE_SIGNING_PASSPHRASE_FILE:-}
if [[ -z $KEY ]]; then
  log "no RELEASE_SIGNING_KEY: a throwaway key pair for this run (a test release, not one to publish)"
  PASS=$work/keys/passphrase
  mkdir -p "$work/keys"
  head -c 24 /dev/urandom | base64 >"$PASS"
  COSIGN_PASSWORD=$(<"$PASS") "$COSIGN_BIN" generate-key-pair --output-key-prefix "$work/keys/cosign" >/dev/null 2>&1 ||
    die "cosign generate-key-pair failed"
  KEY=$work/keys/cosign.key
  cp "$work/keys/cosign.pub" "$DIST/cosign.pub"
  echo "throwaway key of a test release made $(date -u +%FT%TZ)" >"$DIST/KEY-IS-THROWAWAY"
else
  [[ -n $PASS && -f $PASS ]] || die "RELEASE_SIGNING_PASSPHRASE_FILE must name the key's passphrase file"
  [[ -f ${RELEASE_SIGNING_PUBLIC_KEY:-${KEY%.key}.pub} ]] ||
    die "no public key beside $KEY (set RELEASE_SIGNING_PUBLIC_KEY)"
  cp "${RELEASE_SIGNING_PUBLIC_KEY:-${KEY%.key}.pub}" "$DIST/cosign.pub"
fi
# cosign reads registry credentials from a Docker config: one of its own
# for this run when IMAGE_DEST_CREDS names some.
cosign_registry=()
[[ $tls == true ]] || cosign_registry+=(--allow-http-registry --allow-insecure-registry)
export DOCKER_CONFIG=$work/docker-config
mkdir -p "$DOCKER_CONFIG"
if [[ -n ${IMAGE_DEST_CREDS:-} ]]; then
  "$COSIGN_BIN" login "${IMAGE_REGISTRY%%/*}" -u "${IMAGE_DEST_CREDS%%:*}" --password-stdin \
    <<<"${IMAGE_DEST_CREDS#*:}" >/dev/null 2>&1 || die "cosign login ${IMAGE_REGISTRY%%/*} failed"
fi
for n in "${IMAGES[@]}"; do
  var=NODEIMAGE_IMAGE_DIGEST_${n^^}
  digest=${!var}
  repo=$IMAGE_REGISTRY/$n
  COSIGN_PASSWORD=$(<"$PASS") registry_retry "$COSIGN_BIN" sign --key "$KEY" --tlog-upload=false --use-signing-config=false \
    "${cosign_registry[@]}" --yes "$repo@$digest" >"$work/sign-$n.log" 2>&1 ||
    die "cosign sign $repo@$digest failed: $(tail -n 3 "$work/sign-$n.log")"
  registry_retry "$COSIGN_BIN" verify --key "$DIST/cosign.pub" --insecure-ignore-tlog=true "${cosign_registry[@]}" \
    "$repo@$digest" >"$work/verify-$n.json" 2>"$work/verify-$n.log" ||
    die "the signature of $repo@$digest read back from the registry does not verify: $(tail -n 3 "$work/verify-$n.log")"
done
unset DOCKER_CONFIG

# 4. SBOMs: CycloneDX of each binary's crates by cargo-cyclonedx (the
# CycloneDX project's cargo tool), and SPDX of each image (its crates and
# the Debian packages of its other files, release/sbom.py, which also
# checks that the CycloneDX one lists every crate linked into the binary).
CDX_BIN=$(release/cyclonedx.sh) || die "cargo-cyclonedx could not be installed (release/cyclonedx.sh)"
for arch in $IMAGE_ARCHES; do
  # It writes <binary>_bin.cdx.json beside each member's Cargo.toml.
  "$CDX_BIN" cyclonedx --manifest-path Cargo.toml --format json --spec-version 1.5 \
    --target "$(rust_target "$arch")" --no-build-deps --describe binaries -q ||
    die "cargo cyclonedx for $(rust_target "$arch") failed"
  for n in "${IMAGES[@]}"; do
    crate=$(image_crate "$n")
    shopt -s nullglob
    made=(./*/"${crate}"_bin.cdx.json)
    shopt -u nullglob
    ((${#made[@]} == 1)) || die "cargo cyclonedx wrote ${#made[@]} SBOMs for $crate, not 1"
    mv "${made[0]}" "$DIST/sbom/nodeimage-$n-$VERSION-linux-$arch.cdx.json"
  done
  rm -f ./*/*_bin.cdx.json
done
for n in "${IMAGES[@]}"; do
  for arch in $IMAGE_ARCHES; do
    umoci unpack --image "$LAYOUT:$n-$arch" "$work/$n-$arch" >/dev/null
    sysroot=()
    [[ $(rust_target "$arch") == "$(uname -m)"-* ]] || sysroot=(--sysroot "$STATE/sysroot-$arch")
    built_with=()
    for other in "${IMAGES[@]}"; do built_with+=(--built-with "$(image_crate "$other")"); done
    built_with+=(--built-with "$IMAGE_BUILD_ALSO")
    python3 release/sbom.py --image "$n" --crate "$(image_crate "$n")" --version "$VERSION" "${built_with[@]}" \
      --arch "$arch" --target "$(rust_target "$arch")" --rootfs "$work/$n-$arch/rootfs" \
      --manifest-digest "$(oci_digest "$LAYOUT" "$n-$arch")" "${sysroot[@]}" \
      --cyclonedx "$DIST/sbom/nodeimage-$n-$VERSION-linux-$arch.cdx.json" \
      --out "$DIST/sbom/nodeimage-$n-$VERSION-linux-$arch.spdx.json"
  done
done

# The kubectl plugin (built with the images above): an archive per
# architecture, each binary run first, and a krew manifest.
log "kubectl plugin archives for ${IMAGE_ARCHES// /, }"
for arch in $IMAGE_ARCHES; do
  bin=${CARGO_TARGET_DIR:-target}/$(rust_target "$arch")/release/kubectl-nodeimage
  libs=$STATE/sysroot-$arch
  [[ $arch == "$(host_arch)" ]] && libs=/
  out=$(run_as "$arch" "$libs" "$bin" --version) || die "the $arch kubectl plugin does not run: $out"
  log "  $arch: $out"
  mkdir -p "$work/plugin-$arch"
  cp "$bin" LICENSE "$work/plugin-$arch/"
  tar -C "$work/plugin-$arch" --owner=0 --group=0 --mtime="@0" --sort=name -czf \
    "$DIST/kubectl-nodeimage_${VERSION}_linux_$arch.tar.gz" kubectl-nodeimage LICENSE
done
python3 - "$DIST" "$VERSION" "$IMAGE_SOURCE" $IMAGE_ARCHES <<'PY' >"$DIST/krew-nodeimage.yaml" || die "writing the krew manifest failed"
import hashlib, sys, tarfile
dist, version, source, arches = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
print(f"""# The krew plugin manifest (krew-index plugins/nodeimage.yaml) of release {version};
# its archives are the release's files of the same names.
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: nodeimage
spec:
  version: v{version}
  homepage: {source}
  shortDescription: Follow and start image pre-pull jobs node by node
  description: |
    Shows nodeimage's and OpenKruise's image pre-pull jobs (ImagePullJob,
    ImageListPullJob, KubeEdge ImagePrePullJob) node by node as they run,
    and starts one from the command line.
  platforms:""")
for arch in arches:
    name = f"kubectl-nodeimage_{version}_linux_{arch}.tar.gz"
    data = open(f"{dist}/{name}", "rb").read()
    with tarfile.open(f"{dist}/{name}") as t:
        if "kubectl-nodeimage" not in t.getnames():
            sys.exit(f"{name} has no kubectl-nodeimage")
    print(f"""  - selector:
      matchLabels:
        os: linux
        arch: {arch}
    uri: {source}/releases/download/v{version}/{name}
    sha256: {hashlib.sha256(data).hexdigest()}
    bin: kubectl-nodeimage""")
PY

# 5. The chart, packaged with the version and pushed as an OCI artifact.
HELM=${HELM:-$(command -v helm || echo "$STATE/bin/helm")}
[[ -x $HELM ]] || { tests/chart.sh --install-helm && HELM=$STATE/bin/helm; }
"$HELM" package charts/nodeimage --version "$VERSION" --app-version "$VERSION" -d "$DIST" >/dev/null
CHART_TGZ=$DIST/nodeimage-$VERSION.tgz
[[ -f $CHART_TGZ ]] || die "helm package wrote no $CHART_TGZ"
plain=()
[[ $tls == false ]] && plain=(--plain-http)
registry_retry "$HELM" push "$CHART_TGZ" "$CHART_REGISTRY" "${plain[@]}" >"$work/push.out" 2>&1 ||
  die "helm push failed: $(cat "$work/push.out")"
CHART_DIGEST=$(sed -n 's/^Digest: *//p' "$work/push.out")
[[ $CHART_DIGEST == sha256:* ]] || die "helm push printed no digest: $(cat "$work/push.out")"

# 6. What was published, and checksums.
{
  printf "# nodeimage %s, published %s\n" "$VERSION" "$(date -u +%FT%TZ)"
  printf "NODEIMAGE_VERSION='%s'\n" "$VERSION"
  printf "NODEIMAGE_CHART='%s/nodeimage'\n" "$CHART_REGISTRY"
  printf "NODEIMAGE_CHART_DIGEST='%s'\n" "$CHART_DIGEST"
  for n in "${IMAGES[@]}"; do
    var=NODEIMAGE_IMAGE_DIGEST_${n^^}
    printf "NODEIMAGE_%s_IMAGE='%s/%s@%s'\n" "${n^^}" "$IMAGE_REGISTRY" "$n" "${!var}"
  done
  printf "NODEIMAGE_ARCHES='%s'\n" "$IMAGE_ARCHES"
} >"$DIST/release.env"
(cd "$DIST" && find . -type f | sed 's#^\./##' | sort | xargs sha256sum) >"$work/SHA256SUMS"
mv "$work/SHA256SUMS" "$DIST/SHA256SUMS"
log "release $VERSION in $DIST ($((SECONDS - t_start)) s):"
(cd "$DIST" && find . -type f | sed 's#^\./##' | sort | while read -r f; do
  printf '  %8s  %s\n' "$(du -h "$f" | cut -f1)" "$f"
done) >&2
for n in "${IMAGES[@]}"; do
  var=NODEIMAGE_IMAGE_DIGEST_${n^^}
  log "  $IMAGE_REGISTRY/$n:$VERSION = @${!var} (signed)"
done
log "  $CHART_REGISTRY/nodeimage:$VERSION = @$CHART_DIGEST"

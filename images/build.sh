#!/usr/bin/env bash
# Builds nodeimage's container images without Docker and pushes them:
# release binaries (cargo, cross-compiled for other architectures), each
# image's root filesystem from images/rootfs.sh, assembled with umoci as one
# image per architecture under an OCI image index, and pushed with skopeo.
# What goes in is described once, in images/spec.sh (the Dockerfiles are
# generated from the same description).
#
#   images/build.sh                       # push to IMAGE_REGISTRY (default: the local cluster's registry)
#   IMAGE_ARCHES="amd64 arm64" images/build.sh   # both architectures (make release)
#   IMAGE_REGISTRY=registry.example.com/nodeimage IMAGE_TAG=0.2.0 images/build.sh
#   images/build.sh --no-push             # only the OCI layout
#   images/build.sh --packages-only       # only the Debian packages the build needs
#   images/build.sh --binaries-only       # only the cargo build (tests/run-all.sh
#                                         # starts it early, in the background)
#
# Environment: IMAGE_ARCHES (default: the machine's; amd64 and arm64 are
# known, either built on either machine: the other one with Debian's cross
# gcc, `rustup target add` and that architecture's Debian libraries from
# images/sysroot.sh), IMAGE_REGISTRY (repository prefix; the images are
# <prefix>/controller and <prefix>/daemon; default
# $NODEIMAGE_REGISTRY/nodeimage from the local cluster's env file),
# IMAGE_TAG (default: the workspace version, which is the chart's
# appVersion), IMAGE_DEST_CREDS (user:password for the registry, optional),
# IMAGE_TLS_VERIFY (default true; false for plain-HTTP registries; loopback
# registries never verify), IMAGE_BUILD_ALSO (more Cargo packages built in
# the same cargo run). Writes $NODEIMAGE_STATE/nodeimage-images.env
# (the prefix, tag, architectures and each image's index digest, for the
# release and install scripts).
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
log() { printf '[%s] images: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

PUSH=1 MODE=all
for arg in "$@"; do
  case $arg in
    --no-push) PUSH=0 ;;
    --packages-only) MODE=packages PUSH=0 ;;
    --binaries-only) MODE=binaries PUSH=0 ;;
    *) die "unknown argument $arg (usage: images/build.sh [--no-push | --packages-only | --binaries-only])" ;;
  esac
done

if [[ -z ${IMAGE_REGISTRY:-} && -f $STATE/env.sh ]]; then
  # shellcheck disable=SC1091
  IMAGE_REGISTRY=$(. "$STATE/env.sh" && echo "$NODEIMAGE_REGISTRY/nodeimage")
fi
((PUSH == 0)) || [[ -n ${IMAGE_REGISTRY:-} ]] ||
  die "set IMAGE_REGISTRY (e.g. registry.example.com/nodeimage), or start the local cluster"
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
TAG=${IMAGE_TAG:-$VERSION}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain 2>/dev/null) ]]; then REVISION=$REVISION-dirty; fi
HOST_ARCH=$(host_arch) || die "unsupported architecture $(uname -m)"
read -r -a ARCHES <<<"${IMAGE_ARCHES:-$HOST_ARCH}"
((${#ARCHES[@]})) || die "IMAGE_ARCHES is empty"
for arch in "${ARCHES[@]}"; do
  rust_target "$arch" >/dev/null || die "IMAGE_ARCHES: unknown architecture $arch (amd64, arm64)"
done
LAYOUT=$STATE/nodeimage-oci

# What the build needs, by command -> Debian package (protoc: the gRPC
# crates' build scripts compile containerd's and CRI's protocol files).
declare -A pkg_of=([umoci]=umoci [skopeo]=skopeo [ldd]=libc-bin [protoc]=protobuf-compiler)
missing=()
for tool in "${!pkg_of[@]}"; do command -v "$tool" >/dev/null || missing+=("${pkg_of[$tool]}"); done
for arch in "${ARCHES[@]}"; do
  # shellcheck disable=SC2207 # package names have no spaces
  missing+=($(cross_packages "$arch"))
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } ||
    die "apt-get install ${missing[*]} failed (as root on Debian or Ubuntu; elsewhere install them yourself)"
fi
[[ $MODE != packages ]] || exit 0

mkdir -p "$STATE"
targets=()
for arch in "${ARCHES[@]}"; do
  targets+=(--target "$(rust_target "$arch")")
  [[ $arch == "$HOST_ARCH" ]] || cross_setup "$arch" "$STATE"
done
log "building release binaries (cargo build --release ${targets[*]})"
t0=$SECONDS
crates=()
for n in "${IMAGES[@]}"; do crates+=(-p "$(image_crate "$n")"); done
# IMAGE_BUILD_ALSO: more packages for the same cargo run (release.sh: the
# kubectl plugin), so shared crates are compiled once, with one feature set.
for c in ${IMAGE_BUILD_ALSO:-}; do crates+=(-p "$c"); done
cargo build --release --locked --quiet "${targets[@]}" "${crates[@]}"
log "release binaries built in $((SECONDS - t0)) s"
[[ $MODE != binaries ]] || exit 0

rm -rf "$LAYOUT"
umoci init --layout "$LAYOUT"
work=$(mktemp -d "$STATE/images-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
for n in "${IMAGES[@]}"; do
  for arch in "${ARCHES[@]}"; do
    bin=${CARGO_TARGET_DIR:-target}/$(rust_target "$arch")/release/$(image_binary "$n")
    ref=$LAYOUT:$n-$arch
    sysroot=/
    [[ $arch == "$HOST_ARCH" ]] || sysroot=$STATE/sysroot-$arch
    umoci new --image "$ref"
    umoci unpack --image "$ref" "$work/$n-$arch" >/dev/null
    ROOTFS_SYSROOT=$sysroot images/rootfs.sh "$n" "$bin" "$work/$n-$arch/rootfs"
    umoci repack --image "$ref" --history.created_by "images/rootfs.sh $n" "$work/$n-$arch"
    entry=/usr/local/bin/$(image_binary "$n")
    umoci config --no-history --image "$ref" \
      --architecture "$arch" --os linux \
      --config.user "$(image_user "$n")" \
      --config.entrypoint "$entry" \
      --config.exposedports "$(image_port "$n")/tcp" \
      --config.label "org.opencontainers.image.title=nodeimage-$n" \
      --config.label "org.opencontainers.image.description=$(image_description "$n")" \
      --config.label "org.opencontainers.image.source=$IMAGE_SOURCE" \
      --config.label "org.opencontainers.image.version=$VERSION" \
      --config.label "org.opencontainers.image.revision=$REVISION" \
      --manifest.annotation "org.opencontainers.image.source=$IMAGE_SOURCE" \
      --manifest.annotation "org.opencontainers.image.version=$VERSION" \
      --manifest.annotation "org.opencontainers.image.revision=$REVISION"
    size=$(du -sk "$work/$n-$arch/rootfs" | cut -f1)
    log "built $n ($((size / 1024)) MiB unpacked, $arch, user $(image_user "$n"))"
  done
  # The name users pull: an index of the per-architecture images.
  oci_make_index "$LAYOUT" "$n" "${ARCHES[@]}"
done
umoci gc --layout "$LAYOUT"

if ((PUSH)); then
  {
    printf "export NODEIMAGE_IMAGE_PREFIX='%s'\nexport NODEIMAGE_IMAGE_TAG='%s'\nexport NODEIMAGE_IMAGE_ARCHES='%s'\n" \
      "$IMAGE_REGISTRY" "$TAG" "${ARCHES[*]}"
    for n in "${IMAGES[@]}"; do
      dest=$IMAGE_REGISTRY/$n:$TAG
      tls=${IMAGE_TLS_VERIFY:-true}
      case $dest in 127.0.0.1:* | localhost:* | localhost/* | "[::1]":*) tls=false ;; esac
      push_oci "$LAYOUT:$n" "$dest" "${IMAGE_DEST_CREDS:-}" "$tls"
      log "pushed $dest ($(oci_digest "$LAYOUT" "$n"), ${ARCHES[*]})"
      printf "export NODEIMAGE_IMAGE_DIGEST_%s='%s'\n" "${n^^}" "$(oci_digest "$LAYOUT" "$n")"
    done
  } >"$STATE/nodeimage-images.env.new"
  mv "$STATE/nodeimage-images.env.new" "$STATE/nodeimage-images.env"
fi

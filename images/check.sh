#!/usr/bin/env bash
# Checks nodeimage's images against their one description (images/spec.sh):
#
#   1. controller/Dockerfile and node-daemon/Dockerfile are what
#      images/dockerfiles.sh generates (Docker users get the same image);
#   2. each image is an index of one image per architecture built, each of
#      which holds exactly the files images/rootfs.sh puts in (binary, the
#      libraries it loads, tools, CA certificates, passwd, group) and
#      nothing else: no shell, no distro;
#   3. its config: user, entrypoint, exposed port, platform, OCI labels;
#   4. its binaries run inside its root filesystem (chroot; another
#      architecture's under Debian's qemu-user-static, with the image's
#      root as the only library path), which proves the copied libraries
#      are all they need and that a cross-built binary runs, not only
#      exists.
#
#   images/check.sh          # after images/build.sh
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
# shellcheck source=images/spec.sh
. images/spec.sh
# shellcheck source=images/cross.sh
. images/cross.sh
STATE=${NODEIMAGE_STATE:-$REPO_ROOT/.state}
LAYOUT=$STATE/nodeimage-oci
pass() { printf '  ok: %s\n' "$*" >&2; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}
log() { printf '  %s\n' "$*" >&2; }
die() { fail "$@"; }
[[ -f $LAYOUT/index.json ]] || fail "no OCI layout at $LAYOUT: run images/build.sh first"
HOST_ARCH=$(host_arch) || fail "unsupported architecture $(uname -m)"
# index_arches NAME: the architectures the image index NAME lists, checked
# against the per-architecture images beside it.
index_arches() {
  python3 - "$LAYOUT" "$1" <<'PY'
import json, sys
layout, name = sys.argv[1:]
top = json.load(open(f"{layout}/index.json"))["manifests"]
ref = lambda m: (m.get("annotations") or {}).get("org.opencontainers.image.ref.name")
idx = [m for m in top if ref(m) == name]
if len(idx) != 1 or idx[0]["mediaType"] != "application/vnd.oci.image.index.v1+json":
    sys.exit(f"{name} is not one OCI image index")
body = json.load(open(f"{layout}/blobs/sha256/{idx[0]['digest'].split(':')[1]}"))
for m in body["manifests"]:
    arch = m["platform"]["architecture"]
    same = [t for t in top if ref(t) == f"{name}-{arch}"]
    if m["platform"].get("os") != "linux" or not same or same[0]["digest"] != m["digest"]:
        sys.exit(f"{name}: the {arch} entry is not the image {name}-{arch}")
    print(arch)
PY
}
work=$(mktemp -d "$STATE/images-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

for n in "${IMAGES[@]}"; do
  case $n in controller) df=controller/Dockerfile ;; daemon) df=node-daemon/Dockerfile ;; esac
  images/dockerfiles.sh --stdout "$n" >"$work/Dockerfile.$n"
  diff -u "$df" "$work/Dockerfile.$n" >"$work/df.diff" ||
    fail "$df is stale (run images/dockerfiles.sh): $(head -n 20 "$work/df.diff")"
done
pass "the Dockerfiles are generated from images/spec.sh"

# check_image NAME ARCH: points 2 to 4 for one architecture's image.
check_image() {
  local n=$1 arch=$2 bin sysroot=/ out tool root run=() at how
  local img=$n-$arch
  bin=$(image_binary "$n")
  [[ $arch == "$HOST_ARCH" ]] || sysroot=$STATE/sysroot-$arch
  umoci unpack --image "$LAYOUT:$img" "$work/$img" >/dev/null
  root=$work/$img/rootfs
  # What rootfs.sh makes from the same binary, built here as the reference.
  ROOTFS_SYSROOT=$sysroot images/rootfs.sh "$n" "${CARGO_TARGET_DIR:-target}/$(rust_target "$arch")/release/$bin" "$work/ref-$img"
  (cd "$root" && find . -mindepth 1 | sort) >"$work/got"
  (cd "$work/ref-$img" && find . -mindepth 1 | sort) >"$work/want"
  diff -u "$work/want" "$work/got" >"$work/files.diff" ||
    fail "image $img does not hold what images/rootfs.sh makes: $(cat "$work/files.diff")"
  ! grep -qE '^\./(bin/sh|bin/bash|usr/bin/apt|var/lib/dpkg)' "$work/got" ||
    fail "image $img holds a shell or a package manager"
  pass "$img: $(wc -l <"$work/got") files, exactly what images/rootfs.sh makes (no shell, no package manager)"

  skopeo --insecure-policy inspect --config "oci:$LAYOUT:$img" >"$work/config.json"
  python3 - "$work/config.json" "$n" "$(image_user "$n")" "/usr/local/bin/$bin" "$(image_port "$n")/tcp" "$IMAGE_SOURCE" "$arch" <<'PY' ||
import json, sys
path, name, user, entry, port, source, arch = sys.argv[1:]
c = json.load(open(path))
cfg = c.get("config", {})
problems = []
if cfg.get("User") != user: problems.append(f"user {cfg.get('User')!r}, want {user!r}")
if cfg.get("Entrypoint") != [entry]: problems.append(f"entrypoint {cfg.get('Entrypoint')!r}, want [{entry!r}]")
if cfg.get("Cmd"): problems.append(f"unexpected cmd {cfg.get('Cmd')!r}")
if port not in (cfg.get("ExposedPorts") or {}): problems.append(f"port {port} not exposed")
if c.get("os") != "linux" or c.get("architecture") != arch: problems.append(f"platform {c.get('os')}/{c.get('architecture')}, want linux/{arch}")
labels = cfg.get("Labels") or {}
for k in ("source", "version", "revision", "title"):
    if not labels.get(f"org.opencontainers.image.{k}"): problems.append(f"label org.opencontainers.image.{k} missing")
if labels.get("org.opencontainers.image.source") != source: problems.append("wrong source label")
if problems:
    print("; ".join(problems)); sys.exit(1)
PY
    fail "image $img config: see above"
  pass "$img: linux/$arch, user $(image_user "$n"), entrypoint /usr/local/bin/$bin, port $(image_port "$n"), OCI labels"

  # The host's binaries in a chroot (paths inside the image); another
  # architecture's under qemu with the image as its only root.
  if [[ $arch == "$HOST_ARCH" ]]; then
    run=(chroot "$root") at="" how=chroot
  else
    run=(run_as "$arch" "$root") at=$root how=qemu-user-static
  fi
  out=$("${run[@]}" "$at/usr/local/bin/$bin" --version 2>&1) ||
    fail "$bin does not run inside its $arch image: $out"
  for tool in $(image_extra_tools "$n"); do
    "${run[@]}" "$at$tool" --version >/dev/null 2>&1 || fail "$tool does not run inside image $img"
  done
  pass "$img: $out runs inside the image ($how)"
}

for n in "${IMAGES[@]}"; do
  arches=$(index_arches "$n") || fail "image $n: $arches"
  list=$(echo "$arches" | tr '\n' ' ')
  pass "$n: an image index of ${list% } (linux)"
  for arch in $arches; do
    check_image "$n" "$arch"
  done
done

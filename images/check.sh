#!/usr/bin/env bash
# Checks nodeimage's images against their one description (images/spec.sh):
#
#   1. controller/Dockerfile and node-daemon/Dockerfile are what
#      images/dockerfiles.sh generates (Docker users get the same image);
#   2. each image images/build.sh made holds exactly the files
#      images/rootfs.sh puts in (binary, the libraries ldd names, tools, CA
#      certificates, passwd, group) and nothing else: no shell, no distro;
#   3. its config: user, entrypoint, exposed port, platform, OCI labels;
#   4. its binaries run inside its root filesystem (chroot), which proves
#      the copied libraries are all they need.
#
#   images/check.sh          # after images/build.sh
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
# shellcheck source=images/spec.sh
. images/spec.sh
STATE=${NODEIMAGE_STATE:-$REPO_ROOT/.state}
LAYOUT=$STATE/nodeimage-oci
pass() { printf '  ok: %s\n' "$*" >&2; }
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}
[[ -f $LAYOUT/index.json ]] || fail "no OCI layout at $LAYOUT: run images/build.sh first"
work=$(mktemp -d "$STATE/images-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

for n in "${IMAGES[@]}"; do
  case $n in controller) df=controller/Dockerfile ;; daemon) df=node-daemon/Dockerfile ;; esac
  images/dockerfiles.sh --stdout "$n" >"$work/Dockerfile.$n"
  diff -u "$df" "$work/Dockerfile.$n" >"$work/df.diff" ||
    fail "$df is stale (run images/dockerfiles.sh): $(head -n 20 "$work/df.diff")"
done
pass "the Dockerfiles are generated from images/spec.sh"

for n in "${IMAGES[@]}"; do
  bin=$(image_binary "$n")
  umoci unpack --image "$LAYOUT:$n" "$work/$n" >/dev/null
  # What rootfs.sh makes from the same binary, built here as the reference.
  images/rootfs.sh "$n" "target/release/$bin" "$work/ref-$n"
  (cd "$work/$n/rootfs" && find . -mindepth 1 | sort) >"$work/got"
  (cd "$work/ref-$n" && find . -mindepth 1 | sort) >"$work/want"
  diff -u "$work/want" "$work/got" >"$work/files.diff" ||
    fail "image $n does not hold what images/rootfs.sh makes: $(cat "$work/files.diff")"
  ! grep -qE '^\./(bin/sh|bin/bash|usr/bin/apt|var/lib/dpkg)' "$work/got" ||
    fail "image $n holds a shell or a package manager"
  pass "$n: $(wc -l <"$work/got") files, exactly what images/rootfs.sh makes (no shell, no package manager)"

  skopeo --insecure-policy inspect --config "oci:$LAYOUT:$n" >"$work/config.json"
  python3 - "$work/config.json" "$n" "$(image_user "$n")" "/usr/local/bin/$bin" "$(image_port "$n")/tcp" "$IMAGE_SOURCE" <<'PY' ||
import json, sys
path, name, user, entry, port, source = sys.argv[1:]
c = json.load(open(path))
cfg = c.get("config", {})
problems = []
if cfg.get("User") != user: problems.append(f"user {cfg.get('User')!r}, want {user!r}")
if cfg.get("Entrypoint") != [entry]: problems.append(f"entrypoint {cfg.get('Entrypoint')!r}, want [{entry!r}]")
if cfg.get("Cmd"): problems.append(f"unexpected cmd {cfg.get('Cmd')!r}")
if port not in (cfg.get("ExposedPorts") or {}): problems.append(f"port {port} not exposed")
if c.get("os") != "linux" or not c.get("architecture"): problems.append("no linux platform")
labels = cfg.get("Labels") or {}
for k in ("source", "version", "revision", "title"):
    if not labels.get(f"org.opencontainers.image.{k}"): problems.append(f"label org.opencontainers.image.{k} missing")
if labels.get("org.opencontainers.image.source") != source: problems.append("wrong source label")
if problems:
    print("; ".join(problems)); sys.exit(1)
PY
    fail "image $n config: see above"
  pass "$n: user $(image_user "$n"), entrypoint /usr/local/bin/$bin, port $(image_port "$n"), OCI labels"

  out=$(chroot "$work/$n/rootfs" "/usr/local/bin/$bin" --version 2>&1) ||
    fail "$bin does not run inside its image: $out"
  for tool in $(image_extra_tools "$n"); do
    chroot "$work/$n/rootfs" "$tool" --version >/dev/null 2>&1 ||
      fail "$tool does not run inside image $n"
  done
  pass "$n: $out runs inside the image (chroot)"
done

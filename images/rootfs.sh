#!/usr/bin/env bash
# Assembles the root filesystem of one image (images/spec.sh) from a built
# binary: the binary, the shared libraries it and the image's tools load
# (from ldd, with the dynamic loader), CA certificates, /etc/passwd and
# /etc/group. Run by images/build.sh on the host and by the Dockerfiles in
# their build stage, so both produce the same files.
#
#   images/rootfs.sh NAME BINARY DEST
set -euo pipefail
name=$1 binary=$2 dest=$3
# shellcheck source=images/spec.sh
. "$(dirname "${BASH_SOURCE[0]}")/spec.sh"
[[ -x $binary ]] || { echo "rootfs.sh: $binary is not an executable" >&2; exit 1; }
[[ -f /etc/ssl/certs/ca-certificates.crt ]] ||
  { echo "rootfs.sh: no /etc/ssl/certs/ca-certificates.crt (Debian package ca-certificates)" >&2; exit 1; }

rm -rf "$dest"
mkdir -p "$dest/usr/local/bin" "$dest/etc/ssl/certs" "$dest/tmp"
chmod 1777 "$dest/tmp"
install -m 0755 "$binary" "$dest/usr/local/bin/$(image_binary "$name")"
programs=("$binary")
for tool in $(image_extra_tools "$name"); do
  [[ -x $tool ]] || { echo "rootfs.sh: $tool is missing (image $name needs it)" >&2; exit 1; }
  mkdir -p "$dest$(dirname "$tool")"
  install -m 0755 "$tool" "$dest$tool"
  programs+=("$tool")
done
# Every library path ldd resolves, and the loader (the line without "=>").
for p in "${programs[@]}"; do
  ldd "$p" | awk '/=> \// { print $3 } /^\t\// { print $1 }'
done | sort -u | while read -r lib; do
  real=$(readlink -f "$lib")
  mkdir -p "$dest$(dirname "$lib")"
  install -m 0755 "$real" "$dest$lib"
done
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$dest/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dest/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$dest/etc/group"
chmod 0644 "$dest/etc/passwd" "$dest/etc/group"

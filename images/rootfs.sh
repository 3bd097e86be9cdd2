#!/usr/bin/env bash
# Assembles the root filesystem of one image (images/spec.sh) from a built
# binary: the binary, the shared libraries it and the image's tools load
# (their ELF NEEDED entries, followed to the end, and the dynamic loader),
# CA certificates, /etc/passwd and /etc/group. Run by images/build.sh on the
# host and by the Dockerfiles in their build stage, so both produce the same
# files.
#
#   images/rootfs.sh NAME BINARY DEST
#
# ROOTFS_SYSROOT (default /): where the tools and libraries are taken from.
# For another architecture than the machine's it is a tree of that
# architecture's Debian packages (images/sysroot.sh), so an arm64 image is
# assembled on an amd64 machine from arm64 files only. Libraries are read
# with readelf, never run (ldd would run them).
set -euo pipefail
name=$1 binary=$2 dest=$3
SYSROOT=${ROOTFS_SYSROOT:-/}
SYSROOT=${SYSROOT%/}
# shellcheck source=images/spec.sh
. "$(dirname "${BASH_SOURCE[0]}")/spec.sh"
die() {
  echo "rootfs.sh: $*" >&2
  exit 1
}
[[ -x $binary ]] || die "$binary is not an executable"
command -v readelf >/dev/null || die "readelf is missing (Debian package binutils)"
[[ -f /etc/ssl/certs/ca-certificates.crt ]] ||
  die "no /etc/ssl/certs/ca-certificates.crt (Debian package ca-certificates)"

# in_root PATH: PATH's file inside the sysroot, symbolic links followed there
# (an absolute link target is read as inside the sysroot, as the loader of
# that system would).
in_root() {
  local p=$SYSROOT$1 t hops=0
  while [[ -L $p ]]; do
    ((hops++ < 20)) || die "too many symbolic links at $1"
    t=$(readlink "$p")
    if [[ $t == /* ]]; then p=$SYSROOT$t; else p=$(dirname "$p")/$t; fi
  done
  [[ -e $p ]] || return 1
  echo "$p"
}

# The multiarch directory of an ELF file's machine (Debian's library paths).
triplet_of() {
  case $(readelf -h "$1" | sed -n 's/^ *Machine: *//p') in
    *X86-64*) echo x86_64-linux-gnu ;;
    AArch64) echo aarch64-linux-gnu ;;
    *) die "$1: unsupported machine $(readelf -h "$1" | sed -n 's/^ *Machine: *//p')" ;;
  esac
}

rm -rf "$dest"
mkdir -p "$dest/usr/local/bin" "$dest/etc/ssl/certs" "$dest/tmp"
chmod 1777 "$dest/tmp"
install -m 0755 "$binary" "$dest/usr/local/bin/$(image_binary "$name")"
programs=("$binary")
for tool in $(image_extra_tools "$name"); do
  src=$(in_root "$tool") || die "$tool is missing under $SYSROOT/ (image $name needs it)"
  mkdir -p "$dest$(dirname "$tool")"
  install -m 0755 "$src" "$dest$tool"
  programs+=("$src")
done

triplet=$(triplet_of "$binary")
search=("/lib/$triplet" "/usr/lib/$triplet" /lib /usr/lib /lib64 /usr/lib64)
# copy_lib PATH-IN-IMAGE: the file (links resolved) installed at that path.
copy_lib() {
  local src
  src=$(in_root "$1") || die "$1 is missing under $SYSROOT/"
  mkdir -p "$dest$(dirname "$1")"
  install -m 0755 "$src" "$dest$1"
}
declare -A seen=()
queue=("${programs[@]}")
interp=""
for p in "${programs[@]}"; do
  i=$(readelf -l "$p" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')
  [[ -z $i ]] && continue
  [[ -z $interp || $interp == "$i" ]] || die "$p asks for loader $i, another program for $interp"
  interp=$i
done
if [[ -n $interp ]]; then
  copy_lib "$interp"
  seen[${interp##*/}]=1
fi
while ((${#queue[@]})); do
  elf=${queue[0]}
  queue=("${queue[@]:1}")
  for soname in $(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'); do
    [[ -n ${seen[$soname]:-} ]] && continue
    seen[$soname]=1
    found=""
    for d in "${search[@]}"; do
      if in_root "$d/$soname" >/dev/null; then
        found=$d/$soname
        break
      fi
    done
    [[ -n $found ]] || die "$soname (needed by $elf) is not in ${search[*]} under $SYSROOT/"
    copy_lib "$found"
    queue+=("$dest$found")
  done
done
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$dest/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dest/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$dest/etc/group"
chmod 0644 "$dest/etc/passwd" "$dest/etc/group"

#!/usr/bin/env bash
# A root filesystem tree of another architecture's Debian packages, for
# images/rootfs.sh to take an image's libraries and tools from (the build
# machine's own files are of its architecture only):
#
#   images/sysroot.sh ARCH DEST      # e.g. arm64 .state/sysroot-arm64
#
# Fetches FOREIGN_DEB_PACKAGES (images/spec.sh) of ARCH from the machine's
# apt sources with a private apt state under DEST (the machine's dpkg
# configuration is not changed: no `dpkg --add-architecture`), extracts them
# into DEST, and writes DEST/.nodeimage-packages.tsv (package, version, path
# of every file) for the SBOM. Kept until the package list changes.
set -euo pipefail
arch=$1 dest=$2
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=images/spec.sh
. "$REPO_ROOT/images/spec.sh"
log() { printf '[%s] sysroot: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

stamp="$arch ${FOREIGN_DEB_PACKAGES[*]}"
if [[ -f $dest/.nodeimage-packages.tsv && "$(cat "$dest/.stamp" 2>/dev/null)" == "$stamp" ]]; then
  exit 0
fi
log "fetching Debian's $arch ${FOREIGN_DEB_PACKAGES[*]}"
rm -rf "$dest"
apt_dir=$dest.apt
rm -rf "$apt_dir"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs" "$dest"
apt_opts=(-o "APT::Architecture=$arch" -o "APT::Architectures=$arch"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
  -o Dir::State::status=/dev/null -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq
(cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download -qq "${FOREIGN_DEB_PACKAGES[@]}")
: >"$dest/.nodeimage-packages.tsv.new"
for deb in "$apt_dir"/debs/*.deb; do
  pkg=$(dpkg-deb -f "$deb" Package) ver=$(dpkg-deb -f "$deb" Version)
  dpkg-deb -x "$deb" "$dest"
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n 's#^\./\(.*[^/]\)$#/\1#p' |
    awk -v p="$pkg" -v v="$ver" '{ print p "\t" v "\t" $0 }' >>"$dest/.nodeimage-packages.tsv.new"
done
mv "$dest/.nodeimage-packages.tsv.new" "$dest/.nodeimage-packages.tsv"
echo "$stamp" >"$dest/.stamp"
rm -rf "$apt_dir"
log "$(wc -l <"$dest/.nodeimage-packages.tsv") files of ${#FOREIGN_DEB_PACKAGES[@]} packages in $dest"

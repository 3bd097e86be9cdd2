# shellcheck shell=bash disable=SC2034  # read by the scripts that source it
# What nodeimage's two container images contain, in one place. Both ways of
# building them read it: images/build.sh (umoci and skopeo, no Docker) and
# the Dockerfiles, which images/dockerfiles.sh generates from it (so the two
# cannot drift; images/check.sh fails when a Dockerfile is stale).
#
# Each image is its binary, exactly the shared libraries the binaries need
# (found with ldd, so no distro is inside), CA certificates and
# /etc/passwd and /etc/group for the users below. No shell.

IMAGES=(controller daemon)

# image_crate NAME: the Cargo package that builds its binary.
image_crate() {
  case $1 in
    controller) echo nodeimage-controller ;;
    daemon) echo nodeimage-daemon ;;
  esac
}
# image_binary NAME: the binary's name (target/release/<it>, /usr/local/bin/<it>).
image_binary() { image_crate "$1"; }
# image_user NAME: uid:gid it runs as (docs/install.md): the controller as
# "nonroot"; the daemon as root, because containerd's socket admits root only.
image_user() {
  case $1 in
    controller) echo 65532:65532 ;;
    daemon) echo 0:0 ;;
  esac
}
# image_port NAME: the port of its /healthz, /readyz and /metrics.
image_port() {
  case $1 in
    controller) echo 8080 ;;
    daemon) echo 10226 ;;
  esac
}
# image_extra_tools NAME: host programs copied in with their libraries. The
# daemon runs NodeUpgradeJob's tool in the host's namespaces through nsenter
# (util-linux), so the chart needs no second image for it.
image_extra_tools() {
  case $1 in
    controller) ;;
    daemon) echo /usr/bin/nsenter ;;
  esac
}
# image_description NAME: the OCI description label.
image_description() {
  case $1 in
    controller) echo "nodeimage controller: mirrors Nodes into NodeImages and rolls pull jobs out" ;;
    daemon) echo "nodeimage node daemon: pulls images through the node's containerd (CRI)" ;;
  esac
}
IMAGE_SOURCE=https://github.com/nodeimage/nodeimage

# FOREIGN_DEB_PACKAGES: the Debian packages an image of another
# architecture than the build machine's takes its files from (images/
# sysroot.sh fetches that architecture's builds of them): the C library and
# libgcc for the Rust binaries, util-linux and its libraries for nsenter.
# rootfs.sh fails, naming the library, when one is missing.
FOREIGN_DEB_PACKAGES=(libc6 libgcc-s1 util-linux libselinux1 libpcre2-8-0)

# rust_target ARCH: the Rust target triple of an image architecture.
rust_target() {
  case $1 in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) return 1 ;;
  esac
}

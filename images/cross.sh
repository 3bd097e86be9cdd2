# shellcheck shell=bash
# Building for another architecture than the machine's (images/build.sh,
# release/release.sh). Sourced, not executed; needs images/spec.sh and a
# `log` and `die` function.

# host_arch: the machine's architecture, as images name it.
host_arch() {
  case $(uname -m) in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) return 1 ;;
  esac
}

# gnu_triplet ARCH: Debian's multiarch name, which its cross gcc carries.
gnu_triplet() { rust_target "$1" | sed 's/-unknown-/-/'; }

# cross_packages ARCH: the Debian packages building for ARCH still needs on
# this machine (its cross gcc, and qemu-user-static that runs its binaries in
# the checks), space-separated; empty for the machine's own architecture.
cross_packages() {
  local arch=$1 triplet q pkgs=()
  [[ $arch == "$(host_arch)" ]] && return 0
  triplet=$(gnu_triplet "$arch")
  command -v "$triplet-gcc" >/dev/null || pkgs+=("gcc-${triplet//_/-}")
  case $arch in amd64) q=x86_64 ;; arm64) q=aarch64 ;; esac
  command -v "qemu-$q-static" >/dev/null || pkgs+=(qemu-user-static)
  echo "${pkgs[*]}"
}

# cross_setup ARCH STATE: Rust's standard library for ARCH, Debian's cross
# gcc (the linker, and the C compiler of the ring crate's build script),
# exported to cargo through its environment variables, and ARCH's Debian
# libraries and tools for the images (images/sysroot.sh, into
# STATE/sysroot-ARCH).
cross_setup() {
  local arch=$1 state=$2 target triplet var pkg
  target=$(rust_target "$arch")
  triplet=$(gnu_triplet "$arch")
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    log "rustup target add $target"
    rustup target add "$target" >/dev/null 2>&1 || die "rustup target add $target failed"
  fi
  pkg=$(cross_packages "$arch")
  if [[ -n $pkg ]]; then
    log "installing Debian packages $pkg (the cross linker, qemu for the checks)"
    # shellcheck disable=SC2086 # a list of package names
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkg; } >/dev/null ||
      die "apt-get install $pkg failed"
  fi
  var=${target//-/_}
  export "CARGO_TARGET_${var^^}_LINKER=$triplet-gcc" "CC_$var=$triplet-gcc" "AR_$var=$triplet-ar"
  "$(dirname "${BASH_SOURCE[0]}")/sysroot.sh" "$arch" "$state/sysroot-$arch"
}

# run_as ARCH ROOT PROGRAM ARGS...: runs a program built for ARCH; for
# another architecture under Debian's qemu-user-static, whose loader and
# libraries are looked up under ROOT only (an image's root filesystem, or
# the sysroot).
run_as() {
  local arch=$1 root=$2 q
  shift 2
  if [[ $arch == "$(host_arch)" ]]; then
    "$@"
    return
  fi
  case $arch in amd64) q=x86_64 ;; arm64) q=aarch64 ;; esac
  if ! command -v "qemu-$q-static" >/dev/null; then
    log "installing Debian package qemu-user-static (runs the $arch binaries in the checks)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static; } >/dev/null ||
      die "apt-get install qemu-user-static failed"
  fi
  "qemu-$q-static" -L "$root" "$@"
}

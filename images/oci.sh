# shellcheck shell=bash
# The one image pusher of the shell scripts (images/build.sh and the test
# cluster's scripts). Sourced, not executed.

# push_oci LAYOUT:TAG DEST [USER:PASSWORD] [TLS_VERIFY]: copies an OCI
# layout image to docker://DEST with skopeo, the manifest byte for byte (its
# digest stays the layout's); TLS_VERIFY defaults to false (the test
# registries are plain HTTP).
push_oci() {
  local src=$1 dest=$2 creds=() tls=${4:-false}
  [[ -n ${3:-} ]] && creds=(--dest-creds "$3")
  skopeo --insecure-policy copy --quiet --preserve-digests --dest-tls-verify="$tls" "${creds[@]}" \
    "oci:$src" "docker://$dest"
}

# shellcheck shell=bash
# OCI layout helpers of the shell scripts (images/build.sh, release/, the
# test cluster's scripts): the one image pusher, index assembly, digests.
# Sourced, not executed.

# registry_retry CMD...: CMD, run again up to 6 times 10 s apart while it
# fails. A registry that restarts (the soak's registry fault takes the
# test registry down for 20 s while a background release may be pushing to
# it) must not fail a push; a real refusal costs a minute more.
registry_retry() {
  local try
  for try in 1 2 3 4 5 6; do
    "$@" && return 0
    ((try < 6)) || return 1
    printf '[%s] registry_retry: %s failed (try %d of 6); again in 10 s\n' "$(date +%H:%M:%S)" "$1" "$try" >&2
    sleep 10
  done
}

# push_oci LAYOUT:TAG DEST [USER:PASSWORD] [TLS_VERIFY]: copies an OCI
# layout image, or an image index with every image it lists, to
# docker://DEST with skopeo, each manifest byte for byte (digests stay the
# layout's); TLS_VERIFY defaults to false (the test registries are plain
# HTTP).
push_oci() {
  local src=$1 dest=$2 creds=() tls=${4:-false}
  [[ -n ${3:-} ]] && creds=(--dest-creds "$3")
  registry_retry skopeo --insecure-policy copy --quiet --all --preserve-digests --dest-tls-verify="$tls" "${creds[@]}" \
    "oci:$src" "docker://$dest"
}

# oci_digest LAYOUT TAG: the digest of what TAG names in the layout.
oci_digest() {
  python3 - "$1" "$2" <<'PY'
import json, sys
layout, tag = sys.argv[1:]
for m in json.load(open(f"{layout}/index.json"))["manifests"]:
    if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == tag:
        print(m["digest"]); break
else:
    sys.exit(f"oci_digest: no {tag} in {layout}")
PY
}

# oci_make_index LAYOUT NAME ARCH...: an image index NAME over the images
# NAME-ARCH of the layout (each with its linux/ARCH platform), replacing any
# earlier NAME; the per-architecture tags stay for the checks.
oci_make_index() {
  python3 - "$@" <<'PY'
import hashlib, json, os, sys
layout, name, arches = sys.argv[1], sys.argv[2], sys.argv[3:]
path = f"{layout}/index.json"
top = json.load(open(path))
by_tag = {(m.get("annotations") or {}).get("org.opencontainers.image.ref.name"): m for m in top["manifests"]}
entries = []
for arch in arches:
    m = by_tag.get(f"{name}-{arch}")
    if m is None:
        sys.exit(f"oci_make_index: no {name}-{arch} in {layout}")
    entries.append({"mediaType": m["mediaType"], "digest": m["digest"], "size": m["size"],
                    "platform": {"architecture": arch, "os": "linux"}})
blob = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                   "manifests": entries}, separators=(",", ":")).encode()
digest = hashlib.sha256(blob).hexdigest()
os.makedirs(f"{layout}/blobs/sha256", exist_ok=True)
with open(f"{layout}/blobs/sha256/{digest}", "wb") as f:
    f.write(blob)
top["manifests"] = [m for m in top["manifests"]
                    if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") != name]
top["manifests"].append({"mediaType": "application/vnd.oci.image.index.v1+json",
                         "digest": f"sha256:{digest}", "size": len(blob),
                         "annotations": {"org.opencontainers.image.ref.name": name}})
tmp = path + ".new"
with open(tmp, "w") as f:
    json.dump(top, f)
os.replace(tmp, path)
PY
}

#!/usr/bin/env python3
"""An SPDX 2.3 (JSON) software bill of materials for one image of one
architecture: the image, the Rust crates compiled into its binary (cargo
tree for that target, normal dependencies only: build scripts and proc
macros do not ship) and the Debian packages its other files come from;
and, with --cyclonedx, the check that cargo-cyclonedx's SBOM of the
binary lists every one of those crates.

Kept beside cargo-cyclonedx because no tool here reads the image's Debian
files: the images carry no dpkg database (images/rootfs.sh copies files),
which is what syft reads for Debian packages.

    release/sbom.py --image daemon --crate nodeimage-daemon --version 0.1.0 \
        --arch arm64 --target aarch64-unknown-linux-gnu --rootfs DIR \
        --manifest-digest sha256:... [--sysroot DIR] \
        [--built-with nodeimage-controller] --out FILE

--sysroot is the tree images/sysroot.sh extracted for a foreign
architecture (its .nodeimage-packages.tsv says which package gave which
file); without it the machine's dpkg database is asked.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import uuid

SOURCE = "https://github.com/nodeimage/nodeimage"


def fail(msg):
    print(f"sbom.py: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd):
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"{' '.join(cmd)}: {getattr(e, 'stderr', '') or e}")


def crates(crate, target, built_with):
    """(name, version, license, local) of every crate linked into the binary.

    cargo resolves features once for all the packages of one build, so the
    tree is asked for all of them together (built_with) and only the part
    under this binary's package is read: the same crates and features the
    binary was linked from.
    """
    roots = sorted(set(built_with) | {crate})
    cmd = ["cargo", "tree", "--locked", "--target", target, "-e", "normal",
           "--prefix", "depth", "--no-dedupe", "-f", "{p}|{l}"]
    for r in roots:
        cmd += ["-p", r]
    found, in_tree = {}, False
    for line in run(cmd).splitlines():
        line = line.replace(" (*)", "").strip()
        digits = len(line) - len(line.lstrip("0123456789"))
        if not digits or "|" not in line:
            continue
        depth, rest = int(line[:digits]), line[digits:]
        pkg, lic = rest.split("|", 1)
        parts = pkg.split()
        if len(parts) < 2:
            continue
        if depth == 0:
            in_tree = parts[0] == crate
        if not in_tree:
            continue
        name, ver = parts[0], parts[1].lstrip("v")
        local = len(parts) > 2 and parts[2].startswith("(/")
        found[(name, ver)] = (lic.strip(), local)
    if not found:
        fail(f"cargo tree listed no crate for {crate} on {target}")
    return [(n, v, lic, local) for (n, v), (lic, local) in sorted(found.items())]


def debian_packages(rootfs, sysroot, arch):
    """{(package, version)} of the files in the image that Debian shipped."""
    files = []
    for base, _, names in os.walk(rootfs):
        for n in names:
            rel = "/" + os.path.relpath(os.path.join(base, n), rootfs)
            if rel.startswith("/usr/local/bin/") or rel in ("/etc/passwd", "/etc/group"):
                continue  # nodeimage's own binary; written by images/rootfs.sh
            files.append(rel)
    pkgs = set()
    if sysroot:
        index = {}
        with open(os.path.join(sysroot, ".nodeimage-packages.tsv")) as f:
            for line in f:
                pkg, ver, path = line.rstrip("\n").split("\t")
                index[os.path.normpath(path)] = (pkg, ver)
        for rel in files:
            hit = index.get(rel) or index.get(rel.replace("/lib/", "/usr/lib/", 1))
            if rel == "/etc/ssl/certs/ca-certificates.crt":
                hit = host_package("ca-certificates")
            if not hit:
                fail(f"{rel}: no package of the sysroot ships it")
            pkgs.add(hit)
        return pkgs
    for rel in files:
        if rel == "/etc/ssl/certs/ca-certificates.crt":
            pkgs.add(host_package("ca-certificates"))
            continue
        owner = None
        for cand in (rel, os.path.realpath(rel), rel.replace("/lib/", "/usr/lib/", 1)):
            r = subprocess.run(["dpkg", "-S", cand], capture_output=True, text=True)
            if r.returncode == 0:
                owner = r.stdout.split(":")[0].split(",")[0].strip()
                break
        if not owner:
            fail(f"{rel}: dpkg -S finds no package")
        pkgs.add(host_package(f"{owner}:{arch}" if ":" not in owner else owner))
    return pkgs


def host_package(name):
    out = run(["dpkg-query", "-W", "-f", "${Package}\t${Version}", name]).strip()
    pkg, ver = out.split("\t")
    return (pkg, ver)


def spdx_id(kind, name, ver):
    safe = "".join(c if c.isalnum() or c in ".-" else "-" for c in f"{name}-{ver}")
    return f"SPDXRef-{kind}-{safe}"


def check_cyclonedx(path, crate, linked):
    """Fails unless the CycloneDX SBOM at `path` (cargo-cyclonedx, one
    binary) names every crate linked into the binary, by name and version."""
    try:
        with open(path) as f:
            bom = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    listed = {(c.get("name"), c.get("version")) for c in bom.get("components", [])}
    root = bom.get("metadata", {}).get("component", {})
    listed.add((root.get("name"), root.get("version")))
    missing = [f"{n} {v}" for n, v, _, _ in linked if (n, v) not in listed]
    if missing:
        fail(f"{path} does not list {len(missing)} crate(s) linked into {crate}: {', '.join(missing[:20])}")
    print(f"{path}: lists all {len(linked)} crates linked into {crate}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    for a in ("image", "crate", "version", "arch", "target", "rootfs", "manifest-digest", "out"):
        ap.add_argument(f"--{a}", required=True)
    ap.add_argument("--sysroot")
    ap.add_argument("--built-with", action="append", default=[],
                    help="another package of the same cargo build (features are unified across them)")
    ap.add_argument("--cyclonedx",
                    help="cargo-cyclonedx's SBOM of the same binary: fail unless it lists every crate linked into it")
    a = ap.parse_args()
    linked = crates(a.crate, a.target, a.built_with)
    if a.cyclonedx:
        check_cyclonedx(a.cyclonedx, a.crate, linked)

    image_id = "SPDXRef-image"
    packages = [{
        "SPDXID": image_id,
        "name": f"nodeimage-{a.image}",
        "versionInfo": a.version,
        "downloadLocation": SOURCE,
        "primaryPackagePurpose": "CONTAINER",
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "Apache-2.0",
        "copyrightText": "NOASSERTION",
        "comment": f"linux/{a.arch} image manifest {a.manifest_digest}",
        "externalRefs": [{
            "referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
            "referenceLocator": f"pkg:oci/{a.image}@{a.manifest_digest.replace(':', '%3A')}?arch={a.arch}",
        }],
    }]
    rels = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
             "relatedSpdxElement": image_id}]
    for name, ver, lic, local in linked:
        pid = spdx_id("crate", name, ver)
        packages.append({
            "SPDXID": pid, "name": name, "versionInfo": ver,
            "downloadLocation": SOURCE if local else f"https://crates.io/api/v1/crates/{name}/{ver}/download",
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": (lic.replace("/", " OR ") if lic else "NOASSERTION"),
            "copyrightText": "NOASSERTION",
            "externalRefs": [] if local else [{
                "referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                "referenceLocator": f"pkg:cargo/{name}@{ver}"}],
        })
        rels.append({"spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": pid})
    for name, ver in sorted(debian_packages(a.rootfs, a.sysroot, a.arch)):
        pid = spdx_id("deb", name, ver)
        packages.append({
            "SPDXID": pid, "name": name, "versionInfo": ver,
            "downloadLocation": "NOASSERTION", "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "NOASSERTION", "copyrightText": "NOASSERTION",
            "externalRefs": [{
                "referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                "referenceLocator": f"pkg:deb/debian/{name}@{ver}?arch={a.arch}"}],
        })
        rels.append({"spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": pid})

    doc = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"nodeimage-{a.image}-{a.version}-linux-{a.arch}",
        "documentNamespace": f"{SOURCE}/sbom/{a.image}-{a.version}-{a.arch}-{uuid.uuid4()}",
        "creationInfo": {
            "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "creators": ["Tool: nodeimage release/sbom.py"],
        },
        "packages": packages,
        "relationships": rels,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{a.out}: {len(packages) - 1} packages", file=sys.stderr)


if __name__ == "__main__":
    main()

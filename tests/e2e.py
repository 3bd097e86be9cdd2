#!/usr/bin/env python3
"""The end-to-end step of tests/run-all.sh: every test binary of the
workspace with `--ignored`, two binaries at a time, then the tests that
stop the shared controller or loosen its CRDs, alone.

    NODEIMAGE_ENV=.state/env.sh tests/e2e.py [--skip NAME]...

Why lanes: the binaries mostly wait (on pulls, intervals, watches), so
two at once take little more CPU than one, and the step is the largest
part of a cold `make test` after the builds (issue 50). Within a binary
libtest runs E2E_THREADS (4) tests at once, as before.

What may not run beside others goes in ALONE below, with the reason: a
test that kills or restarts the shared controller, or edits cluster-wide
objects other binaries' tests read. Tests that share something only with
tests of their own binary keep using a lock in that file (libtest runs
one binary's tests in one process).

Each binary's output is printed whole when it ends, with its time, so
lanes do not interleave lines. Exit status 1 if any binary failed; every
binary runs (as `cargo test --no-fail-fast`)."""
import json
import os
import subprocess
import sys
import threading
import time

# (binary, exact test name): run after the lanes, one at a time.
ALONE = [
    # Loosens the CRDs' validation (other binaries' tests expect
    # refusals) and restarts the shared controller.
    ("hostile", "objects_that_do_not_decode_fail_alone_also_after_a_restart"),
    # SIGKILLs the shared controller mid-job.
    ("imagepulljob", "controller_killed_mid_job_still_completes"),
]

# Seconds each binary took in a cold run (tests/README.md, cold runs):
# the lanes take the longest first, so that two long ones do not end the
# step alone. A binary not listed counts as 30 s.
WEIGHT = {
    "followtag": 125, "imagepulljob": 98, "nodeimage": 77, "removal": 60,
    "nodeupgradejob": 52, "credentials": 38, "registry_pacing": 37,
    "api": 30, "imagelistpulljob": 26, "imageprepulljob": 25, "hostile": 20,
    "kubectl_plugin": 18, "runtimes": 17, "p2p": 15, "operations": 11,
}


def binaries(root):
    """(name, path, package dir) of every test executable `cargo test
    --workspace --tests` would run, built if needed."""
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--tests", "--no-run", "--quiet",
         "--message-format=json"],
        cwd=root, check=True, stdout=subprocess.PIPE, text=True).stdout
    found = []
    for line in out.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        if not m.get("profile", {}).get("test"):
            continue
        t = m["target"]
        name = t["name"] if "test" in t["kind"] else f"{t['name']} (unit)"
        found.append((name, m["executable"], os.path.dirname(m["manifest_path"])))
    return found


def run(name, exe, cwd, args, lock, failed):
    """Runs one binary; prints its output whole, under the lock."""
    start = time.monotonic()
    p = subprocess.run([exe, *args], cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, errors="replace")
    took = time.monotonic() - start
    with lock:
        verdict = "ok" if p.returncode == 0 else f"FAILED (exit {p.returncode})"
        print(f"---- {name}: {verdict} in {took:.1f} s", flush=True)
        # Binaries without a selected test print only their zero counts.
        if p.returncode != 0 or "running 0 tests" not in p.stdout:
            print(p.stdout, end="", flush=True)
        if p.returncode != 0:
            failed.append(name)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    extra = sys.argv[1:]
    lanes = int(os.environ.get("E2E_LANES", "2"))
    threads = os.environ.get("E2E_THREADS", "4")
    found = binaries(root)
    by_name = {n: (e, d) for n, e, d in found}
    for b, _ in ALONE:
        if b not in by_name:
            sys.exit(f"tests/e2e.py: ALONE names binary {b!r}, which cargo did not build")
    skips = [a for b, t in ALONE for a in ("--skip", t)]
    queue = sorted(found, key=lambda f: -WEIGHT.get(f[0], 30))
    lock, failed = threading.Lock(), []
    started = time.monotonic()
    print(f"{len(found)} test binaries in {lanes} lanes of {threads} threads, "
          f"then {len(ALONE)} tests alone", flush=True)

    def lane():
        while True:
            with lock:
                if not queue:
                    return
                name, exe, cwd = queue.pop(0)
            args = ["--ignored", f"--test-threads={threads}", *skips, *extra]
            run(name, exe, cwd, args, lock, failed)

    workers = [threading.Thread(target=lane) for _ in range(lanes)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(f"---- lanes done in {time.monotonic() - started:.1f} s", flush=True)
    for b, t in ALONE:
        exe, cwd = by_name[b]
        run(f"{b}::{t} (alone)", exe, cwd, ["--ignored", "--exact", t], lock, failed)
    print(f"---- end-to-end step: {time.monotonic() - started:.1f} s; "
          f"failed: {', '.join(failed) or 'none'}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""API server CPU per NodeImage PATCH: whole-status and whole-spec writes
against per-image writes, on a copy of a NodeImage saved from a bench run.

Usage (docs/benchmarks.md has the numbers):
  kubectl get nodeimage sim-00497 -o json > /tmp/ni.json   # after a 100-job scale.sh run
  kubectl proxy --port=28111 &
  python3 tests/bench/patchcost.py 28111 "$(pgrep -f 'kubelocal apiserver')" /tmp/ni.json 150

It creates the NodeImage `patchcost` (a fake one, labelled so the node
mirror keeps it), runs blocks of PATCHes of each kind in turn (three
rounds), prints the API server's CPU time per PATCH, and deletes it."""
import copy, json, sys, time, urllib.request

port, pid, src, rounds = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
base = f"http://127.0.0.1:{port}/apis/apps.kruise.io/v1alpha1/nodeimages"
TICK = 100  # clock ticks per second

def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK

def req(method, url, body=None, ctype="application/json"):
    data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
    r = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": ctype})
    with urllib.request.urlopen(r) as resp:
        return json.loads(resp.read())

def ptr(s):
    return s.replace("~", "~0").replace("/", "~1")

o = json.load(open(src))
name = "patchcost"
try:
    req("DELETE", f"{base}/{name}")
    time.sleep(2)
except Exception:
    pass
obj = {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
       "metadata": {"name": name, "labels": {"apps.kruise.io/fake-nodeimage": "true"}},
       "spec": o["spec"]}
cur = req("POST", base, obj)
cur = req("PATCH", f"{base}/{name}/status", [{"op": "add", "path": "/status", "value": o["status"]}],
          "application/json-patch+json")
images = sorted(cur["spec"]["images"])
JP = "application/json-patch+json"

def status_whole(i):
    st = copy.deepcopy(cur["status"])
    img = images[i % len(images)]
    st["imageStatuses"][img]["tags"][0]["progress"] = i % 100
    return [{"op": "test", "path": "/metadata/uid", "value": cur["metadata"]["uid"]},
            {"op": "test", "path": "/status/desired", "value": st["desired"]},
            {"op": "add", "path": "/status", "value": st}]

def status_narrow(i):
    img = images[i % len(images)]
    entry = copy.deepcopy(cur["status"]["imageStatuses"][img])
    entry["tags"][0]["progress"] = i % 100
    return [{"op": "test", "path": "/metadata/uid", "value": cur["metadata"]["uid"]},
            {"op": "test", "path": "/status/desired", "value": cur["status"]["desired"]},
            {"op": "add", "path": f"/status/imageStatuses/{ptr(img)}", "value": entry},
            {"op": "add", "path": "/status/succeeded", "value": cur["status"]["succeeded"]}]

def spec_whole(i, spec):
    new = copy.deepcopy(spec["images"])
    img = images[i % len(images)]
    new[img]["tags"][0]["version"] = i + 1
    return [{"op": "test", "path": "/spec", "value": spec},
            {"op": "add", "path": "/spec/images", "value": new}]

def spec_narrow(i, spec):
    img = images[i % len(images)]
    old = spec["images"][img]
    new = copy.deepcopy(old)
    new["tags"][0]["version"] = i + 1
    return [{"op": "test", "path": f"/spec/images/{ptr(img)}", "value": old},
            {"op": "add", "path": f"/spec/images/{ptr(img)}", "value": new}]

def run(label, make, sub, spec_based=False):
    label += suffix
    global cur
    spec = cur["spec"]
    c0, t0 = cpu(), time.time()
    for i in range(rounds):
        body = make(i, spec) if spec_based else make(i)
        out = req("PATCH", f"{base}/{name}{sub}", body, JP)
        spec = out["spec"]
    c1, t1 = cpu(), time.time()
    cur = out
    print(f"{label:21s} {rounds} patches: apiserver CPU {1000*(c1-c0)/rounds:6.1f} ms/patch, wall {1000*(t1-t0)/rounds:6.1f} ms/patch, body {len(json.dumps(body, separators=(',',':')))} B")

def three_rounds():
    for _ in range(3):
        run("status whole", status_whole, "/status")
        run("status narrow", status_narrow, "/status")
        run("spec whole", spec_whole, "", True)
        run("spec narrow", spec_narrow, "", True)
    print("managed fields:", len(json.dumps(cur["metadata"].get("managedFields") or [], separators=(",", ":"))), "B")

suffix = ""
three_rounds()
# The same, once the object's managed fields are cleared (a list of one
# empty entry clears them; Update writes then record none).
cur = req("PATCH", f"{base}/{name}", [{"op": "add", "path": "/metadata/managedFields", "value": [{}]}], JP)
suffix = " (none)"
three_rounds()
req("DELETE", f"{base}/{name}")

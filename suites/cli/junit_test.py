#!/usr/bin/env python3
"""`check --junit`, `verify --junit` and `gate --junit` (#15): the XML
parses, holds one test case per configuration and quantity (per point and
gated metric for the gate), and a failure names the strategy, the quantity,
the ratio and why; bad --junit paths are refused before any work with exit 2.
verify from the command line: an export's own trace passes (exit 0), the same
trace with its step-1 gradients doubled fails (exit 1), bad files and flags
exit 2 naming what is wrong and write nothing.

    junit_test.py PARABENCH WORKDIR
"""
import json
import re
import os
import stat
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

EXE, WORK = sys.argv[1], sys.argv[2]
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
failed = []


def expect(cond, what):
    if not cond:
        failed.append(what)
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def cases(path):
    root = ET.parse(path).getroot()
    expect(root.tag == "testsuites", "root is <testsuites>")
    out = []
    for c in root.iter("testcase"):
        f = c.find("failure")
        out.append((c.get("classname"), c.get("name"), None if f is None else f.get("message"),
                    c.find("skipped") is not None))
    return root, out


# check: one passing configuration and one with a fault.
xml = os.path.join(WORK, "check.xml")
rc, out = run("check", "--mesh", "dp2", "--strategy", "shard=zero1", "shard=zero1,faults=grad_not_averaged",
              "--precision", "fp32", "--steps", "2", "--out", os.path.join(WORK, "runs"), "--junit", xml)
expect(rc == 1, f"check with a fault exits 1 (got {rc}): {out[-500:]}")
root, got = cases(xml)
classes = sorted({c for c, _, _, _ in got})
expect(len(classes) == 2, f"two configurations: {classes}")
names = {n for c, n, _, _ in got if "fault" not in c}
for q in ("loss", "grad_norm", "grads", "params"):
    expect(q in names, f"a case for {q}: {sorted(names)}")
expect(any(n.startswith("mem.") for n in names) and any(n.startswith("comm.") for n in names),
       f"memory and comm cases: {sorted(names)}")
fails = [(c, n, m) for c, n, m, _ in got if m is not None]
expect(fails and all("grad_not_averaged" in c for c, _, _ in fails), f"only the faulty configuration fails: {fails}")
expect(any(n == "grads" and "ratio" in m and "does not train like one device" in m for _, n, m in fails),
       f"the grads failure names the ratio and the reason: {fails}")
expect(root.get("failures") == str(len(fails)) and root.get("tests") == str(len(got)), f"counts: {root.attrib}")
expect(not os.path.exists(xml + ".tmp"), "no .tmp left")

# gate: the committed baseline against itself passes, one case per point and metric.
base = os.path.join(SRC, "results", "baselines", "default")
gxml = os.path.join(WORK, "gate.xml")
rc, out = run("gate", "--baseline", base, "--current", base, "--junit", gxml)
expect(rc == 0, f"gate of the baseline against itself exits 0 (got {rc}): {out[-500:]}")
root, got = cases(gxml)
expect(len(got) > 10 and all(m is None for _, _, m, _ in got), f"gate cases, none failing: {len(got)}")
# gate: a throughput drop is a failing case naming baseline, current and why.
# A real two-point sweep to gate (tiny, dp1 and dp2, 2 steps).
cfg = os.path.join(WORK, "sweep.toml")
with open(cfg, "w") as fh:
    fh.write('[sweep]\nstrategies = ["shard=none"]\nmeshes = ["dp1", "dp2"]\nmodels = ["tiny"]\n'
             'precisions = ["fp32"]\nscaling = "weak"\nbatch_per_rank = 2\nseq = 16\nsteps = 2\nwarmup = 1\n')
rc, out = run("sweep", "--config", cfg, "--run-dir", os.path.join(WORK, "sweep"))
expect(rc == 0, f"the sweep runs (got {rc}): {out[-500:]}")
sweep = os.path.join(WORK, "sweep", "sweep.csv")
if rc == 0:
    with open(sweep) as fh:
        lines = fh.read().splitlines()
    head = lines[0].split(",")
    col, kind = head.index("tokens_per_s"), head.index("kind")
    i = next(k for k in range(1, len(lines)) if lines[k].split(",")[kind] == "sweep")
    row = lines[i].split(",")
    row[col] = str(float(row[col]) * 0.01)
    lines[i] = ",".join(row)
    cur = os.path.join(WORK, "cur")
    os.makedirs(cur)
    with open(os.path.join(cur, "sweep.csv"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    rc, out = run("gate", "--baseline", sweep, "--current", os.path.join(cur, "sweep.csv"), "--junit", gxml)
    expect(rc == 1, f"a 99% throughput drop fails the gate (got {rc})")
    root, got = cases(gxml)
    fails = [(c, n, m) for c, n, m, _ in got if m is not None]
    expect(len(fails) >= 1 and "throughput drop" in fails[0][2] and "baseline" in fails[0][2],
           f"the failure names the drop: {fails}")

# verify: the export's own trace passes; with its step-1 gradients doubled it fails.
ex = os.path.join(WORK, "export")
rc, out = run("export", "--dir", ex, "--set", "train.steps=3")
expect(rc == 0, f"export (got {rc}): {out[-300:]}")
golden = os.path.join(ex, "trace.safetensors")


def edited(name, grads_factor=1.0, meta=None):
    """The golden trace with grads.* scaled and metadata changed, by hand."""
    with open(golden, "rb") as fh:
        blob = fh.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = bytearray(blob[8 + n:])
    for k, v in header.items():
        if k.startswith("grads.") and v["dtype"] == "F32":
            b, e = v["data_offsets"]
            vals = struct.unpack("<%df" % ((e - b) // 4), data[b:e])
            data[b:e] = struct.pack("<%df" % len(vals), *(x * grads_factor for x in vals))
    header["__metadata__"].update(meta or {})
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    path = os.path.join(WORK, name)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + bytes(data))
    return path


vxml = os.path.join(WORK, "verify.xml")
rc, out = run("verify", "--export", ex, "--trace", golden, "--run-dir", os.path.join(WORK, "v_ok"), "--junit", vxml)
expect(rc == 0 and "PASS" in out, f"verify of the export's own trace exits 0 (got {rc}): {out[-500:]}")
root, got = cases(vxml)
expect({n for _, n, _, _ in got} == {"loss", "grads", "params", "grad_norm", "lr"} and all(m is None for _, _, m, _ in got),
       f"verify cases loss, grads, params, grad_norm, lr, passing: {got}")
bad = edited("doubled.safetensors", 2.0, {"framework": "myfw", "strategy": "ddp", "mesh": "dp2"})
rc, out = run("verify", "--export", ex, "--trace", golden, bad, "--run-dir", os.path.join(WORK, "v_bad"),
              "--junit", vxml)
expect(rc == 1 and "myfw:ddp" in out and "FAIL" in out, f"doubled gradients fail verify with exit 1 (got {rc}): {out[-500:]}")
root, got = cases(vxml)
fails = [(c, n, m) for c, n, m, _ in got if m is not None]
expect(len(fails) == 1 and fails[0][1] == "grads" and "myfw:ddp" in fails[0][0] and "ratio" in fails[0][2],
       f"one failing case, grads of myfw:ddp, naming the ratio: {fails}")
# What to fix: the first failing check and the parameters with the largest error, in the text and the JUnit message.
for where, text in (("the text output", out), ("the JUnit message", fails[0][2] if fails else "")):
    # Every gradient doubled: each parameter's ratio alike, five of them named.
    expect("first failure: grads at step 1" in text and
           re.search(r"largest errors in the step-1 gradients \(ratio / C = 8\): ([\w.]+ [0-9.e+]+, ){4}[\w.]+ [0-9.e+]+", text),
           f"{where} names the first failure and the worst parameters: {text[-600:]}")
with open(os.path.join(WORK, "v_bad", "conformance.csv")) as fh:
    rows = fh.read().splitlines()
# Per trace of 3 steps: loss, grad_norm and lr each step, grads of step 1, final params.
expect(len(rows) == 1 + 2 * 11 and all(",foreign," in r for r in rows[1:]), f"22 conformance rows, backend foreign: {rows[:2]}")
# Bad input: exit 2 naming what is wrong; nothing written.
for args, msg in (
        (["--trace", golden], "--export DIR is required"),
        (["--export", ex], "--trace FILE is required"),
        (["--export", os.path.join(WORK, "nope"), "--trace", golden], "is not a directory"),
        (["--export", ex, "--trace", os.path.join(WORK, "nope.safetensors")], "is not a file"),
        (["--export", ex, "--trace", os.path.join(ex, "init.safetensors")], "'format' is 'parabench-export-v1'"),
        (["--export", ex, "--trace", edited("hash.safetensors", meta={"export_hash": "00000000000000ff"})],
         "trained from another export"),
        (["--export", ex, "--trace", golden, edited("mesh.safetensors", meta={"mesh": "dp3"})],
         "3 data replicas x 1 microbatches do not divide the export's batch of 8"),
        (["--export", ex, "--trace", edited("key.safetensors", meta={"seed": "1"})], "unknown metadata key 'seed'")):
    runs = os.path.join(WORK, "v_refused")
    rc, out = run("verify", *args, "--out", runs)
    expect(rc == 2 and msg in out and "Traceback" not in out, f"verify {args}: exit 2 with '{msg}' (got {rc}: {out[-300:]})")
    expect(not os.path.exists(runs), f"verify {args}: nothing written")

# Bad paths: exit 2 naming the flag, before any work (no run directory made).
for path, msg in ((os.path.join(WORK, "no", "such", "r.xml"), "does not exist"), (WORK, "is a directory"),
                  ("", "must not be empty")):
    runs = os.path.join(WORK, "bad_runs")
    rc, out = run("check", "--mesh", "dp2", "--precision", "fp32", "--steps", "1", "--out", runs, "--junit", path)
    expect(rc == 2 and "--junit" in out and msg in out, f"--junit '{path}': exit 2 with '{msg}' (got {rc}: {out[-300:]})")
    expect(not os.path.exists(runs), f"--junit '{path}': nothing ran")

# A writer never replaces what it did not create (harness/io/output_file.h):
# the trace verify judges is not its --junit, however spelled; a device
# written to stays a device.
trace_copy = os.path.join(WORK, "judged.safetensors")
shutil.copyfile(golden, trace_copy)
before = open(trace_copy, "rb").read()
for spelled in (trace_copy, os.path.join(WORK, ".", "judged.safetensors")):
    rc, out = run("verify", "--export", ex, "--trace", trace_copy, "--out", os.path.join(WORK, "v_self"),
                  "--junit", spelled)
    expect(rc == 2 and "is also an input of this command" in out,
           f"verify --junit {spelled} = its trace: exit 2 naming it (got {rc}: {out[-300:]})")
    expect(open(trace_copy, "rb").read() == before, f"verify --junit {spelled}: the trace is untouched")
rc, out = run("verify", "--export", ex, "--trace", trace_copy, "--out", os.path.join(WORK, "v_self"),
              "--junit", os.path.join(ex, "init.safetensors"))
expect(rc == 2 and "is also an input" in out, f"verify --junit into the export: exit 2 (got {rc}: {out[-300:]})")
rc, out = run("verify", "--export", ex, "--trace", trace_copy, "--out", os.path.join(WORK, "v_null"),
              "--junit", "/dev/null")
expect(rc == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode),
       f"verify --junit /dev/null: written in place, still a device (got {rc}: {out[-300:]})")

print("junit_test:", "FAILED" if failed else "ok", f"({len(failed)} failures)")
sys.exit(1 if failed else 0)

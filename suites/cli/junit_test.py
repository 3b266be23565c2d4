#!/usr/bin/env python3
"""`check --junit` and `gate --junit` (#15): the XML parses, holds one test
case per configuration and quantity (per point and gated metric for the
gate), and a failure names the strategy, the quantity, the ratio and why;
bad --junit paths are refused before any work with exit 2.

    junit_test.py PARABENCH WORKDIR
"""
import os
import shutil
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
for q in ("loss", "grads", "params"):
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

# Bad paths: exit 2 naming the flag, before any work (no run directory made).
for path, msg in ((os.path.join(WORK, "no", "such", "r.xml"), "cannot write there"), (WORK, "is a directory"),
                  ("", "must not be empty")):
    runs = os.path.join(WORK, "bad_runs")
    rc, out = run("check", "--mesh", "dp2", "--precision", "fp32", "--steps", "1", "--out", runs, "--junit", path)
    expect(rc == 2 and "--junit" in out and msg in out, f"--junit '{path}': exit 2 with '{msg}' (got {rc}: {out[-300:]})")
    expect(not os.path.exists(runs), f"--junit '{path}': nothing ran")

print("junit_test:", "FAILED" if failed else "ok", f"({len(failed)} failures)")
sys.exit(1 if failed else 0)

#!/usr/bin/python3
"""Add a run's new conformance rows to a committed baseline, changing none.

For a change that adds checks (say a new judged quantity) and must leave every
existing one as it was: reads the baseline's conformance.csv and RUN_DIR's
conformance rows, keys both as `parabench gate` does (strategy, precision,
quantity, item, step, bitwise: suites/report/gate.cc), and
  - refuses (exit 1, naming the keys) when a baseline key is missing from the
    run or changed its pass there: then the change is not an addition;
  - refuses when the run adds no key (nothing to extend);
  - otherwise appends the run's rows of the new keys (all of them, or those
    of --quantity only) to the baseline file, leaving its rows byte for byte,
    and appends a line saying so to SOURCE.txt.
sweep.csv and train.csv are not touched.
"""
import argparse
import csv
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
KEY = ("strategy", "precision", "quantity", "item", "step", "bitwise")


def conformance_rows(path):
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if "kind" not in (reader.fieldnames or []):
            return reader.fieldnames, []
        return reader.fieldnames, [r for r in reader if r["kind"] == "conformance"]


def key(r):
    return tuple(r.get(k, "") for k in KEY)


def passes(rows):
    """{key: all rows pass} (a key fails if any of its rows fails, as the gate)."""
    out = {}
    for r in rows:
        out[key(r)] = out.get(key(r), True) and r["pass"] == "1" and r.get("status", "ok") == "ok"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--baseline", default=os.path.join(ROOT, "results", "baselines", "default"))
    ap.add_argument("--quantity", help="add only the new rows of this quantity (e.g. grad_norm)")
    ap.add_argument("--why", required=True, help="the change that added the rows, for SOURCE.txt")
    a = ap.parse_args()
    base_path = os.path.join(a.baseline, "conformance.csv")
    if not os.path.isfile(base_path):
        print("extend_baseline: no %s" % base_path, file=sys.stderr)
        return 2
    fields, base = conformance_rows(base_path)
    run = []
    for f in sorted(os.listdir(a.run_dir)) if os.path.isdir(a.run_dir) else []:
        if f.endswith(".csv"):
            run += conformance_rows(os.path.join(a.run_dir, f))[1]
    if not run:
        print("extend_baseline: no conformance rows in %s" % a.run_dir, file=sys.stderr)
        return 2
    bp, rp = passes(base), passes(run)
    missing = sorted(k for k in bp if k not in rp)
    changed = sorted(k for k in bp if k in rp and rp[k] != bp[k])
    for what, keys in (("missing from the run", missing), ("changed pass in the run", changed)):
        if keys:
            print("extend_baseline: %d baseline keys %s, e.g. %s" % (len(keys), what, keys[:3]), file=sys.stderr)
    if missing or changed:
        return 1
    new = [r for r in run if key(r) not in bp and (not a.quantity or r["quantity"] == a.quantity)]
    if not new:
        print("extend_baseline: the run adds no key", file=sys.stderr)
        return 1
    failing = sorted({key(r) for r in new if r["pass"] != "1"})
    if failing:
        print("extend_baseline: %d new keys fail, e.g. %s" % (len(failing), failing[:3]), file=sys.stderr)
        return 1
    with open(base_path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        for r in new:
            w.writerow(r)
    origin = sorted({(r["run_id"], r["git_rev"], r["host"]) for r in new})
    keys = len({key(r) for r in new})
    with open(os.path.join(a.baseline, "SOURCE.txt"), "a") as fh:
        fh.write("conformance.csv extended after %s by scripts/extend_baseline.py%s from %s: %d rows (%d keys) "
                 "appended, the %d earlier keys all present in the run with the same pass, no earlier row edited\n"
                 % (a.why, " --quantity " + a.quantity if a.quantity else "",
                    "; ".join("run %s (git %s, host %s)" % o for o in origin), len(new), keys, len(bp)))
    print("extend_baseline: %d rows (%d keys) appended to %s" % (len(new), keys, base_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Promote a run's results to a committed gate baseline.

Copies the results CSVs of RUN_DIR (files with a `kind` column, of the kinds
asked for; by default conformance, sweep and train_step: what the CI gate can
hold a run to, see results/baselines/README.md) into results/baselines/NAME/
(default NAME: default), replacing what was there, and records where they came
from (run id, git revision, host) in SOURCE.txt. `parabench gate --baseline
results/baselines/default --current RUN_DIR` then compares against them.
Review the diff before committing: a baseline is a claim about performance.
"""
import argparse
import csv
import os
import shutil
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def rows_of(path):
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if "kind" not in (reader.fieldnames or []):
            return []
        return list(reader)


def kinds_of(path):
    return {r["kind"] for r in rows_of(path)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--name", default="default")
    ap.add_argument("--kinds", default="conformance,sweep,train_step")
    ap.add_argument("--dest", default=os.path.join(ROOT, "results", "baselines"))
    a = ap.parse_args()
    want = set(a.kinds.split(","))
    files = sorted(f for f in os.listdir(a.run_dir) if f.endswith(".csv"))
    picked = [f for f in files if kinds_of(os.path.join(a.run_dir, f)) & want]
    if not picked:
        print("update_baseline: no results CSV of kinds %s in %s" % (a.kinds, a.run_dir), file=sys.stderr)
        return 2
    dest = os.path.join(a.dest, a.name)
    if os.path.isdir(dest):
        for f in os.listdir(dest):
            if f.endswith(".csv"):
                os.remove(os.path.join(dest, f))
    os.makedirs(dest, exist_ok=True)
    for f in picked:
        shutil.copyfile(os.path.join(a.run_dir, f), os.path.join(dest, f))
        print("baseline:", os.path.join(dest, f))
    origin = sorted({(r["run_id"], r["git_rev"], r["host"]) for f in picked
                     for r in rows_of(os.path.join(a.run_dir, f))})
    with open(os.path.join(dest, "SOURCE.txt"), "w") as fh:
        fh.write("copied from %s (kinds: %s): %s\n" % (os.path.abspath(a.run_dir), a.kinds, ", ".join(picked)))
        for run_id, rev, host in origin:
            fh.write("run %s, git %s, host %s\n" % (run_id, rev or "unknown", host or "unknown"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""parabench report on a sweep with a row marked unreliable (its step times
spread past the bound, docs/sweep-and-report.md#reliable-rows): the report
lists it under "Unreliable rows" and leaves it out of the planner's error
(the median |error| table counts the other points only); a sweep CSV of
schema version 1 (no `unreliable` column) still validates and reports, its
rows all counted.

usage: report_unreliable_test.py PARABENCH WORKDIR
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "..", "..", "results", "schema.json")


def header(schema, kind):
    return [c["name"] for c in schema["common"]] + [c["name"] for c in schema["kinds"][kind]["columns"]]


def write(path, cols, rows):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, restval="")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def common(kind, world):
    return {"run_id": "20260101T000000Z-abcdef", "kind": kind, "timestamp": "2026-01-01T00:00:00.000Z",
            "git_rev": "test", "host": "test", "backend": "local", "world": world, "mesh": "dp%d" % world,
            "config_hash": "0123456789abcdef", "status": "ok", "reason": ""}


def make_run(d, schema, with_column):
    os.makedirs(d)
    sweep, plan = [], []
    # dp4's steps spread as on a busy machine (cv 1.3): its plan error (+150%) must not count.
    for world, tps, cv, est in ((1, 1000.0, 0.03, 1050.0), (2, 1900.0, 0.05, 2000.0), (4, 1600.0, 1.3, 4000.0)):
        s = common("sweep", world)
        s.update(strategy="shard=none", model="tiny", precision="fp32", microbatches=1, global_batch=2 * world,
                 seq_len=16, scaling="weak", step_time_s=32 * world / tps, tokens_per_s=tps,
                 step_time_min_s=0.9 * 32 * world / tps, step_time_max_s=3 * 32 * world / tps, step_time_cv=cv,
                 measured_steps=10, oversubscribed=int(world > 2), mem_total=1 << 20)
        if with_column:
            s["unreliable"] = int(cv > 0.25)
        sweep.append(s)
        p = common("plan", world)
        p["backend"] = "analytic"
        p.update(strategy="shard=none", model="tiny", precision="fp32", params=12345, microbatches=1,
                 global_batch=2 * world, seq_len=16, mem_total=1 << 20, est_step_time_s=32 * world / est,
                 est_tokens_per_s=est)
        plan.append(p)
    cols = header(schema, "sweep")
    if not with_column:
        cols.remove("unreliable")
    write(os.path.join(d, "sweep.csv"), cols, sweep)
    write(os.path.join(d, "plan.csv"), header(schema, "plan"), plan)


def main():
    parabench, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    with open(SCHEMA) as fh:
        schema = json.load(fh)
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    for with_column in (True, False):
        d = os.path.join(work, "v2" if with_column else "v1")
        make_run(d, schema, with_column)
        for f in ("sweep.csv", "plan.csv"):
            v = subprocess.run([parabench, "validate", os.path.join(d, f)], capture_output=True, text=True)
            check(v.returncode == 0, "%s: validate %s exit %d: %s" % (d, f, v.returncode, v.stderr.strip()))
        r = subprocess.run([parabench, "report", d], capture_output=True, text=True, timeout=240)
        check(r.returncode == 0, "%s: report exit %d: %s" % (d, r.returncode, r.stderr.strip()[-500:]))
        check("Traceback" not in r.stderr, "%s: a traceback" % d)
        page = open(os.path.join(d, "report.html")).read() if os.path.exists(os.path.join(d, "report.html")) else ""
        listed = "<h2>Unreliable rows</h2>" in page
        # The group "all points" of the planner's median |error|: its count of points.
        m = re.search(r"<td>all points</td><td>(\d+)</td>", page)
        counted = int(m.group(1)) if m else None
        if with_column:
            check(listed and "sweep.csv:4" in page and "tiny dp4 shard=none" in page,
                  "v2: the unreliable row is not listed with its file, line and point")
            check(counted == 2, "v2: the planner's error counts %s points, not the 2 reliable ones" % counted)
            check("1 row(s) marked unreliable are left out" in page, "v2: the plan summary does not say so")
        else:
            check(not listed, "v1: rows without the column are listed as unreliable")
            check(counted == 3, "v1: the planner's error counts %s points, not all 3" % counted)
    for f in failures:
        print("FAIL:", f)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

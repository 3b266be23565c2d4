#!/usr/bin/python3
"""The default job's results, end to end through the binary (two ctests).

run EXE WORK: `parabench run --quick --out WORK` once; then every CSV of the
run directory must pass `parabench validate` (results CSVs against their kind,
pipeline timelines and comm counters against the schema's auxiliary files),
the expected files must all be there, every ok sweep point must have its plan
row (same strategy, model, precision, mesh, global_batch, seq_len), and the
report must hold the planner-vs-measured figure and its per-point table.
The run's own exit status is not asserted here: a failing conformance check is
the gate's business (next test), not a schema problem.

gate EXE WORK BASELINE: `parabench gate` of that run directory against the
committed baseline must exit 0 (thresholds: results/baselines/README.md).
"""
import csv
import glob
import os
import re
import shutil
import subprocess
import sys

EXPECTED = ["conformance.csv", "train.csv", "plan.csv", "sweep.csv", "collectives.csv", "comm_counters.csv",
            "timeline_1f1b.csv", "timeline_zb-h1.csv", "timeline_interleaved.csv", "profile_plan.csv"]
PAIR_KEY = ["strategy", "model", "precision", "mesh", "global_batch", "seq_len"]
# The CI thresholds (results/baselines/README.md): memory is byte-exact, so the
# default 5%; throughput fails only below 20% of the baseline (a 5x slowdown),
# which a loaded 2-core machine does not reach but a gross regression does.
GATE_FLAGS = ["--max-throughput-drop", "0.8", "--max-memory-rise", "0.05"]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def run_dir(work):
    dirs = sorted(d for d in glob.glob(os.path.join(work, "*")) if os.path.isdir(d))
    if len(dirs) != 1:
        raise SystemExit("expected exactly one run directory in %s, found %s" % (work, dirs))
    return dirs[0]


def run(exe, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # The timeout is a hang guard, not a speed target: a loaded 2-core machine has taken 300 s.
    p = subprocess.run([exe, "run", "--quick", "--out", work], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=840)
    print(p.stdout[-3000:])
    d = run_dir(work)
    csvs = sorted(glob.glob(os.path.join(d, "*.csv")))
    names = [os.path.basename(c) for c in csvs]
    for f in EXPECTED:
        check(f in names, "run directory holds %s (has %s)" % (f, names))
    v = subprocess.run([exe, "validate"] + csvs, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(v.stdout)
    check(v.returncode == 0, "parabench validate passes on every CSV of the run (exit %d)" % v.returncode)
    check("%d files checked, 0 with problems" % len(csvs) in v.stdout, "validate checked all %d files" % len(csvs))

    sweep = [r for r in rows(os.path.join(d, "sweep.csv")) if r["status"] == "ok"]
    plans = {tuple(r[k] for k in PAIR_KEY): r for r in rows(os.path.join(d, "plan.csv")) if r["status"] == "ok"}
    check(len(sweep) >= 6, "sweep has ok points (%d)" % len(sweep))
    for s in sweep:
        k = tuple(s[c] for c in PAIR_KEY)
        p = plans.get(k)
        check(p is not None, "sweep point %s has a plan row" % (k,))
        if p is not None:
            check(float(p["est_tokens_per_s"]) > 0 and int(p["mem_total"]) > 0,
                  "plan row %s has a time and memory estimate" % (k,))
    # The calibrated profile's plans (plan --machine machine.toml --against): one per point whose ranks fit
    # the cores, each paired with its sweep row; none of the oversubscribed.
    check(os.path.isfile(os.path.join(d, "machine.toml")), "machine.toml (parabench calibrate) written")
    profile = {tuple(r[k] for k in PAIR_KEY): r for r in rows(os.path.join(d, "profile_plan.csv"))}
    fit = [s for s in sweep if s["oversubscribed"] == "0"]
    check(len(profile) == len(fit) and len(fit) > 0,
          "profile_plan.csv has a row per point that fits the cores (%d rows, %d points)" % (len(profile), len(fit)))
    for s in fit:
        p = profile.get(tuple(s[c] for c in PAIR_KEY))
        check(p is not None and float(p["est_tokens_per_s"]) > 0 and p["mem_total"] == s["mem_total"],
              "point %s has the profile's plan, its peak memory exact" % (tuple(s[c] for c in PAIR_KEY),))
    html_path = os.path.join(d, "report.html")
    check(os.path.isfile(html_path), "report.html written")
    check(os.path.isfile(os.path.join(d, "plan_vs_measured.png")), "plan_vs_measured.png written")
    if os.path.isfile(html_path):
        with open(html_path) as fh:
            doc = fh.read()
        if any(s.get("unreliable") != "1" for s in sweep):  # (a busy machine may leave none to compare)
            check("<h2>Planner vs measured</h2>" in doc and "tokens/s planned" in doc,
                  "report has the planner-vs-measured section with its table")
            check("Planner vs measured: skipped" not in doc, "planner-vs-measured is not skipped")
        # The summary by group: its all-points median is the one these CSVs give, over the rows not marked
        # unreliable (their steps spread as on a busy machine: the report leaves them out of the planner's error).
        reliable = [s for s in sweep if s.get("unreliable") != "1"]
        errs = []
        for s in reliable:
            p = plans.get(tuple(s[c] for c in PAIR_KEY))
            if p is not None and float(s["tokens_per_s"]) > 0:
                errs.append(abs(100.0 * (float(p["est_tokens_per_s"]) - float(s["tokens_per_s"])) /
                                float(s["tokens_per_s"])))
        if errs:
            row = "<tr><td>all points</td><td>%d</td><td>%.1f%%</td>" % (len(errs), sorted(errs)[len(errs) // 2])
            check(row in doc, "report's planner summary states the median |error| over every reliable point (%s)"
                  % row)
        if len(reliable) < len(sweep):
            check("<h2>Unreliable rows</h2>" in doc, "report lists the %d rows marked unreliable"
                  % (len(sweep) - len(reliable)))
        # Each group the report must show: one with a reliable point paired with a plan row (on a busy
        # machine a group's rows may all be marked unreliable; then the report rightly leaves it out).
        paired = [s for s in reliable if tuple(s[c] for c in PAIR_KEY) in plans and float(s["tokens_per_s"]) > 0]
        groups = {
            "fit the cores": [s for s in paired if s.get("oversubscribed") != "1"],
            "axis dp": [s for s in paired if not re.search(r"(tp|cp|ep|pp)([2-9]|\d\d)", s.get("mesh", ""))],
        }
        for group, members in groups.items():
            if members:
                check("<td>%s</td>" % group in doc, "report's planner summary has the group '%s' (%d reliable points)"
                      % (group, len(members)))
        check(any(groups.values()) or len(reliable) < len(sweep),
              "the sweep has a reliable point in 'fit the cores' or 'axis dp', or rows marked unreliable")
        # The profile's own summary, its all-points median the one profile_plan.csv gives.
        perrs = []
        for s in (s for s in fit if s.get("unreliable") != "1"):
            p = profile.get(tuple(s[c] for c in PAIR_KEY))
            if p is not None:
                perrs.append(abs(100.0 * (float(p["est_tokens_per_s"]) - float(s["tokens_per_s"])) /
                                 float(s["tokens_per_s"])))
        check("<h3>The calibrated machine profile vs measured</h3>" in doc, "report has the profile's section")
        if perrs:
            row = "<tr><td>all points</td><td>%d</td><td>%.1f%%</td>" % (len(perrs), sorted(perrs)[len(perrs) // 2])
            check(doc.count(row) >= 1, "report's profile summary states its median |error| (%s)" % row)


def gate(exe, work, baseline):
    d = run_dir(work)
    g = subprocess.run([exe, "gate", "--baseline", baseline, "--current", d] + GATE_FLAGS,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(g.stdout[-6000:])
    check(g.returncode == 0, "parabench gate against %s passes (exit %d)" % (baseline, g.returncode))
    check("PASS" in g.stdout or "nothing moved" in g.stdout, "gate reports PASS")


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "run" and len(sys.argv) == 4:
        run(sys.argv[2], sys.argv[3])
    elif mode == "gate" and len(sys.argv) == 5:
        gate(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        print("usage: run_csv_test.py run EXE WORK | gate EXE WORK BASELINE", file=sys.stderr)
        return 2
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""scripts/report.py on hostile and large inputs (ctest report_py, label cli).

Runs the report script directly (the binary's schema check is not in the way:
every CSV written here is one `parabench validate` accepts) on
  (a) the fixture of scripts/report_fixture.py,
  (b) valid but hostile sweeps: a NaN step time, negative tokens/s, world 0,
      and a sweep.csv holding only its header,
  (c) a 200,000-row sweep.csv (with a plan row per point) and a large
      conformance.csv,
and asserts: exit 0, no "Traceback" in the output, report.html and the PNGs
written, no partial PNG left (no *.tmp), the hostile rows named as skipped
with their reason, and the 200k case within 1 GiB peak RSS
(resource.getrusage(RUSAGE_CHILDREN).ru_maxrss of the report's process). The
speed target (the 200k case within 60 s of CPU time, ru_utime + ru_stime: the
wall clock of a loaded machine is not the report's) is a benchmark, not part
of the test: --bench asserts it too (docs/measurements.md).

  report_py_test.py WORK            all of it
  report_py_test.py WORK --bench    all of it, and the 200k case's CPU time
  report_py_test.py WORK --gen-only writes the inputs under WORK and stops
"""
import csv
import glob
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPTS = os.path.join(ROOT, "scripts")
REPORT = os.path.join(SCRIPTS, "report.py")
PYTHON = "/usr/bin/python3"
BIG_ROWS = 200_000
LIMIT_S, LIMIT_RSS = 60.0, 1 << 30

sys.path.insert(0, SCRIPTS)
import report_fixture  # noqa: E402

failures = []


def check(cond, what):
    print("%s: %s" % ("ok" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def schema():
    with open(os.path.join(ROOT, "results", "schema.json")) as fh:
        return json.load(fh)


def fixture(d):
    subprocess.run([PYTHON, os.path.join(SCRIPTS, "report_fixture.py"), "--out", d], check=True)


def read(path):
    with open(path, newline="") as fh:
        r = csv.reader(fh)
        return next(r), list(r)


def hostile(d):
    """The fixture with three sweep rows made valid-but-unplottable; returns {(model, mesh, strategy): reason}."""
    fixture(d)
    path = os.path.join(d, "sweep.csv")
    head, rows = read(path)
    col = {c: i for i, c in enumerate(head)}
    bad = {}
    for i, (column, value) in zip((0, 5, 9), (("step_time_s", "nan"), ("tokens_per_s", "-512.5"), ("world", "0"))):
        rows[i][col[column]] = value
        bad[(rows[i][col["model"]], rows[i][col["mesh"]], rows[i][col["strategy"]])] = column
    with open(path, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([head] + rows)
    return bad


def header_only(d):
    fixture(d)
    head, _rows = read(os.path.join(d, "sweep.csv"))
    with open(os.path.join(d, "sweep.csv"), "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerow(head)


MODELS = ["small", "medium", "large", "tiny-moe", "wide"]
# Sweep strategies (key=value texts; the mesh holds the axes) and conformance configurations (their texts).
SWEEP = ["shard=none", "shard=zero1", "shard=zero2", "shard=zero3", "shard=hsdp", "tp2 shard=zero3",
         "tp2 sp=on,recompute=selective", "cp2 cp_algo=ring,shard=zero2", "pp2 schedule=1f1b,shard=zero1",
         "pp2 tp2 schedule=interleaved", "pp4 schedule=gpipe", "ep2 shard=none"]
FAMILIES = ["none dp{dp} overlap", "zero1 dp{dp}", "zero2 dp{dp}", "zero3 dp{dp}", "hsdp dp{dp} F2",
            "tp2 x zero3 dp{dp}", "tp2 sp recompute=selective x none dp{dp}", "cp2 ring zigzag x zero2 dp{dp}",
            "1f1b pp2 v1 m4 x zero1 dp{dp}", "interleaved pp2 v2 m4 x tp2", "gpipe pp4 v1 m8",
            "none dp{dp} overlap moe E4 top2 cf1.25 global ep2 edp{dp}"]


def big(d, n=BIG_ROWS):
    """A sweep.csv of n rows (5 models x 2 precisions x 24 series x 11 worlds, measured repeatedly), a plan
    row per point, and a conformance.csv of 60,000 rows over 600 configurations."""
    os.makedirs(d, exist_ok=True)
    sch = schema()
    rng = random.Random(11)
    sweep_h, plan_h = report_fixture.header(sch, "sweep"), report_fixture.header(sch, "plan")
    points = []
    for model in MODELS:
        for prec in ("fp32", "bf16-mixed"):
            for k, fam in enumerate(SWEEP):
                for accum in (1, 2):
                    for w in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
                        tp = 2 if "tp2" in fam else 1
                        pp = 4 if "pp4" in fam else 2 if "pp2" in fam else 1
                        cp = 2 if "cp2" in fam else 1
                        ep = 2 if "ep2" in fam else 1
                        dp = w // (tp * pp * cp)
                        if dp < max(1, ep):
                            continue
                        mesh = "dp%d.tp%d.cp%d.pp%d" % (dp, tp, cp, pp) + (".ep%d" % ep if ep > 1 else "")
                        strategy = fam.split(" ")[-1] + (",accum=%d" % accum if accum > 1 else "")
                        points.append((model, prec, strategy, mesh, w, tp, pp, cp, ep, k))
    plans = []
    with open(os.path.join(d, "sweep.csv"), "w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(sweep_h)
        for i in range(n):
            model, prec, strategy, mesh, w, tp, pp, cp, ep, k = points[i % len(points)]
            tps = 5000.0 * w * 0.9 ** (k % 5) * rng.lognormvariate(0, 0.08)
            st = 1024 / tps
            mem = [rng.randint(1 << 20, 1 << 28) // w for _ in range(6)]
            r = report_fixture.common("sweep", w, mesh)
            r.update(strategy=strategy, model=model, precision=prec, device="cpu", microbatches=4 if pp > 1 else 1,
                     global_batch=16, seq_len=64, scaling="weak" if i % 2 else "strong", step_time_s=st,
                     tokens_per_s=tps, step_time_min_s=st * 0.95, step_time_max_s=st * 1.1, step_time_cv=0.03,
                     measured_steps=5, oversubscribed=int(w > 2), model_flops_per_s=tps * 6e6, mfu=0.2,
                     peak_flops=w * 1.5e11, mem_params=mem[0], mem_grads=mem[1], mem_optimizer=mem[2],
                     mem_activations=mem[3], mem_comm=mem[4], mem_workspace=mem[5], mem_total=sum(mem),
                     mem_host_total=0, comm_dp_bytes=rng.randint(0, 1 << 26), comm_tp_bytes=(1 << 22) if tp > 1 else 0,
                     comm_cp_bytes=(1 << 21) if cp > 1 else 0, comm_pp_bytes=(1 << 20) if pp > 1 else 0,
                     comm_ep_bytes=(1 << 19) if ep > 1 else 0, comm_inter_node_bytes=0, exposed_comm_s=0.1 * st,
                     bubble=0.2 * rng.random() if pp > 1 else 0, moe_dropped=0.05 if ep > 1 else "",
                     moe_load_max_mean=1.3 if ep > 1 else "")
            out.writerow(["" if r.get(c) is None else r[c] for c in sweep_h])
            if i < len(points):
                p = report_fixture.common("plan", w, mesh)
                p.update(backend="analytic", strategy=strategy, model=model, precision=prec, params=1000000,
                         microbatches=r["microbatches"], global_batch=16, seq_len=64, mem_total=sum(mem),
                         est_tokens_per_s=tps * rng.uniform(0.8, 1.3), est_step_time_s=st, est_bubble=0.1)
                plans.append(["" if p.get(c) is None else p[c] for c in plan_h])
    with open(os.path.join(d, "plan.csv"), "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([plan_h] + plans)
    conf_h = report_fixture.header(sch, "conformance")
    with open(os.path.join(d, "conformance.csv"), "w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(conf_h)
        configs = [(FAMILIES[k % len(FAMILIES)].format(dp=2 + k % 3) + " v%d" % k, prec)
                   for k in range(300) for prec in ("fp32", "bf16-mixed")]
        for i in range(60_000):
            strategy, prec = configs[i % len(configs)]
            q = ("loss", "grads", "params", "comm", "memory")[(i // len(configs)) % 5]
            bitwise = q in ("comm", "memory")
            ratio = 0.0 if bitwise else rng.lognormvariate(-1, 1.2)
            r = report_fixture.common("conformance", 4, "dp4")
            r.update(strategy=strategy, precision=prec, quantity=q, step=1 + i % 5, error=ratio * 1e-7, floor=1e-7,
                     ratio=ratio, threshold=0 if bitwise else 8, bitwise=int(bitwise),
                     **{"pass": int(bitwise or ratio <= 8)})
            out.writerow(["" if r.get(c) is None else r[c] for c in conf_h])


def report(d, what):
    """Runs report.py on d: (exit code, output, CPU seconds, the children's peak RSS in bytes so far)."""
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([PYTHON, REPORT, d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    rss = r1.ru_maxrss * 1024
    print("%s: exit %d, %.1f s CPU, %.1f s wall, peak RSS of the children so far %.0f MiB" % (
        what, p.returncode, cpu, wall, rss / 2 ** 20))
    check(p.returncode == 0, "%s: exit 0" % what)
    if p.returncode != 0:
        print(p.stdout[-3000:])
    check("Traceback" not in p.stdout, "%s: no traceback" % what)
    check(os.path.isfile(os.path.join(d, "report.html")), "%s: report.html written" % what)
    check(not glob.glob(os.path.join(d, "*.tmp*")), "%s: no temporary file left" % what)
    return p.returncode, p.stdout, cpu, rss


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    work = os.path.abspath(sys.argv[1])
    shutil.rmtree(work, ignore_errors=True)
    dirs = {k: os.path.join(work, k) for k in ("fixture", "hostile", "header_only", "big")}
    fixture(dirs["fixture"])
    bad = hostile(dirs["hostile"])
    header_only(dirs["header_only"])
    big(dirs["big"])
    if "--gen-only" in sys.argv:
        return 0

    # The big run first: the children's peak RSS is then its own (the fixtures' runs come after).
    _rc, out, cpu, rss = report(dirs["big"], "200k sweep rows")
    # CPU seconds, not wall: ctest -j and a shared 2-core machine stretch the wall clock, not the work.
    print("200k rows: %.1f s of CPU, peak RSS %.0f MiB" % (cpu, rss / 2 ** 20))
    if "--bench" in sys.argv:
        check(cpu < LIMIT_S, "200k rows: %.1f s of CPU < %.0f s" % (cpu, LIMIT_S))
    check(rss < LIMIT_RSS, "200k rows: peak RSS %.0f MiB < 1024 MiB" % (rss / 2 ** 20))
    check(len(glob.glob(os.path.join(dirs["big"], "*.png"))) >= 8, "200k rows: the figures written")
    with open(os.path.join(dirs["big"], "report.html")) as fh:
        doc = fh.read()
    check(len(doc) < 40 << 20, "200k rows: report.html of %.1f MiB, not a table per row" % (len(doc) / 2 ** 20))
    check("<h2>Planner vs measured</h2>" in doc and "<tr><td>all points</td><td>%d</td>" % BIG_ROWS in doc,
          "200k rows: the planner summary counts every point")

    _rc, out, _dt, _rss = report(dirs["fixture"], "fixture")
    pngs = glob.glob(os.path.join(dirs["fixture"], "*.png"))
    check(len(pngs) == 17, "fixture: 17 PNGs (%d)" % len(pngs))
    with open(os.path.join(dirs["fixture"], "report.html")) as fh:
        check("skipped" not in fh.read(), "fixture: nothing skipped")

    _rc, out, _dt, _rss = report(dirs["hostile"], "hostile sweep rows")
    with open(os.path.join(dirs["hostile"], "report.html")) as fh:
        doc = fh.read()
    check("<h2>Skipped rows</h2>" in doc, "hostile: the report lists skipped rows")
    for (model, mesh, strategy), column in sorted(bad.items()):
        line = next((ln for ln in doc.split("<tr>") if mesh in ln and strategy in ln and column in ln), None)
        check(line is not None, "hostile: the row %s %s %s is named as skipped for its %s" % (model, mesh, strategy,
                                                                                          column))
    check(os.path.isfile(os.path.join(dirs["hostile"], "plan_vs_measured.png")), "hostile: the rest is plotted")

    _rc, out, _dt, _rss = report(dirs["header_only"], "sweep.csv with only its header")
    with open(os.path.join(dirs["header_only"], "report.html")) as fh:
        doc = fh.read()
    check("Scaling: skipped" in doc, "header only: the sweep's figures skipped with a note")
    check(os.path.isfile(os.path.join(dirs["header_only"], "conformance_ratios.png")),
          "header only: the other figures drawn")

    # An unexpected error: one line naming the file, a non-zero exit, no traceback.
    unreadable = os.path.join(work, "not_utf8")
    os.makedirs(unreadable)
    with open(os.path.join(unreadable, "sweep.csv"), "wb") as fh:
        fh.write(b"run_id,kind\n\xff\xfe,sweep\n")
    p = subprocess.run([PYTHON, REPORT, unreadable], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(p.returncode != 0 and "Traceback" not in p.stdout and "sweep.csv" in p.stdout
          and len(p.stdout.strip().splitlines()) == 1, "bad bytes: one line naming the file (%r)" % p.stdout)

    # A figure failing on a row no check foresaw: one line naming that row, exit 1, no traceback.
    inject = ("import sys; sys.path.insert(0, %r); sys.argv = ['report.py', %r]; import report, report_plots\n"
              "def bubble(run, out):\n"
              "    for r in run['sweep']:\n"
              "        if r.get('world') == '4': 1 / 0\n"
              "report_plots.bubble = bubble\n"
              "sys.exit(report.main())\n") % (SCRIPTS, dirs["fixture"])
    p = subprocess.run([PYTHON, "-c", inject], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [ln for ln in p.stdout.splitlines() if not ln.startswith(("wrote", "note"))]
    check(p.returncode == 1 and "Traceback" not in p.stdout and len(lines) == 1
          and lines[0].startswith("report: error: sweep.csv:") and "ZeroDivisionError" in lines[0],
          "a failing figure: one line naming the row (%r)" % lines)

    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""parabench report DIR: plots and one self-contained HTML report from a run.
parabench report A B ... --out OUT: runs from several machines side by side
(report_compare.py), each labelled by the host its rows recorded.

Reads every CSV in DIR: results rows (a `kind` column: train_step,
conformance, collective, sweep, plan; results/SCHEMA.md) and pipeline
timelines (columns rank,action,microbatch,chunk,start,end). Writes the PNGs and
report.html (PNGs embedded as base64, so the file stands alone) into --out
(default DIR). A plot whose data is absent is skipped with a note in the
report. Run with /usr/bin/python3; the backend is Agg (headless) always.
"""
import argparse
import base64
import csv
import datetime
import html
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_checks  # noqa: E402
import report_compare  # noqa: E402
import report_plots  # noqa: E402

KINDS = ("train_step", "conformance", "collective", "sweep", "plan")
SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results", "schema.json")


def auxiliary_headers():
    """{auxiliary file kind: header} from results/schema.json (timeline, comm_counters)."""
    with open(SCHEMA) as fh:
        aux = json.load(fh)["auxiliary"]
    return {k: [c["name"] for c in v["columns"]] for k, v in aux.items()}


AUX = auxiliary_headers()
TIMELINE = AUX["timeline"]


# The plan rows of `parabench plan --machine F --against DIR --csv DIR/PROFILE_PLAN` (parabench run
# writes it): a machine profile's plans of the measured points, kept apart from the sweep's own.
PROFILE_PLAN = "profile_plan.csv"


def load(run_dir):
    """{kind: [row]}, plus 'timelines': [(name, rows)], 'auxiliary': [file] (other
    auxiliary files of results/schema.json, e.g. comm_counters), 'ignored': [file] and
    'profile_plan': the plan rows of PROFILE_PLAN (not among 'plan'). Rows are
    report_plots.Row (a tuple read like a dict, knowing its file and line); rows
    whose figures cannot be drawn are moved to 'skipped' (sanitize)."""
    run = {k: [] for k in KINDS}
    run["timelines"], run["auxiliary"], run["ignored"], run["profile_plan"] = [], [], [], []
    files = sorted(f for f in os.listdir(run_dir) if f.endswith(".csv"))
    for f in files:
        header, rows = report_plots.read_rows(os.path.join(run_dir, f), f)
        if header[:len(TIMELINE)] == TIMELINE:
            run["timelines"].append((os.path.splitext(f)[0], rows))
        elif "kind" in header and f == PROFILE_PLAN:
            run["profile_plan"] += [r for r in rows if r.get("kind") == "plan"]
        elif "kind" in header:
            for r in rows:
                if r.get("kind") in KINDS:
                    run[r["kind"]].append(r)
        elif header in AUX.values():
            run["auxiliary"].append(f)
        else:
            run["ignored"].append(f)
    return report_plots.sanitize(run)


def skipped_section(run, limit=200):
    """The rows left out of the figures, each with its file, line and reason ('' when none)."""
    skipped = run["skipped"]
    if not skipped:
        return ""
    rows = [(r.origin(), r.get("kind", ""), report_plots.point_label(r), why) for r, why in skipped[:limit]]
    more = ("<p>%d more not listed.</p>" % (len(skipped) - limit)) if len(skipped) > limit else ""
    return ("<h2>Skipped rows</h2><p>%d row(s) of the run have figures no plot can draw (a valid CSV may hold NaN, "
            "negative or zero figures); they are left out of the figures, the rest is drawn.</p>%s%s"
            % (len(skipped), table(["file:line", "kind", "point", "reason"], rows), more))


def unreliable_section(run, limit=200):
    """The sweep rows marked unreliable (their steps spread past the bound): listed, left out of the planner's
    error ('' when none)."""
    rows = report_checks.unreliable_rows(run)
    if not rows:
        return ""
    more = ("<p>%d more not listed.</p>" % (len(rows) - limit)) if len(rows) > limit else ""
    return ("<h2>Unreliable rows</h2><p class='fail'>%d sweep row(s) have a step-time coefficient of variation "
            "above the bound (results/SCHEMA.md <code>unreliable</code>): their steps spread as on a busy "
            "machine. They are drawn (a red x in the throughput figures) but left out of the planner's error; "
            "measure them again on a quieter machine.</p>%s%s"
            % (len(rows), table(["file:line", "point", "world", "step time cv", "steps"], rows[:limit]), more))


def fmt(v, pct=False):
    if v is None:
        return "-"
    if isinstance(v, str):
        return html.escape(v)
    if pct:
        return "%+.1f%%" % v
    if isinstance(v, float):
        return "{:,.0f}".format(v) if abs(v) >= 1000 else "%.4g" % v
    return str(v)


def table(head, rows, pct_cols=()):
    h = "".join("<th>%s</th>" % html.escape(c) for c in head)
    body = []
    for r in rows:
        cells = []
        for i, v in enumerate(r):
            cls = ' class="fail"' if isinstance(v, str) and v.startswith("FAIL") else ""
            cells.append("<td%s>%s</td>" % (cls, fmt(v, i in pct_cols)))
        body.append("<tr>%s</tr>" % "".join(cells))
    return "<table><tr>%s</tr>%s</table>" % (h, "".join(body))


STYLE = """body{font-family:sans-serif;max-width:1250px;margin:auto;padding:1em;color:#222}
img{max-width:100%;border:1px solid #ddd;margin:.4em 0}table{border-collapse:collapse;margin:.6em 0;font-size:90%}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}
.fail{color:#b00;font-weight:bold}.note{color:#777}figcaption{color:#555;font-size:90%}"""


def build(run_dir, out):
    run = load(run_dir)
    os.makedirs(out, exist_ok=True)
    sections, notes, pngs = [], [], []
    plots = [("Scaling, measured and planned", report_plots.extrapolation), ("Scaling", report_plots.throughput), ("Memory", report_plots.memory),
             ("Communication", report_plots.comm_volume), ("Pipeline bubble", report_plots.bubble),
             ("Tensor parallel", report_plots.tensor_parallel),
             ("Context parallel", report_plots.context_parallel),
             ("Mixture of experts", report_plots.mixture_of_experts),
             ("Collectives", report_plots.collectives),
             ("Pipeline", report_checks.timelines), ("Planner vs measured", report_checks.plan_vs_measured),
             ("Conformance", report_checks.conformance), ("Training", report_checks.losses)]
    for title, fn in plots:
        try:
            figs = fn(run, out)
        except report_plots.Skip as e:
            notes.append("%s: skipped (%s)" % (title, e))
            continue
        notes += report_plots.take_notes(title)
        parts = []
        for path, caption_title, caption in figs:
            with open(path, "rb") as fh:
                data = base64.b64encode(fh.read()).decode("ascii")
            pngs.append(path)
            parts.append('<figure><img alt="%s" src="data:image/png;base64,%s"><figcaption>%s (%s)</figcaption>'
                         "</figure>" % (html.escape(caption_title), data, html.escape(caption),
                                        html.escape(os.path.basename(path))))
        if title == "Planner vs measured":
            shaky = len(report_checks.unreliable_rows(run))
            parts.append("<p>Median |error| of the plan against this run's sweep points, by group; the goal: "
                         "%g%% for throughput and %g%% for peak memory (oversubscribed: more ranks than cores; "
                         "a point counts for every axis of its mesh).%s</p>" % (
                             report_checks.GOAL_THROUGHPUT, report_checks.GOAL_MEMORY,
                             " %d row(s) marked unreliable are left out (see Unreliable rows)." % shaky
                             if shaky else ""))
            parts.append(table(["points", "count", "throughput median |error|", "worst (error, point)",
                                "memory median |error|", "goal"], report_checks.plan_summary(run)))
            parts.append(plan_table_html(run))
            profile = {"sweep": run["sweep"], "plan": run["profile_plan"]}
            if report_checks.plan_points(profile):
                reasons = sorted({r.get("reason", "") for r in run["profile_plan"]})
                parts.append("<h3>The calibrated machine profile vs measured</h3><p>The same points planned by "
                             "<code>plan --machine F --against</code> from a <code>parabench calibrate</code> profile "
                             "alone (%s), as a vendor plans a larger machine: one rank per core, so the "
                             "oversubscribed points are not among them.</p>" % html.escape("; ".join(reasons)))
                parts.append(table(["points", "count", "throughput median |error|", "worst (error, point)",
                                    "memory median |error|", "goal"], report_checks.plan_summary(profile)))
                parts.append(plan_table_html(profile))
        sections.append("<h2>%s</h2>%s" % (html.escape(title), "".join(parts)))
    if run["conformance"]:
        sections.append("<h2>Conformance ratios</h2>" + table(
            ["mesh and strategy", "precision", "quantity", "checks", "max ratio", "threshold C", "bitwise", "verdict"],
            report_checks.conformance_table(run)))
    sections.append(unreliable_section(run))
    sections.append(skipped_section(run))
    for f in run["ignored"]:
        notes.append("%s: not a results CSV (no kind column) nor an auxiliary file of results/schema.json; "
                     "ignored" % f)
    counts = ", ".join("%d %s" % (len(run[k]), k) for k in KINDS if run[k])
    intro = "Run directory <code>%s</code>: %s rows, %d timelines." % (
        html.escape(os.path.abspath(run_dir)), counts or "no", len(run["timelines"]))
    return write_html(out, "parabench report", intro, sections, notes), pngs, notes


def plan_table_html(run, limit=100):
    """The per-point plan table; past `limit` points, the `limit` with the largest |throughput error|."""
    rows = report_checks.plan_table(run)
    lead = ""
    if len(rows) > limit:
        lead = ("<p>%d points; the %d with the largest |throughput error| are listed.</p>" % (len(rows), limit))
        rows = sorted(sorted(rows, key=lambda r: -abs(r[5]) if r[5] is not None else 0)[:limit],
                      key=lambda r: (r[0], r[1]))
    return lead + table(["model", "strategy", "mesh", "tokens/s measured", "tokens/s planned", "error",
                         "mem measured (MiB)", "mem planned (MiB)", "error"], rows, pct_cols=(5, 8))


def write_html(out, title, intro, sections, notes):
    """out/report.html: the title, an intro paragraph (HTML), the sections and the notes; its path."""
    doc = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>%s</title><style>%s</style></head><body>"
           "<h1>%s</h1><p>%s Generated %s.</p>%s%s</body></html>") % (
        html.escape(title), STYLE, html.escape(title), intro,
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "".join(sections),
        ("<h2>Notes</h2><ul>%s</ul>" % "".join("<li class='note'>%s</li>" % html.escape(n) for n in notes))
        if notes else "")
    path = os.path.join(out, "report.html")
    with open(path + ".tmp", "w") as fh:
        fh.write(doc)
    os.replace(path + ".tmp", path)  # a killed report leaves no half-written page
    return path


def figure_html(path, caption_title, caption):
    with open(path, "rb") as fh:
        data = base64.b64encode(fh.read()).decode("ascii")
    return ('<figure><img alt="%s" src="data:image/png;base64,%s"><figcaption>%s (%s)</figcaption></figure>'
            % (html.escape(caption_title), data, html.escape(caption), html.escape(os.path.basename(path))))


def build_compare(dirs, out):
    runs = [(d, load(d)) for d in dirs]
    labels = report_compare.machine_labels(runs)
    os.makedirs(out, exist_ok=True)
    sections, notes, pngs = [], [], []
    sections.append("<h2>Machines</h2>" + table(["machine", "run directory", "rows", "best busbw (GB/s)",
                                                 "best tokens/s"], report_compare.summary(runs, labels)))
    for title, fn in report_compare.FIGURES:
        try:
            figs = fn(runs, labels, out)
        except report_plots.Skip as e:
            notes.append("%s: skipped (%s)" % (title, e))
            continue
        notes += report_plots.take_notes(title)
        pngs += [f[0] for f in figs]
        sections.append("<h2>%s</h2>%s" % (html.escape(title), "".join(figure_html(*f) for f in figs)))
    for (d, run) in runs:
        for f in run["ignored"]:
            notes.append("%s/%s: not a results CSV; ignored" % (d, f))
    for (d, run) in runs:
        if run["skipped"]:
            notes.append("%s: %d row(s) left out of the figures (first: %s, %s)" % (
                d, len(run["skipped"]), run["skipped"][0][0].origin(), run["skipped"][0][1]))
    intro = html.escape("; ".join("%s: %s" % (l, os.path.abspath(d)) for l, (d, _r) in zip(labels, runs))) + "."
    return write_html(out, "parabench report: %d runs side by side" % len(runs), intro, sections, notes), pngs, notes


def main():
    ap = argparse.ArgumentParser(description="parabench report: plots + HTML from a results directory, or "
                                             "several side by side")
    ap.add_argument("dirs", nargs="+", metavar="dir", help="run directory holding results CSVs")
    ap.add_argument("--out", help="output directory (default: DIR; required with several)")
    a = ap.parse_args()
    for d in a.dirs:
        if not os.path.isdir(d):
            print("report: error: %s is not a directory" % d, file=sys.stderr)
            return 2
    if len(a.dirs) > 1 and not a.out:
        print("report: error: --out is required with several run directories", file=sys.stderr)
        return 2
    try:
        if len(a.dirs) > 1:
            path, pngs, notes = build_compare(a.dirs, a.out)
        else:
            path, pngs, notes = build(a.dirs[0], a.out or a.dirs[0])
    except report_plots.RowError as e:
        # Input the C++ side did not pre-check (the script run by hand): a
        # message naming the file and line, not a traceback.
        print("report: error: %s" % e, file=sys.stderr)
        return 2
    except (OSError, csv.Error) as e:
        print("report: error: %s" % e, file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 -- never a traceback: one line naming the row being drawn
        where = report_plots.culprit(e.__traceback__)
        print("report: error: %s%s: %s" % (where + ": " if where else "", type(e).__name__,
                                          " ".join(str(e).split())), file=sys.stderr)
        return 1
    for p in pngs:
        print("wrote", p)
    for n in notes:
        print("note:", n)
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

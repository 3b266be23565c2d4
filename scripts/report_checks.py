"""The correctness-side figures and tables of `parabench report`: conformance
ratios, training loss curves, pipeline timelines (Gantt), and the planner's
estimates against measured sweep points. Same contract as report_plots.py.
"""
import math
import re
from collections import defaultdict

from report_plots import (ACTION_COLORS, MAX_LABELS, Skip, byte_unit, family, groups, legend_outside,  # noqa: F401
                          log_ticks, note, num, ok, plt, reliable, save, series, strategy_colors, unreliable)
from matplotlib.lines import Line2D
from matplotlib.patches import Patch


FAMILIES = ["data", "sharded data", "tensor", "context", "expert", "pipeline"]


def run_label(r):
    """A conformance row's run: its mesh and strategy text ("dp2.pp2 shard=zero1,schedule=1f1b")."""
    return ("%s %s" % (r.get("mesh", ""), r.get("strategy", ""))).strip()
EDGE = 1e-6


def conformance(run, out):
    """One screen for any number of configurations: a panel per quantity, a
    row per strategy family, each check a point at its ratio (log axis, a
    little vertical jitter), the family's median and 10-90% range as a bar,
    the threshold C as a red line; failures red and named, and the largest
    ratios of each panel named."""
    rows = [r for r in run["conformance"] if r.get("quantity") in ("loss", "grads", "params")]
    if not rows:
        raise Skip("no conformance rows")
    quantities = ["loss", "grads", "params"]
    fam_of = {}
    cells = defaultdict(list)  # (quantity, family) -> rows
    for r in rows:
        st = run_label(r)
        f = fam_of.get(st) or fam_of.setdefault(st, family(st))
        cells[(r.get("quantity"), f)].append(r)
    fams = [f for f in FAMILIES if f in fam_of.values()]
    ratios = [x for x in (num(r, "ratio") for r in rows if r.get("bitwise") != "1") if x]
    # The left edge: half the smallest ratio, not below EDGE (six decades under C = 8 read as exact).
    floor_x = max(EDGE, min([1e-2] + [x / 2 for x in ratios]))
    thresholds = sorted({num(r, "threshold") for r in rows if num(r, "threshold")})
    hi = 2.5 * max(ratios + thresholds + [1.0])
    fig, axes = plt.subplots(1, 3, figsize=(15, 1.0 + 0.75 * len(fams) + 1.2), sharey=True, squeeze=False)
    axes = axes[0]
    n_fail = 0
    for ax, q in zip(axes, quantities):
        outliers = []
        for y, f in enumerate(fams):
            pts = cells.get((q, f), [])
            xs, ys, cs = [], [], []
            vals = []
            bitwise = 0
            for i, r in enumerate(pts):
                ratio, bw = num(r, "ratio"), r.get("bitwise") == "1"
                failed = r.get("pass") == "0" or r.get("status") == "failed"
                bitwise += bw
                x = floor_x if bw or not ratio else ratio
                if not bw and ratio:
                    vals.append(ratio)
                xs.append(max(x, floor_x))
                ys.append(y + 0.32 * (((i * 0.6180339887) % 1.0) - 0.5))
                cs.append("#C44E52" if failed else "#8c8c8c" if bw else "#4C72B0")
                if failed or (ratio is not None and not bw):
                    outliers.append((not failed, -(ratio if ratio is not None else math.inf), failed, r, x, y))
            ax.scatter(xs, ys, s=9 if len(rows) > 2000 else 20, c=cs, alpha=0.55 if len(rows) > 2000 else 0.8,
                       linewidths=0, zorder=3)
            if vals:
                v = sorted(vals)
                lo, med, top = v[len(v) // 10], v[len(v) // 2], v[min(len(v) - 1, (9 * len(v)) // 10)]
                ax.plot([max(lo, floor_x), max(top, floor_x)], [y, y], color="black", lw=2.5, alpha=0.6, zorder=4,
                        solid_capstyle="butt")
                ax.plot([max(med, floor_x)], [y], marker="|", ms=16, mew=3, color="black", zorder=5)
            ax.text(hi, y + 0.42, "%d checks%s" % (len(pts), ", %d bitwise" % bitwise if bitwise else ""),
                    ha="right", va="bottom", fontsize=7, color="#555555")
            # Named in the cell: its two worst failures (and how many more), else its largest ratio.
            outliers.sort(key=lambda o: (o[0], o[1]))
            fails = [o for o in outliers if o[2]]
            n_fail += len(fails)
            shown = fails[:2] if fails else outliers[:1]
            for k, (_good, _neg, failed, r, x, _y) in enumerate(shown):
                more = " +%d more failed" % (len(fails) - 2) if failed and k == len(shown) - 1 and len(fails) > 2 \
                    else ""
                ax.annotate("%s (%s)%s%s" % (run_label(r), r.get("precision", ""),
                                             " step %s" % r["step"] if r.get("step") and q == "loss" else "", more),
                            (max(x, floor_x), y), xytext=(-6, 10 + 10 * k), textcoords="offset points",
                            ha="right", fontsize=6.5, color="#C44E52" if failed else "#333333",
                            arrowprops=dict(arrowstyle="-", lw=0.5, color="#999999"))
            outliers = []
        for t in thresholds:
            ax.axvline(t, color="#C44E52", ls="--", lw=1.2, zorder=2)
        ax.set_xscale("log")
        ax.set_xlim(floor_x / 1.5, hi)
        log_ticks(ax.xaxis, subs=(1,) if math.log10(hi * 1.5 / floor_x) > 3 else (1, 2, 5))
        ax.set_title("%s (%d checks)" % (q, sum(len(cells.get((q, f), [])) for f in fams)))
        ax.set_xlabel("error / noise floor (log)")
        ax.grid(axis="y", visible=False)
    axes[0].set_yticks(range(len(fams)))
    axes[0].set_yticklabels(fams)
    axes[0].set_ylim(len(fams) - 0.45, -0.6)
    axes[0].set_ylabel("strategy family")
    if n_fail:
        note("conformance figure: %d failed checks, at most two named per family and quantity; the table lists "
             "every configuration" % n_fail)
    handles = [Line2D([], [], marker="o", ls="", color="#4C72B0", label="a check (one config, step)"),
               Line2D([], [], marker="o", ls="", color="#8c8c8c", label="bitwise (exact), at the left edge"),
               Line2D([], [], marker="o", ls="", color="#4C72B0", alpha=0.55,
                      label="ratio 0 or below %.2g: at the left edge" % floor_x),
               Line2D([], [], marker="o", ls="", color="#C44E52", label="failed"),
               Line2D([], [], color="black", lw=2.5, marker="|", ms=10, label="median, 10-90% of the ratios"),
               Line2D([], [], color="#C44E52", ls="--", label="threshold C = %s" % ", ".join("%g" % t
                                                                                           for t in thresholds))]
    fig.legend(handles=handles, loc="lower center", ncol=6, fontsize=8, bbox_to_anchor=(0.5, 0.0))
    fig.suptitle("Conformance: distance to fp64 truth over the reference's floor, %d configurations by family"
                 % len({(run_label(r), r.get("precision")) for r in rows}))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return [(save(fig, out, "conformance_ratios.png"), "Conformance ratios",
             "Each point is one checked quantity (every loss step, step-1 grads, final params) of one "
             "configuration, in its strategy family's row; named: failures and each panel's largest ratios. "
             "The table below lists every configuration.")]


def conformance_table(run):
    """Rows (strategy, precision, quantity, checks, max ratio, threshold, bitwise, verdict)."""
    agg = defaultdict(lambda: {"n": 0, "max": 0.0, "thr": "", "bitwise": True, "fail": 0})
    for r in run["conformance"]:
        a = agg[(run_label(r), r.get("precision", ""), r.get("quantity", ""))]
        a["n"] += 1
        a["max"] = max(a["max"], num(r, "ratio") or 0.0)
        a["thr"] = r.get("threshold", "")
        a["bitwise"] &= r.get("bitwise") == "1"
        a["fail"] += r.get("pass") == "0" or r.get("status") in ("failed",)
    return [(k[0], k[1], k[2], a["n"], "-" if a["bitwise"] else a["max"], "bit-exact" if a["bitwise"] else a["thr"],
             "yes" if a["bitwise"] else "no",
             "FAIL (%d)" % a["fail"] if a["fail"] else "pass") for k, a in sorted(agg.items())]


def losses(run, out):
    rows = [r for r in ok(run["train_step"]) if num(r, "loss") is not None]
    if not rows:
        raise Skip("no train_step rows")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (h, mesh, backend), rs in groups(rows, ["config_hash", "mesh", "backend"]).items():
        pts = sorted((int(num(r, "step")), num(r, "loss")) for r in rs)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", label="%s %s %s" % (mesh, backend, h[:8]))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (mean cross-entropy, nats)")
    ax.set_title("Training loss per step")
    if len(ax.get_lines()) > 8:
        legend_outside(ax, title="mesh, backend, config", fontsize=7)
    else:
        ax.legend(loc="best", title="mesh, backend, config")
    fig.tight_layout()
    return [(save(fig, out, "train_loss.png"), "Training loss", "Loss of every step of each training run.")]


def timelines(run, out):
    if not run["timelines"]:
        raise Skip("no pipeline timeline CSV (columns rank,action,microbatch,chunk,start,end)")
    result = []
    for name, rows in run["timelines"]:
        if not rows:
            note("%s: no row to draw" % name)
            continue
        ranks = sorted({int(float(r["rank"])) for r in rows})
        end = max(float(r["end"]) for r in rows)
        fig, ax = plt.subplots(figsize=(11, 0.55 * len(ranks) + 1.6))
        busy = defaultdict(float)
        spans = defaultdict(list)
        labelled = len(rows) <= 2000  # microbatch numbers only while they can be read
        for r in rows:
            st, e, rank = float(r["start"]), float(r["end"]), int(float(r["rank"]))
            busy[rank] += e - st
            spans[(rank, r["action"])].append((st, e - st))
            if labelled and end > 0 and (e - st) / end > 0.012:
                label = r["microbatch"] + ("" if r.get("chunk", "0") in ("0", "") else ".c" + r["chunk"])
                ax.text((st + e) / 2, rank, label, ha="center", va="center", fontsize=7, color="white")
        for (rank, action), sp in spans.items():
            ax.broken_barh(sp, (rank - 0.4, 0.8), facecolors=ACTION_COLORS.get(action, "#999999"),
                           edgecolor="white", linewidth=0.6)
        idle = sum(end - busy[r] for r in ranks) / (len(ranks) * end) if end > 0 else 0.0
        ax.set_yticks(ranks)
        ax.set_yticklabels(["rank %d" % r for r in ranks])
        ax.invert_yaxis()
        ax.set_xlim(0, end if end > 0 else 1)
        ax.set_xlabel("time (simulator units: one forward of one microbatch through a stage = 1)")
        ax.grid(axis="y", visible=False)
        ax.set_title("%s: makespan %.4g, idle (bubble) fraction %.1f%%" % (name, end, 100 * idle))
        present = [a for a in ACTION_COLORS if any(k[1] == a for k in spans)]
        ax.legend(handles=[Patch(color=ACTION_COLORS[a], label=a) for a in present], loc="upper left",
                  bbox_to_anchor=(1.0, 1.0), title="action")
        fig.tight_layout()
        result.append((save(fig, out, "pipeline_%s.png" % name), "Pipeline timeline: " + name,
                       "Compute actions per rank from the schedule simulator; numbers are microbatches."))
    return result


def plan_points(run):
    """(sweep row, plan row) pairs for the same point: strategy, model, precision, mesh, batch, seq (kept in
    the run: several tables and figures ask). Sweep rows marked unreliable are left out: a busy machine's
    step times say nothing of the planner's error."""
    if "_plan_points" in run:
        return run["_plan_points"]
    key = ("strategy", "model", "precision", "mesh", "global_batch", "seq_len")
    plans = {tuple(r.get(k, "") for k in key): r for r in ok(run["plan"])}
    pairs = []
    if plans:
        for r in reliable(run["sweep"]):
            p = plans.get(tuple(r.get(k, "") for k in key))
            if p is not None:
                pairs.append((r, p))
    run["_plan_points"] = pairs
    return pairs


def err(est, meas):
    return None if est is None or not meas else 100.0 * (est - meas) / meas


MODEL_MARKERS = ["o", "s", "^", "D", "v", "P"]


def pct(x):
    """A percentage with two significant digits below 10 (0.21, 3.4) and none above (86)."""
    return "%.0f" % x if abs(x) >= 10 else "%.2g" % x


def upper_median(v):
    """The middle value of v, the upper one of the two middles for an even count (what the figures state)."""
    return sorted(v)[len(v) // 2] if v else None


AXES = ("dp", "tp", "cp", "ep", "pp")
GOAL_THROUGHPUT, GOAL_MEMORY = 15.0, 1.0  # median |error| goals of the planner against a machine's sweep (%)


def mesh_axes(mesh):
    """The parallel axes of a mesh text (dp2.ep2.pp2 -> ['ep', 'pp']) with size > 1 other than dp, or ['dp']."""
    sizes = {m.group(1): int(m.group(2)) for m in re.finditer(r"(dp|tp|cp|ep|pp)(\d+)", mesh)}
    axes = [a for a in AXES[1:] if sizes.get(a, 1) > 1]
    return axes or ["dp"]


def unreliable_rows(run):
    """The ok sweep rows marked unreliable: (file:line, point, world, step time cv, step time min..max)."""
    out = []
    for r in ok(run["sweep"]):
        if unreliable(r):
            lo, hi = num(r, "step_time_min_s"), num(r, "step_time_max_s")
            out.append((r.origin(), "%s %s %s" % (r.get("model", ""), r.get("mesh", ""), r.get("strategy", "")),
                        r.get("world", ""), r.get("step_time_cv", ""),
                        "-" if lo is None or hi is None else "%.3g .. %.3g s" % (lo, hi)))
    return out


def plan_summary(run):
    """Median |error| of the plan against the sweep, over every point, the points that fit the cores, the
    oversubscribed ones, and per parallel axis (a point counts for each axis of its mesh; dp: meshes with no
    other): rows of (group, points, throughput median |error|, worst point, memory median |error|, goal)."""
    groups_ = defaultdict(list)
    for s, p in plan_points(run):
        t = err(num(p, "est_tokens_per_s"), num(s, "tokens_per_s"))
        if t is None:
            continue
        m = err(num(p, "mem_total"), num(s, "mem_total"))
        label = "%s %s %s" % (s.get("model", ""), s.get("mesh", ""), s["strategy"])
        point = (abs(t), t, None if m is None else abs(m), label)
        keys = ["all points", "oversubscribed" if s.get("oversubscribed") == "1" else "fit the cores"]
        keys += ["axis " + a for a in mesh_axes(s.get("mesh", ""))]
        for k in keys:
            groups_[k].append(point)
    if not groups_:
        raise Skip("no sweep point with a matching plan row")
    order = ["all points", "fit the cores", "oversubscribed"] + ["axis " + a for a in AXES]
    out = []
    for k in order:
        pts = groups_.get(k)
        if not pts:
            continue
        t_med = upper_median([x[0] for x in pts])
        m_med = upper_median([x[2] for x in pts if x[2] is not None])
        worst = max(pts, key=lambda x: x[0])
        held = t_med <= GOAL_THROUGHPUT and (m_med is None or m_med <= GOAL_MEMORY)
        out.append((k, len(pts), "%.1f%%" % t_med, "%+.0f%% (%s)" % (worst[1], worst[3]),
                    "-" if m_med is None else "%.2f%%" % m_med, "within" if held else "FAIL: over"))
    return out


def plan_vs_measured(run, out):
    pairs = [(s, p) for s, p in plan_points(run) if num(s, "tokens_per_s") and num(p, "est_tokens_per_s")]
    if not pairs:
        raise Skip("no sweep point with a matching plan row (same strategy, model, precision, mesh, batch)")
    # One point per plan row: the median of the sweep rows measured at it.
    by_plan = {}
    for s, p in pairs:
        e = by_plan.setdefault(id(p), (s, p, [], []))
        e[2].append(num(s, "tokens_per_s"))
        if num(s, "mem_total"):
            e[3].append(num(s, "mem_total"))
    points = [(s, p, upper_median(t), upper_median(m)) for s, p, t, m in by_plan.values()]
    strategies = {s["strategy"] for s, _p, _t, _m in points}
    # Past a dozen strategies, colour by family (a legend of a hundred strategies reads as none).
    colour_of = (lambda s: s["strategy"]) if len(strategies) <= 12 else (lambda s: family(series(s)))
    colors = strategy_colors({colour_of(s) for s, _p, _t, _m in points})
    models = sorted({s["model"] for s, _p, _t, _m in points})
    marker = {m: MODEL_MARKERS[i % len(MODEL_MARKERS)] for i, m in enumerate(models)}
    div, unit = byte_unit(max(m or 0 for _s, _p, _t, m in points))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 5))
    t_err, m_err = [], []
    annotate = len(points) <= MAX_LABELS
    for (c, mk), grp in groups_of(points, lambda q: (colour_of(q[0]), q[0]["model"])).items():
        xt = [t for _s, _p, t, _m in grp]
        yt = [num(p, "est_tokens_per_s") for _s, p, _t, _m in grp]
        a1.scatter(xt, yt, color=colors[c], marker=marker[mk], s=30 if annotate else 12, zorder=3,
                   alpha=1 if annotate else 0.6)
        t_err += [abs(err(y, x)) for x, y in zip(xt, yt)]
        mem = [(m / div, num(p, "mem_total") / div) for _s, p, _t, m in grp if m and num(p, "mem_total")]
        a2.scatter([q[0] for q in mem], [q[1] for q in mem], color=colors[c], marker=marker[mk],
                   s=30 if annotate else 12, zorder=3, alpha=1 if annotate else 0.6)
        m_err += [abs(err(y, x)) for x, y in mem]
        if annotate:
            for (s, p, t, m) in grp:
                label = " w%s" % s.get("world", "?")
                a1.annotate(label, (t, num(p, "est_tokens_per_s")), fontsize=7, color="#555555")
                if m and num(p, "mem_total"):
                    a2.annotate(label, (m / div, num(p, "mem_total") / div), fontsize=7, color="#555555")
    for ax, unit_name in ((a1, "tokens/s"), (a2, unit)):
        ax.set_xscale("log")
        ax.set_yscale("log")
        lo, hi = ax.get_xlim()
        lo2, hi2 = ax.get_ylim()
        lim = (min(lo, lo2), max(hi, hi2))
        ax.plot(lim, lim, color="gray", ls="--", lw=1, label="estimate = measured")
        ax.set_xlim(lim)
        ax.set_ylim(lim)
        subs = (1,) if lim[1] > 1000 * lim[0] else (1, 2, 5)  # past three decades 1-2-5 ticks overlap
        log_ticks(ax.xaxis, subs=subs)
        log_ticks(ax.yaxis, subs=subs)
        ax.set_xlabel("measured (%s)" % unit_name)
        ax.set_ylabel("planner estimate (%s)" % unit_name)
    med = (lambda v: upper_median(v) if v else float("nan"))
    a1.set_title("Throughput: planner vs measured (median |error| %s%%)" % pct(med(t_err)))
    a2.set_title("Peak device memory per rank: planner vs measured (median |error| %s%%)" % pct(med(m_err)))
    handles = [Line2D([], [], marker="o", ls="", color=colors[s], label=s) for s in sorted(colors)]
    handles += [Line2D([], [], marker=marker[m], ls="", color="#555555", label="model " + m) for m in models]
    if len(strategies) > 12:
        handles.insert(0, Line2D([], [], ls="", label="%d strategies, coloured by family:" % len(strategies)))
    handles.append(Line2D([], [], color="gray", ls="--", label="estimate = measured"))
    # Below both panels: inside either, a legend this long covers points.
    rows = math.ceil(len(handles) / 4)
    fig.set_size_inches(12, 5 + 0.25 * rows)
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, title="strategy / model")
    fig.tight_layout(rect=(0, (0.2 + 0.2 * rows) / (5 + 0.25 * rows), 1, 1))
    return [(save(fig, out, "plan_vs_measured.png"), "Planner estimate vs measured",
             "Each point is one sweep point (wN: world size; the median of its rows when measured more than once) "
             "with its plan row; the table below gives the error per point (error = (estimate - measured) / "
             "measured).")]


def groups_of(items, key):
    g = defaultdict(list)
    for q in items:
        g[key(q)].append(q)
    return dict(sorted(g.items()))


def plan_table(run):
    out = []
    order = (lambda sp: (sp[0].get("model", ""), sp[0]["strategy"], int(num(sp[0], "world") or 0)))
    for s, p in sorted(plan_points(run), key=order):
        tm, te = num(s, "tokens_per_s"), num(p, "est_tokens_per_s")
        mm, me = num(s, "mem_total"), num(p, "mem_total")
        mib = (lambda b: None if b is None else b / 2.0 ** 20)
        out.append((s.get("model", ""), s["strategy"], s.get("mesh", ""), tm, te, err(te, tm), mib(mm), mib(me),
                    err(me, mm)))
    return out

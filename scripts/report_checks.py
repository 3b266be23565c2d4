"""The correctness-side figures and tables of `parabench report`: conformance
ratios, training loss curves, pipeline timelines (Gantt), and the planner's
estimates against measured sweep points. Same contract as report_plots.py.
"""
import math
import os
import re
from collections import defaultdict

from report_plots import (ACTION_COLORS, Skip, byte_unit, groups, log_ticks, num, ok, plt,  # noqa: F401
                          save, strategy_colors)
from matplotlib.lines import Line2D
from matplotlib.patches import Patch


def run_label(r):
    """A conformance row's run: its mesh and strategy text ("dp2.pp2 shard=zero1,schedule=1f1b")."""
    return ("%s %s" % (r.get("mesh", ""), r.get("strategy", ""))).strip()


def conformance(run, out):
    rows = [r for r in run["conformance"] if r.get("quantity") in ("loss", "grads", "params")]
    if not rows:
        raise Skip("no conformance rows")
    keys = sorted({(run_label(r), r["precision"]) for r in rows})
    quantities = ["loss", "grads", "params"]
    markers = dict(zip(quantities, ["o", "s", "D"]))
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(keys) + 1.8))
    ratios = [num(r, "ratio") for r in rows if num(r, "ratio")]
    floor_x = min([1e-2] + [x / 2 for x in ratios])
    thresholds = set()
    for y, (s, p) in enumerate(keys):
        for q in quantities:
            pts = [r for r in rows if (run_label(r), r["precision"], r["quantity"]) == (s, p, q)]
            for r in pts:
                ratio, bitwise = num(r, "ratio"), r.get("bitwise") == "1"
                failed = r.get("pass") == "0" or r.get("status") == "failed"
                if num(r, "threshold"):
                    thresholds.add(num(r, "threshold"))
                x = floor_x if bitwise or not ratio else ratio
                ax.scatter(max(x, floor_x), y + (quantities.index(q) - 1) * 0.22, marker=markers[q], s=28,
                           color="#C44E52" if failed else "#8c8c8c" if bitwise else "#4C72B0", zorder=3)
    for t in sorted(thresholds):
        ax.axvline(t, color="#C44E52", ls="--", lw=1)
        ax.text(t, -0.55, "threshold C = %g " % t, color="#C44E52", va="top", ha="right", fontsize=9)
    ax.set_xscale("log")
    lo, hi = floor_x / 1.5, 2.5 * max(ratios + list(thresholds) + [1.0])
    ax.set_xlim(lo, hi)
    # Past three decades, ticks at 1, 2, 5 x 10^k overlap: keep the powers of ten.
    log_ticks(ax.xaxis, subs=(1,) if math.log10(hi / lo) > 3 else (1, 2, 5))
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(["%s (%s)" % k for k in keys])
    ax.set_ylim(-0.7, len(keys) - 0.1)
    ax.invert_yaxis()
    ax.set_xlabel("error / noise floor (ratio, log scale; bitwise checks drawn at the left edge)")
    ax.set_title("Conformance: distance to fp64 truth over the reference's floor")
    handles = [Line2D([], [], marker=markers[q], ls="", color="#4C72B0", label=q) for q in quantities]
    handles += [Patch(color="#8c8c8c", label="bitwise (exact)"), Patch(color="#C44E52", label="failed")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="quantity")
    fig.tight_layout()
    return [(save(fig, out, "conformance_ratios.png"), "Conformance ratios",
             "Each point is one checked quantity (every loss step, step-1 grads, final params).")]


def conformance_table(run):
    """Rows (mesh and strategy, precision, quantity, checks, max ratio, threshold, bitwise, verdict)."""
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
    ax.legend(loc="best", title="mesh, backend, config")
    fig.tight_layout()
    return [(save(fig, out, "train_loss.png"), "Training loss", "Loss of every step of each training run.")]


def timelines(run, out):
    if not run["timelines"]:
        raise Skip("no pipeline timeline CSV (columns rank,action,microbatch,chunk,start,end)")
    result = []
    for name, rows in run["timelines"]:
        ranks = sorted({int(r["rank"]) for r in rows})
        end = max(float(r["end"]) for r in rows)
        fig, ax = plt.subplots(figsize=(11, 0.55 * len(ranks) + 1.6))
        busy = defaultdict(float)
        for r in rows:
            s, e, rank = float(r["start"]), float(r["end"]), int(r["rank"])
            busy[rank] += e - s
            ax.barh(rank, e - s, left=s, height=0.8, color=ACTION_COLORS.get(r["action"], "#999999"),
                    edgecolor="white", linewidth=0.6)
            if (e - s) / end > 0.012:
                label = r["microbatch"] + ("" if r.get("chunk", "0") in ("0", "") else ".c" + r["chunk"])
                ax.text((s + e) / 2, rank, label, ha="center", va="center", fontsize=7, color="white")
        idle = sum(end - busy[r] for r in ranks) / (len(ranks) * end)
        ax.set_yticks(ranks)
        ax.set_yticklabels(["rank %d" % r for r in ranks])
        ax.invert_yaxis()
        ax.set_xlim(0, end)
        ax.set_xlabel("time (simulator units: one forward of one microbatch through a stage = 1)")
        ax.grid(axis="y", visible=False)
        ax.set_title("%s: makespan %.4g, idle (bubble) fraction %.1f%%" % (name, end, 100 * idle))
        present = [a for a in ACTION_COLORS if any(r["action"] == a for r in rows)]
        ax.legend(handles=[Patch(color=ACTION_COLORS[a], label=a) for a in present], loc="upper left",
                  bbox_to_anchor=(1.0, 1.0), title="action")
        fig.tight_layout()
        result.append((save(fig, out, "pipeline_%s.png" % name), "Pipeline timeline: " + name,
                       "Compute actions per rank from the schedule simulator; numbers are microbatches."))
    return result


def plan_points(run):
    """(sweep row, plan row) pairs for the same point: strategy, model, precision, mesh, batch, seq."""
    key = ("strategy", "model", "precision", "mesh", "global_batch", "seq_len")
    plans = {tuple(r.get(k, "") for k in key): r for r in ok(run["plan"])}
    pairs = []
    for r in ok(run["sweep"]):
        p = plans.get(tuple(r.get(k, "") for k in key))
        if p is not None:
            pairs.append((r, p))
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
    colors = strategy_colors({s["strategy"] for s, _p in pairs})
    models = sorted({s["model"] for s, _p in pairs})
    marker = {m: MODEL_MARKERS[i % len(MODEL_MARKERS)] for i, m in enumerate(models)}
    div, unit = byte_unit(max(num(s, "mem_total") or 0 for s, _p in pairs))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 5))
    t_err, m_err = [], []
    for s, p in pairs:
        c, mk, label = colors[s["strategy"]], marker[s["model"]], " w%s" % s.get("world", "?")
        xt, yt = num(s, "tokens_per_s"), num(p, "est_tokens_per_s")
        a1.scatter(xt, yt, color=c, marker=mk, s=30, zorder=3)
        a1.annotate(label, (xt, yt), fontsize=7, color="#555555")
        t_err.append(abs(err(yt, xt)))
        if num(s, "mem_total") and num(p, "mem_total"):
            xm, ym = num(s, "mem_total") / div, num(p, "mem_total") / div
            a2.scatter(xm, ym, color=c, marker=mk, s=30, zorder=3)
            a2.annotate(label, (xm, ym), fontsize=7, color="#555555")
            m_err.append(abs(err(ym, xm)))
    for ax, unit_name in ((a1, "tokens/s"), (a2, unit)):
        ax.set_xscale("log")
        ax.set_yscale("log")
        lo, hi = ax.get_xlim()
        lo2, hi2 = ax.get_ylim()
        lim = (min(lo, lo2), max(hi, hi2))
        ax.plot(lim, lim, color="gray", ls="--", lw=1, label="estimate = measured")
        ax.set_xlim(lim)
        ax.set_ylim(lim)
        log_ticks(ax.xaxis)
        log_ticks(ax.yaxis)
        ax.set_xlabel("measured (%s)" % unit_name)
        ax.set_ylabel("planner estimate (%s)" % unit_name)
    med = (lambda v: upper_median(v) if v else float("nan"))
    a1.set_title("Throughput: planner vs measured (median |error| %s%%)" % pct(med(t_err)))
    a2.set_title("Peak device memory per rank: planner vs measured (median |error| %s%%)" % pct(med(m_err)))
    handles = [Line2D([], [], marker="o", ls="", color=colors[s], label=s) for s in sorted(colors)]
    handles += [Line2D([], [], marker=marker[m], ls="", color="#555555", label="model " + m) for m in models]
    handles.append(Line2D([], [], color="gray", ls="--", label="estimate = measured"))
    # Below both panels: inside either, a legend this long covers points.
    rows = math.ceil(len(handles) / 4)
    fig.set_size_inches(12, 5 + 0.25 * rows)
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, title="strategy / model")
    fig.tight_layout(rect=(0, (0.2 + 0.2 * rows) / (5 + 0.25 * rows), 1, 1))
    return [(save(fig, out, "plan_vs_measured.png"), "Planner estimate vs measured",
             "Each point is one sweep point (wN: world size) with its plan row; the table below gives the error "
             "per point (error = (estimate - measured) / measured).")]


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

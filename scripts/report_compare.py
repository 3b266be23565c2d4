"""`parabench report A B ...`: runs from different machines side by side
(called by report.py with several run directories). Each run is labelled by
the machine its rows recorded (the `host` column; the directory name is added
when two runs share a host). Figures: collective bus bandwidth per op,
strategy throughput and scaling (median with the min-max spread of the
measured steps), and the planner's estimate beside the measurement per
machine. A figure whose data no run has is skipped with a note.
"""
import math
import os

from matplotlib.lines import Line2D

import report_plots as rp
from report_plots import Skip, num, ok, plt

LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def machine_labels(runs):
    """[label] per (dir, run): its host(s) as recorded, and the GPUs its sweep
    rows name (the `device` column, when not the CPU); dir name added on a clash."""
    labels = []
    for d, run in runs:
        hosts = sorted({r.get("host", "") for k in ("collective", "sweep", "plan", "conformance", "train_step")
                        for r in run[k] if r.get("host")})
        label = ", ".join(hosts) if hosts else "(no host recorded)"
        devices = sorted({r.get("device", "") for r in ok(run["sweep"]) if r.get("device") not in (None, "", "cpu")})
        if devices:
            label += " (%s)" % ", ".join(devices)
        labels.append(label)
    hosts = list(labels)
    for i, (d, _run) in enumerate(runs):
        if hosts.count(hosts[i]) > 1 or hosts[i] == "(no host recorded)":
            labels[i] = "%s [%s]" % (hosts[i], os.path.basename(os.path.normpath(d)))
    # Still equal (same host, same directory name under different parents): number them.
    for i in range(len(labels)):
        if labels.count(labels[i]) > 1:
            labels[i] = "%s #%d" % (labels[i], i + 1)
    return labels


def collectives(runs, labels, out):
    ops = sorted({r["op"] for _d, run in runs for r in ok(run["collective"]) if num(r, "busbw_gbps") is not None})
    if not ops:
        raise Skip("no run has collective rows")
    fig, axes = plt.subplots(1, len(ops), figsize=(5.5 * len(ops), 4.5), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for i, (_d, run) in enumerate(runs):
            rows = [r for r in ok(run["collective"]) if r["op"] == op and num(r, "busbw_gbps") is not None]
            worlds = sorted({r["world"] for r in rows}, key=lambda w: int(w or 0))
            for wi, w in enumerate(worlds):
                pts = sorted(rp.mean_by([r for r in rows if r["world"] == w], lambda r: int(num(r, "bytes")),
                                        "busbw_gbps").items())
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=LINESTYLES[wi % 4], marker=MARKERS[i % 6],
                        ms=4, color=plt.get_cmap("tab10")(i % 10), label="%s, %s ranks" % (labels[i], w))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(rp.LogLocator(base=2, numticks=40))
        ax.xaxis.set_major_formatter(rp.FuncFormatter(
            lambda x, _p: rp.human_bytes(x) if x > 0 and int(round(math.log2(x))) % 4 == 0 else ""))
        rp.log_ticks(ax.yaxis)
        ax.set_xlabel("message size S (bytes, nccl-tests convention)")
        ax.set_ylabel("bus bandwidth (GB/s, 1 GB = 1e9 B)")
        ax.set_title(op)
        ax.legend(loc="best", fontsize=7)
    fig.suptitle("Collective bus bandwidth by machine")
    fig.tight_layout()
    return [(rp.save(fig, out, "compare_collectives.png"), "Collectives by machine",
             "busbw per op and message size; color: machine, line style: ranks.")]


def _scaling_series(run):
    """{(model, precision, series): [(world, median tok/s, lo, hi)]} of a run's ok sweep rows."""
    acc = {}
    for r in ok(run["sweep"]):
        tps, w = num(r, "tokens_per_s"), num(r, "world")
        if tps is None or w is None:
            continue
        st, lo_t, hi_t = num(r, "step_time_s"), num(r, "step_time_min_s"), num(r, "step_time_max_s")
        # tokens/s spread from the step-time spread (tokens per step fixed).
        lo = tps * st / hi_t if st and hi_t else tps
        hi = tps * st / lo_t if st and lo_t else tps
        acc.setdefault((r.get("model", ""), r.get("precision", ""), rp.series(r)), []).append((w, tps, lo, hi))
    return {k: sorted(v) for k, v in acc.items()}


def throughput(runs, labels, out):
    per_run = [_scaling_series(run) for _d, run in runs]
    keys = sorted({k for s in per_run for k in s})
    if not keys:
        raise Skip("no run has sweep rows")
    # Panels with scaling to draw: some series of the model at two world sizes or more.
    models = sorted({(k[0], k[1]) for s in per_run for k, pts in s.items() if len(pts) > 1})
    if not models:
        raise Skip("no sweep series spans two world sizes")
    colors = rp.strategy_colors({k[2] for k in keys if (k[0], k[1]) in models})
    fig, axes, ncol = rp.panel_grid(len(models), height=5)
    for ax, (model, prec) in zip(axes, models):
        worlds = set()
        for i, s in enumerate(per_run):
            for (m, p, ser), pts in s.items():
                if (m, p) != (model, prec) or len(pts) < 2:
                    continue
                xs = [q[0] for q in pts]
                worlds.update(xs)
                ys = [q[1] for q in pts]
                err = [[q[1] - q[2] for q in pts], [q[3] - q[1] for q in pts]]
                ax.errorbar(xs, ys, yerr=err, ls=LINESTYLES[i % 4], marker=MARKERS[i % 6], ms=4, capsize=2,
                            color=colors[ser])
        rp.ranks_axis(ax, worlds)
        ax.set_yscale("log")
        rp.log_ticks(ax.yaxis)
        ax.set_ylabel("tokens/s (median step; bars: fastest to slowest step)")
        ax.set_title("%s, %s" % (model, prec))
    handles = [Line2D([], [], color=colors[s], label=s) for s in sorted(colors)]
    handles += [Line2D([], [], color="#555555", ls=LINESTYLES[i % 4], marker=MARKERS[i % 6], label=labels[i])
                for i in range(len(runs))]
    axes[ncol - 1].legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7,
                       title="series / machine")
    fig.suptitle("Strategy throughput and scaling by machine")
    fig.tight_layout()
    return [(rp.save(fig, out, "compare_throughput.png"), "Throughput and scaling by machine",
             "Each line is one strategy series on one machine (line style and marker: machine).")]


def planner(runs, labels, out):
    have = [(i, run) for i, (_d, run) in enumerate(runs) if ok(run["plan"]) and ok(run["sweep"])]
    if not have:
        raise Skip("no run has both sweep and plan rows")
    key = ("strategy", "model", "precision", "mesh", "global_batch", "seq_len")
    fig, ax = plt.subplots(figsize=(7, 6))
    lo, hi = math.inf, 0.0
    for i, run in have:
        plans = {tuple(p.get(k, "") for k in key): p for p in ok(run["plan"])}
        xs, ys = [], []
        for s in rp.reliable(run["sweep"]):  # a row marked unreliable says nothing of the planner's error
            p = plans.get(tuple(s.get(k, "") for k in key))
            if p and num(s, "tokens_per_s") and num(p, "est_tokens_per_s"):
                xs.append(num(s, "tokens_per_s"))
                ys.append(num(p, "est_tokens_per_s"))
        if not xs:
            continue
        errs = sorted(abs(y - x) / x for x, y in zip(xs, ys))
        ax.scatter(xs, ys, marker=MARKERS[i % 6], color=plt.get_cmap("tab10")(i % 10), s=22,
                   label="%s (median |error| %.0f%%, %d points)" % (labels[i], 100 * errs[len(errs) // 2], len(xs)))
        lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
    if hi == 0:
        raise Skip("no sweep point has a matching plan row")
    ax.plot([lo, hi], [lo, hi], color="gray", ls="--", lw=1, label="estimate = measured")
    ax.set_xscale("log")
    ax.set_yscale("log")
    rp.log_ticks(ax.xaxis)
    rp.log_ticks(ax.yaxis)
    ax.set_xlabel("measured tokens/s")
    ax.set_ylabel("planner estimate, tokens/s (each machine's own hardware figures)")
    ax.set_title("Planner vs measured, by machine")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return [(rp.save(fig, out, "compare_planner.png"), "Planner vs measured by machine",
             "Every sweep point with its plan row; the planner uses the hardware figures its machine measured.")]


def summary(runs, labels):
    """Table rows: machine, directory, rows per kind, best busbw per op, best tokens/s."""
    rows = []
    for (d, run), label in zip(runs, labels):
        busbw = {}
        for r in ok(run["collective"]):
            b = num(r, "busbw_gbps")
            if b is not None:
                busbw[r["op"]] = max(busbw.get(r["op"], 0), b)
        tps = [num(r, "tokens_per_s") for r in ok(run["sweep"]) if num(r, "tokens_per_s")]
        rows.append([label, d, ", ".join("%d %s" % (len(run[k]), k) for k in ("collective", "sweep", "plan")
                                         if run[k]) or "none",
                     ", ".join("%s %.3g" % (op, b) for op, b in sorted(busbw.items())) or "",
                     "%.4g" % max(tps) if tps else ""])
    return rows


FIGURES = [("Collectives", collectives), ("Throughput and scaling", throughput), ("Planner", planner)]

"""The figures of `parabench report` (called by report.py). Each plot function
takes the loaded run and an output directory, writes PNGs and returns a list
of (png_path, title, caption); it raises Skip(note) when the run lacks its
data. Units are in every axis label; sizes spanning decades use log axes.
"""
import csv
import math
import os
import re
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # headless, always
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

TAGS = ["params", "grads", "optimizer", "activations", "comm", "workspace"]
TAG_COLORS = dict(zip(TAGS, ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]))
ACTION_COLORS = {"F": "#4C72B0", "B": "#DD8452", "W": "#55A868", "BW": "#C44E52"}

plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 130, "font.size": 10, "axes.titlesize": 11,
                     "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 9, "legend.framealpha": 0.9})


class Skip(Exception):
    """The run has no data for this plot; the message says what is missing."""


class RowError(Exception):
    """Input the report cannot read (bad bytes, a torn CSV): the message names the file and line."""


# Figures past these counts are aggregated or cut to the largest, with a note
# saying what was left out: a report stays a few dozen figures whatever the run.
MAX_FIGURES = 4     # figures per kind (one per model, precision and scaling group)
MAX_PANELS = 24     # small multiples in one figure
MAX_BARS = 30       # labelled bars in one panel
MAX_LABELS = 120    # point annotations in one panel

_notes = []


def note(text):
    """A note for the report's Notes list, attached to the figure being drawn (take_notes)."""
    _notes.append(text)


def take_notes(title):
    out = ["%s: %s" % (title, n) for n in dict.fromkeys(_notes)]  # each note once
    del _notes[:]
    return out


class Row(tuple):
    """One CSV row: a tuple of its cells read like a dict (get, [name]), then its
    file and line. Subclassed per header (_idx: column -> position), so 200k rows
    cost a tuple each, not a dict each."""
    __slots__ = ()
    _idx = {}

    def get(self, key, default=None, _get=tuple.__getitem__):
        try:
            return _get(self, self._idx[key])
        except KeyError:
            return default

    def __getitem__(self, key):
        if isinstance(key, str):
            return tuple.__getitem__(self, self._idx[key])
        return tuple.__getitem__(self, key)

    def __contains__(self, key):
        return key in self._idx

    def origin(self):
        """"file:line" of the row."""
        return "%s:%s" % (tuple.__getitem__(self, -2), tuple.__getitem__(self, -1))


def read_rows(path, name):
    """(header, [Row]) of a CSV file; repeated cells are shared, not copied (a run's
    host, kind, model, ... repeat on every row). Raises RowError naming the line."""
    line = 1
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, [])
            n = len(header)
            cls = type("Row", (Row,), {"__slots__": (), "_idx": {c: i for i, c in enumerate(header)}})
            caches = [{} for _ in header]
            rows = []
            for line, cells in enumerate(reader, start=2):
                if len(cells) < n:
                    cells += [""] * (n - len(cells))
                vals = []
                for cache, v in zip(caches, cells):
                    if cache is not None:
                        v = cache.setdefault(v, v)
                    vals.append(v)
                vals += [name, line]
                rows.append(cls(vals))
                if line == 1002:  # columns of unique figures stop being cached
                    caches = [c if c is not None and len(c) < 200 else None for c in caches]
    except (UnicodeDecodeError, csv.Error) as e:
        raise RowError("%s: line %d: %s" % (name, line + 1 if isinstance(e, UnicodeDecodeError) else line,
                                            " ".join(str(e).split())))
    return header, rows


def culprit(tb):
    """"file:line" of the innermost Row a traceback's frames were handling ('' when none)."""
    found = ""
    while tb is not None:
        for v in tb.tb_frame.f_locals.values():
            if isinstance(v, Row):
                found = v.origin()
            elif isinstance(v, tuple) and v and isinstance(v[0], Row):
                found = v[0].origin()
        tb = tb.tb_next
    return found


def point_label(r):
    """A row's point as the report names it."""
    parts = [r.get(k) for k in ("model", "precision", "mesh", "strategy", "op", "quantity") if r.get(k)]
    return " ".join(parts) or "world %s" % r.get("world", "?")


def _bad(row, col, positive=False, integer=False, required=False, _inf=float("inf")):
    """Why a cell cannot be plotted ('' when it can, or is empty and not required)."""
    v = row.get(col, "")
    if v:  # the common case first: a finite figure in range
        try:
            x = float(v)
            if (0 < x < _inf or (x == 0 and not positive)) and (not integer or x == int(x)):
                return ""
        except ValueError:
            pass
    if v in ("", None):
        return "%s is empty" % col if required else ""
    try:
        x = float(v)
    except ValueError:
        return "%s is not a number (%r)" % (col, v)
    if not math.isfinite(x):
        return "%s is %s" % (col, v)
    if x < 0 or (positive and x == 0):
        return "%s is %s" % (col, v)
    if integer and x != int(x):
        return "%s is not a whole number (%s)" % (col, v)
    return ""


SWEEP_CHECKS = ([("world", dict(positive=True, integer=True, required=True)),
                 ("tokens_per_s", dict(positive=True)), ("step_time_s", dict(positive=True)),
                 ("step_time_min_s", dict(positive=True)), ("step_time_max_s", dict(positive=True)),
                 ("bubble", {}), ("moe_dropped", {}), ("moe_load_max_mean", {})]
                + [(c, {}) for c in ("mem_params", "mem_grads", "mem_optimizer", "mem_activations", "mem_comm",
                                     "mem_workspace", "mem_total", "comm_dp_bytes", "comm_tp_bytes", "comm_cp_bytes",
                                     "comm_pp_bytes", "comm_ep_bytes")])
CHECKS = {
    "sweep": SWEEP_CHECKS,
    "plan": [("world", dict(positive=True, integer=True, required=True)), ("est_tokens_per_s", {}),
             ("est_bubble", {}), ("mem_total", {})],
    "collective": [("world", dict(positive=True, integer=True)), ("bytes", dict(positive=True, integer=True)),
                   ("busbw_gbps", dict(positive=True))],
    "train_step": [("step", dict(integer=True, required=True)), ("loss", {})],
}


def sanitize(run):
    """Moves the ok rows whose figures cannot be drawn (NaN, negative, zero world, ...) from the run to
    run['skipped'] as (row, reason); a conformance row keeps its place in the table (its verdict stands) and
    the figure leaves a non-finite ratio out itself. Timeline rows need whole ranks and finite times."""
    run["skipped"] = []
    for kind in ("sweep", "plan", "collective", "train_step", "profile_plan"):
        checks = CHECKS["plan" if kind == "profile_plan" else kind]
        keep = []
        for r in run[kind]:
            why = ""
            if r.get("status", "ok") == "ok":
                for col, kw in checks:
                    why = _bad(r, col, **kw)
                    if why:
                        break
            if why:
                run["skipped"].append((r, why))
            else:
                keep.append(r)
        run[kind] = keep
    for i, (name, rows) in enumerate(run["timelines"]):
        keep = []
        for r in rows:
            why = (_bad(r, "rank", integer=True, required=True) or _bad(r, "start", required=True)
                   or _bad(r, "end", required=True)
                   or ("end %s before start %s" % (r["end"], r["start"]) if float(r["end"]) < float(r["start"])
                       else ""))
            if why:
                run["skipped"].append((r, why))
            else:
                keep.append(r)
        run["timelines"][i] = (name, keep)
    for r in run["conformance"]:
        why = _bad(r, "ratio")
        if why and r.get("bitwise") != "1":
            run["skipped"].append((r, why + "; its verdict stays in the table"))
    return run


def family(strategy):
    """A strategy text's family, by its outermost mechanism: pipeline, context, tensor, expert, sharded data
    (ZeRO, FSDP, HSDP), data (DDP)."""
    s = (strategy or "").lower()
    n = r"(?!1\b)\d+"  # an axis of size > 1 (series texts name tp1 cp1 pp1)
    if re.search(r"\b(1f1b|gpipe|interleaved|2bw|zb[-\w]*)\b|\bpp" + n, s):
        return "pipeline"
    if re.search(r"\bcp" + n + r"|cp_algo|\bring\b|ulysses", s):
        return "context"
    if re.search(r"\btp" + n, s):
        return "tensor"
    if re.search(r"\bmoe\b|\bep" + n, s):
        return "expert"
    if re.search(r"zero|fsdp|hsdp|hzero|shard=(?!none)", s):
        return "sharded data"
    return "data"


def name_some(items, n=8):
    """At most n of the items, then how many more."""
    items = list(items)
    return ", ".join(items[:n]) + (" and %d more" % (len(items) - n) if len(items) > n else "")


def median(v):
    """The upper median of v (None when empty)."""
    return sorted(v)[len(v) // 2] if v else None


def num(row, col):
    v = row.get(col, "")
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def ok(rows):
    return [r for r in rows if r.get("status", "ok") == "ok"]


def unreliable(r):
    """Whether the sweep marked row r unreliable (its steps spread past the bound, results/SCHEMA.md
    `unreliable`; absent in files of schema version 1: reliable)."""
    return r.get("unreliable") == "1"


def reliable(rows):
    """The ok rows not marked unreliable: what the planner's error is measured against."""
    return [r for r in ok(rows) if not unreliable(r)]


def human_bytes(x, _pos=None):
    for unit, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= s:
            v = x / s
            return ("%.0f %s" if v >= 10 or v == int(v) else "%.1f %s") % (v, unit)
    return "%.0f B" % x


def byte_unit(max_bytes):
    """(divisor, name) so the largest value reads between 1 and 2048 units."""
    for name, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if max_bytes >= 2 * div:
            return div, name
    return 1, "bytes"


def log_ticks(axis, fmt=lambda v: "%g" % v, subs=(1, 2, 5)):
    """Readable log ticks at 1, 2, 5 x 10^k (or `subs`), as plain numbers."""
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _p: fmt(v)))
    axis.set_minor_formatter(NullFormatter())


def series(row):
    """A sweep row's series: its strategy text, led by the mesh's axes other
    than dp (e.g. "pp2 shard=zero3"), so a series scales along dp alone and its
    x axis, the world size, stays meaningful."""
    axes = [a for a in (row.get("mesh") or "").split(".") if a and not a.startswith(("dp", "rpn"))]
    return " ".join(axes + [row.get("strategy", "")])


def strategy_colors(strategies):
    cmap = plt.get_cmap("tab10" if len(strategies) <= 10 else "tab20")
    return {s: cmap(i % cmap.N) for i, s in enumerate(sorted(strategies))}


def ranks_axis(ax, worlds):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(worlds))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: "%d" % x))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("ranks (world size)")


def save(fig, out, name):
    """Writes the figure to a temporary name then renames it: a killed report leaves no partial PNG."""
    path = os.path.join(out, name)
    try:
        fig.savefig(path + ".tmp", bbox_inches="tight", format="png")
        os.replace(path + ".tmp", path)
    finally:
        plt.close(fig)
        if os.path.exists(path + ".tmp"):
            os.remove(path + ".tmp")
    return path


def panel_grid(n, width=7.5, height=5.2):
    """A figure of n panels, two per row: (fig, the n axes then unused ones turned off, columns)."""
    ncol = min(2, n)
    nrow = (n + ncol - 1) // ncol
    fig, grid = plt.subplots(nrow, ncol, figsize=(width * ncol, height * nrow), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n:]:
        ax.axis("off")
    return fig, axes, ncol


def groups(rows, keys):
    g = defaultdict(list)
    for r in rows:
        g[tuple(r.get(k, "") for k in keys)].append(r)
    return dict(sorted(g.items()))


def scaling_groups(rows):
    """The sweep's (model, precision, scaling) groups with more than one point:
    a lone point (e.g. one capacity-factor variant of an MoE model) has no
    scaling to draw; its figures are the axis's own (mixture_of_experts)."""
    return {k: v for k, v in groups(rows, ["model", "precision", "scaling"]).items() if len(v) > 1}


def mean_by(rows, key, col):
    acc = defaultdict(list)
    for r in rows:
        v = num(r, col)
        if v is not None:
            acc[key(r)].append(v)
    return {k: sum(v) / len(v) for k, v in acc.items()}


def medians(rows, key, cols):
    """[(key, first row, {col: median over the rows, None when none has it}, count)] per key(row), by key."""
    acc = {}
    for r in rows:
        k = key(r)
        e = acc.get(k)
        if e is None:
            e = acc[k] = (r, {c: [] for c in cols}, [0])
        e[2][0] += 1
        for c in cols:
            v = num(r, c)
            if v is not None:
                e[1][c].append(v)
    return [(k, e[0], {c: median(v) for c, v in e[1].items()}, e[2][0]) for k, e in sorted(acc.items())]


def largest_groups(groups_, what):
    """The MAX_FIGURES groups with the most rows, a note naming the rest."""
    if len(groups_) <= MAX_FIGURES:
        return groups_
    keep = sorted(sorted(groups_, key=lambda k: -len(groups_[k]))[:MAX_FIGURES])
    rest = sorted(set(groups_) - set(keep))
    note("%d of %d %s figures drawn (the groups with the most rows); not drawn: %s" % (
        len(keep), len(groups_), what, name_some(" ".join(k) for k in rest)))
    return {k: groups_[k] for k in keep}


def legend_outside(ax, handles=None, title=None, fontsize=8):
    """A legend right of the axes, in columns of at most 20 entries: it never covers data."""
    n = len(handles) if handles is not None else len(ax.get_legend_handles_labels()[0])
    kw = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=fontsize, title=title,
              ncol=max(1, math.ceil(n / 20)), borderaxespad=0)
    return ax.legend(handles=handles, **kw) if handles is not None else ax.legend(**kw)


def throughput(run, out):
    sweep = [r for r in ok(run["sweep"]) if num(r, "tokens_per_s")]
    if not sweep:
        raise Skip("no sweep rows with tokens_per_s")
    result = []
    colors = strategy_colors({series(r) for r in sweep})
    for (model, prec, scaling), rows in largest_groups(scaling_groups(sweep), "throughput").items():
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.6))
        # Per series and world: the median throughput and the spread behind it,
        # throughput at the fastest and the slowest measured step
        # (step_time_min_s / step_time_max_s) as error bars; oversubscribed
        # points (more ranks than cores) hollow.
        pts = medians(rows, lambda r: (series(r), int(num(r, "world"))),
                      ["tokens_per_s", "step_time_s", "step_time_min_s", "step_time_max_s"])
        over = {k for k, r, _m, _n in pts if r.get("oversubscribed") == "1"}
        shaky = {(series(r), int(num(r, "world"))) for r in rows if unreliable(r)}
        by_series = defaultdict(list)
        for (s, w), _r, m, _n in pts:
            if m["tokens_per_s"]:
                by_series[s].append((w, m))
        worlds = {w for v in by_series.values() for w, _m in v}
        for s in sorted(by_series):
            v = sorted(by_series[s], key=lambda p: p[0])
            xs, ys = [w for w, _m in v], [m["tokens_per_s"] for _w, m in v]
            lo = [y * (1 - m["step_time_s"] / m["step_time_max_s"]) if m["step_time_s"] and m["step_time_max_s"]
                  else 0.0 for y, (_w, m) in zip(ys, v)]
            hi = [y * (m["step_time_s"] / m["step_time_min_s"] - 1) if m["step_time_s"] and m["step_time_min_s"]
                  else 0.0 for y, (_w, m) in zip(ys, v)]
            a1.errorbar(xs, ys, yerr=[[max(0.0, e) for e in lo], [max(0.0, e) for e in hi]], fmt="o-",
                        color=colors[s], capsize=3, label=s)
            ho = [(x, y) for x, y in zip(xs, ys) if (s, x) in over]
            if ho:
                a1.plot([p[0] for p in ho], [p[1] for p in ho], "o", mfc="white", color=colors[s])
            un = [(x, y) for x, y in zip(xs, ys) if (s, x) in shaky]
            if un:
                a1.plot([p[0] for p in un], [p[1] for p in un], "x", color="#b00000", ms=9, mew=2, zorder=4)
            w0, t0 = xs[0], ys[0]
            a2.plot(xs, [100 * (y / x) / (t0 / w0) for x, y in zip(xs, ys)], "o-", color=colors[s], label=s)
        for ax in (a1, a2):
            ranks_axis(ax, worlds)
        a1.set_yscale("log")
        log_ticks(a1.yaxis)
        a1.set_ylabel("throughput (tokens/s)")
        a1.set_title("throughput vs ranks (median per point)")
        a2.axhline(100, color="gray", lw=1, ls="--")
        a2.set_ylabel("scaling efficiency (% of linear from the smallest world)")
        a2.set_title("%s scaling efficiency" % scaling)
        if len(by_series) > 6:
            legend_outside(a2, title="strategy", fontsize=7)
        else:
            a2.legend(title="strategy", loc="best")
        fig.suptitle("%s, %s, %s scaling" % (model, prec, scaling))
        name = "throughput_%s_%s_%s.png" % (model, prec, scaling)
        result.append((save(fig, out, name), "Throughput and scaling efficiency: %s %s %s" % (model, prec, scaling),
                       "Tokens/s (log; median over the rows of a point; bars: throughput at the fastest and slowest "
                       "measured step; hollow: more ranks than cores, so the scaling is the machine's time-sharing; red x: "
                       "a row marked unreliable, its steps spread as on a busy machine) "
                       "and per-rank throughput relative to each strategy's smallest world."))
    return result


AXES = ["dp", "tp", "cp", "pp", "ep"]
AXIS_COLORS = dict(zip(AXES, ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3"]))


def stacked_panels(run, rows, cols, colors, what):
    """One panel per strategy; per world a measured stacked bar (medians over
    the point's rows) and, when the run has a plan row for the same point, a
    hatched declared bar beside it."""
    plan = _plan_of(run["plan"])
    pts = medians(rows, lambda r: (series(r), int(num(r, "world"))), cols)
    strategies = sorted({k[0] for k, _r, _m, _n in pts})
    if len(strategies) > MAX_PANELS:
        count = defaultdict(int)
        for (s, _w), _r, _m, n in pts:
            count[s] += n
        keep = sorted(sorted(strategies, key=lambda s: -count[s])[:MAX_PANELS])
        note("%s: %d of %d strategies drawn (the ones with the most rows); not drawn: %s" % (
            what, len(keep), len(strategies), name_some(sorted(set(strategies) - set(keep)))))
        strategies = keep
    ncol = min(4 if len(strategies) > 9 else 3, len(strategies))
    nrow = math.ceil(len(strategies) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.6 * nrow), squeeze=False, sharey=True)
    div, unit = byte_unit(max([sum(m[c] or 0 for c in cols) for _k, _r, m, _n in pts] + [0]))
    any_declared, top = False, 0.0
    for ax, s in zip(axes.flat, strategies):
        mine = [(k[1], r, m) for k, r, m, _n in pts if k[0] == s]
        decl = [plan.get((r["strategy"], r.get("model"), r.get("precision"), r.get("mesh"), r.get("global_batch")))
                for _w, r, _m in mine]
        x = list(range(len(mine)))
        for j, (srcs, hatch) in enumerate((([m for _w, _r, m in mine], None), (decl, "//"))):
            xs = [i + (j - 0.5) * 0.38 for i, d in zip(x, srcs) if d is not None]
            if not xs:
                continue
            any_declared |= j == 1
            bottom = [0.0] * len(xs)
            for c in cols:
                v = [((d[c] if j == 0 else num(d, c)) or 0.0) / div for d in srcs if d is not None]
                ax.bar(xs, v, 0.36, bottom=bottom, color=colors[c], hatch=hatch,
                       edgecolor="white" if hatch is None else "black", linewidth=0.4)
                bottom = [b + y for b, y in zip(bottom, v)]
            top = max([top] + bottom)
        ax.set_xticks(x)
        ax.set_xlim(-0.6, max(len(mine), 3) - 0.4)  # a lone world keeps a bar's width, not the panel's
        ax.set_xticklabels([str(w) for w, _r, _m in mine])
        ax.set_xlabel("ranks (world size)")
        ax.set_title(s, fontsize=9)
        ax.grid(axis="x", visible=False)
    for ax in axes.flat[len(strategies):]:
        ax.set_visible(False)
    axes[0][0].set_ylim(0, 1.08 * top if top > 0 else 1)
    for ax in axes[:, 0]:
        ax.set_ylabel("%s (%s)" % (what, unit))
    handles = [Patch(color=colors[c], label=c.replace("mem_", "").replace("comm_", "").replace("_bytes", ""))
               for c in cols]
    handles += [Patch(facecolor="white", edgecolor="black", label="measured (left bar)")]
    if any_declared:
        handles += [Patch(facecolor="white", edgecolor="black", hatch="//", label="declared (right bar)")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 0.0))
    return fig


def stacked_per_group(run, out, sweep, cols, colors, ylabel, title, prefix, caption, note_):
    """One stacked_panels figure per (model, precision, scaling) of the sweep."""
    result = []
    for (model, prec, scaling), rows in largest_groups(scaling_groups(sweep), prefix).items():
        fig = stacked_panels(run, rows, cols, colors, ylabel)
        fig.suptitle("%s: %s, %s, %s scaling" % (title, model, prec, scaling))
        # Fixed margins in inches, not tight_layout: a layout pass over 24 panels costs more than the drawing.
        w, h = fig.get_size_inches()
        fig.subplots_adjust(left=0.85 / w, right=1 - 0.15 / w, bottom=1.0 / h, top=1 - 0.75 / h, wspace=0.08,
                            hspace=0.42 * 3.6 / (3.6 - 0.42))
        name = "%s_%s_%s_%s.png" % (prefix, model, prec, scaling)
        result.append((save(fig, out, name), "%s: %s %s %s" % (caption, model, prec, scaling), note_))
    return result


def memory(run, out):
    sweep = ok(run["sweep"])
    if not any(num(r, "mem_total") for r in sweep):
        raise Skip("no sweep rows with per-tag memory")
    cols = ["mem_" + t for t in TAGS]
    colors = {"mem_" + t: TAG_COLORS[t] for t in TAGS}
    return stacked_per_group(run, out, sweep, cols, colors, "peak memory per rank", "Per-rank memory by tag", "memory",
                             "Memory by tag", "Stacked per-tag peaks (max over ranks); hatched bars are the "
                             "declared (planner) figures for the same point.")


def comm_volume(run, out):
    sweep = ok(run["sweep"])
    cols = ["comm_%s_bytes" % a for a in AXES if any((num(r, "comm_%s_bytes" % a) or 0) > 0 for r in sweep)]
    if not cols:
        raise Skip("no sweep rows with communication bytes")
    colors = {"comm_%s_bytes" % a: AXIS_COLORS[a] for a in AXES}
    return stacked_per_group(run, out, sweep, cols, colors, "logical bytes per step per rank",
                             "Communication volume by parallel axis (nccl-tests logical bytes)", "comm",
                             "Communication volume",
                             "Bytes per step and rank by group axis; hatched bars are the planner's figures.")


def bar_points(rows, label, cols, what):
    """[(label, first row, {col: median}, count)] of the rows by label(row), in the rows' order; past MAX_BARS
    the MAX_BARS labels with the most rows, a note counting the rest."""
    pts = medians(rows, label, cols)
    if len(pts) > MAX_BARS:
        keep = set(k for k, _r, _m, _n in sorted(pts, key=lambda p: -p[3])[:MAX_BARS])
        note("%s: %d of %d points drawn (the ones with the most rows)" % (what, len(keep), len(pts)))
        pts = [p for p in pts if p[0] in keep]
    return pts


def bubble(run, out):
    """Measured pipeline bubble of every sweep point with a pipeline, beside
    the schedule's declared one (the plan row's est_bubble, over ideal compute
    x, drawn as the fraction x / (1 + x) the sweep measures)."""
    sweep = [r for r in ok(run["sweep"]) if num(r, "bubble") and num(r, "bubble") > 0]
    if not sweep:
        raise Skip("no sweep rows with a pipeline bubble")
    plan = _plan_of(run["plan"])
    pts = bar_points(sweep, lambda r: (r.get("model", ""), r.get("mesh", ""), r.get("strategy", ""),
                                       r.get("microbatches", "")), ["bubble"], "pipeline bubble")
    fig, ax = plt.subplots(figsize=(max(6, 0.55 * len(pts) + 2), 4.2))
    ax.bar([i - 0.19 for i in range(len(pts))], [m["bubble"] for _k, _r, m, _n in pts], 0.36, color="#C44E52")
    decl = []
    for i, (_k, r, _m, _n) in enumerate(pts):
        d = plan.get((r["strategy"], r.get("model"), r.get("precision"), r.get("mesh"), r.get("global_batch")))
        x = num(d, "est_bubble") if d else None
        if x is not None:
            decl.append((i + 0.19, x / (1 + x)))
    if decl:
        ax.bar([p[0] for p in decl], [p[1] for p in decl], 0.36, color="white", edgecolor="black", hatch="//",
               linewidth=0.5)
    ax.set_xticks(range(len(pts)))
    ax.set_xticklabels(["%s %s %s mb%s" % k for k, _r, _m, _n in pts], fontsize=7, rotation=40, ha="right")
    ax.set_ylabel("bubble (idle fraction of the step)")
    ax.set_ylim(0, 1)
    handles = [Patch(color="#C44E52", label="measured (sweep)")]
    if decl:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="declared by the schedule (plan)"))
    ax.legend(handles=handles, loc="upper right")
    ax.set_title("Pipeline bubble: measured vs declared")
    return [(save(fig, out, "pipeline_bubble.png"), "Pipeline bubble, measured vs declared",
             "Idle fraction of the step over all ranks (sum of (T - busy) / (p T), mean over measured steps) "
             "beside the schedule's declared (p-1)/m over ideal, as a fraction.")]


def _plan_of(plan_rows):
    """Plan rows by the key a sweep row names them with."""
    return {(r.get("strategy"), r.get("model"), r.get("precision"), r.get("mesh"), r.get("global_batch")): r
            for r in ok(plan_rows)}


def _measured_vs_plan(ax, pts, plan, col, color):
    """Bars of a sweep column per point (bar_points; solid, the median) beside the matching plan row's
    (hatched); returns the unit."""
    pairs = []
    for _k, r, m, _n in pts:
        d = plan.get((r["strategy"], r.get("model"), r.get("precision"), r.get("mesh"), r.get("global_batch")))
        pairs.append((m[col] or 0, num(d, col) if d else None))
    div, unit = byte_unit(max([m for m, _ in pairs] + [x or 0 for _, x in pairs]))
    ax.bar([i - 0.19 for i in range(len(pairs))], [m / div for m, _x in pairs], 0.36, color=color)
    decl = [(i + 0.19, x / div) for i, (_m, x) in enumerate(pairs) if x is not None]
    if decl:
        ax.bar([p[0] for p in decl], [p[1] for p in decl], 0.36, color="white", edgecolor="black", hatch="//",
               linewidth=0.5)
    ax.set_xticks(range(len(pairs)))
    return unit


def _axis(row, axis):
    """The size of a mesh axis ("tp", "cp", ...) in a row's mesh text (1 when absent)."""
    for part in (row.get("mesh") or "").split("."):
        if part.startswith(axis) and part[len(axis):].isdigit():
            return int(part[len(axis):])
    return 1


def _tp_mode(strategy):
    """(sp, recompute) of a strategy text: "off"/"on", "none"/"selective"/"full"."""
    opts = dict(kv.split("=", 1) for kv in (strategy or "").split(",") if "=" in kv)
    return opts.get("sp", "off"), opts.get("recompute", "none")


def tensor_parallel(run, out):
    """Every sweep point with tp > 1: measured activation bytes per rank beside
    the ones the tensor axis declares (the plan row, which evaluates the same
    impl/tensor_parallel/cost.h functions the conformance engine holds the
    rank to), per recompute mode and sequence parallel; and the bytes moved on
    the tp group per step, measured and planned."""
    sweep = [r for r in ok(run["sweep"]) if _axis(r, "tp") > 1]
    if not sweep:
        raise Skip("no sweep rows with tensor parallel")
    plan = _plan_of(run["plan"])
    order = {("off", "none"): 0, ("on", "none"): 1, ("off", "selective"): 2, ("on", "selective"): 3,
             ("off", "full"): 4, ("on", "full"): 5}
    pts = bar_points(sweep, lambda r: (r.get("model", ""), r.get("mesh", ""),
                                       order.get(_tp_mode(r.get("strategy")), 9), r.get("strategy", "")),
                     ["mem_activations", "comm_tp_bytes"], "tensor parallel")
    figs = []
    for col, name, ylabel, title in (
            ("mem_activations", "tp_activations.png", "activation bytes per rank",
             "Tensor parallel: activation memory, measured vs declared"),
            ("comm_tp_bytes", "tp_comm.png", "bytes on the tp group per step",
             "Tensor parallel: tp-group bytes per step, measured vs planned")):
        fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(pts) + 2), 4.2))
        ylabel = "%s (%s)" % (ylabel, _measured_vs_plan(ax, pts, plan, col, "#4C72B0"))
        ax.set_xticklabels(["%s %s sp %s, recompute %s" % ((r.get("model"), r.get("mesh")) + _tp_mode(r.get("strategy")))
                            for _k, r, _m, _n in pts], fontsize=7, rotation=40, ha="right")
        ax.set_ylabel(ylabel)
        ax.legend(handles=[Patch(color="#4C72B0", label="measured (sweep)"),
                           Patch(facecolor="white", edgecolor="black", hatch="//", label="declared (plan)")],
                  loc="upper right")
        ax.set_title(title)
        figs.append(save(fig, out, name))
    return [(figs[0], "Tensor parallel: activation memory per recompute mode and SP",
             "Peak activation bytes per rank measured in the sweep beside the tensor axis's declared figure "
             "(cost.h activation_bytes: Korthikanti's per-layer terms for this model, LayerNorm statistics "
             "included, no dropout). Selective recompute drops the attention probabilities, full keeps each "
             "block's input; sequence parallel divides the LayerNorm regions by tp."),
            (figs[1], "Tensor parallel: communication per step",
             "Logical bytes on the tp group per step, measured, beside the planner's per-layer, embedding and head "
             "figures (cost.h layer_comm, embedding_comm, head_comm) over the step's microbatches, plus the "
             "once-per-step clip-norm partial sum and, with sequence parallel, the replicated parameters' "
             "gradients (cost.h step_bytes).")]


def _cp_label(r):
    opts = dict(kv.split("=", 1) for kv in (r.get("strategy") or "").split(",") if "=" in kv)
    return "%s %s %s%s" % (r.get("model"), r.get("mesh"), opts.get("cp_algo", "ring"),
                           "" if opts.get("cp_algo") == "ulysses" else
                           (" contiguous" if opts.get("zigzag") == "off" else " zigzag"))


def context_parallel(run, out):
    """Every sweep point with cp > 1: activation bytes per rank and the bytes a
    rank sends on the cp group per step, measured beside the plan (the same
    impl/context_parallel/cost.h and tensor_parallel/cost.h functions the
    conformance engine holds the rank to)."""
    sweep = [r for r in ok(run["sweep"]) if _axis(r, "cp") > 1]
    if not sweep:
        raise Skip("no sweep rows with context parallel")
    plan = _plan_of(run["plan"])
    pts = bar_points(sweep, lambda r: (r.get("model", ""), r.get("mesh", ""), r.get("strategy", "")),
                     ["mem_activations", "comm_cp_bytes"], "context parallel")
    fig, axes = plt.subplots(1, 2, figsize=(min(20, max(9, 1.1 * len(pts) + 3)), 4.6))
    for ax, (col, ylabel) in zip(axes, (("mem_activations", "activation bytes per rank"),
                                        ("comm_cp_bytes", "bytes sent on the cp group per step"))):
        unit = _measured_vs_plan(ax, pts, plan, col, "#55A868")
        ax.set_xticklabels([_cp_label(r) for _k, r, _m, _n in pts], fontsize=7, rotation=40, ha="right")
        ax.set_ylabel("%s (%s)" % (ylabel, unit))
    axes[0].legend(handles=[Patch(color="#55A868", label="measured (sweep)"),
                            Patch(facecolor="white", edgecolor="black", hatch="//", label="declared (plan)")],
                   loc="upper right")
    fig.suptitle("Context parallel: activations and cp bytes, measured vs declared")
    return [(save(fig, out, "cp_memory_comm.png"), "Context parallel: activations and communication",
             "Per rank, the peak activation bytes (activations fall as 1/cp; ring keeps a log-sum-exp per token "
             "and head, Ulysses its heads' Q, K, V and probabilities over whole sequences) and the bytes sent on "
             "the cp group per step (ring: cp-1 K/V blocks forward, cp-1 K/V blocks and dK/dV accumulators "
             "backward per layer; Ulysses: 4 + 4 all-to-alls per layer), beside the plan's figures.")]


def _moe_label(r):
    shard = dict(kv.split("=", 1) for kv in (r.get("strategy") or "").split(",") if "=" in kv).get("shard", "none")
    return "%s %s %s" % (r.get("model"), r.get("mesh"), shard)


def mixture_of_experts(run, out):
    """Every sweep point of a mixture-of-experts model: throughput, the ep
    all-to-all bytes per step beside the plan's (a balanced router's rows), and
    the routing the run measured (fraction of choices dropped at capacity, the
    busiest expert's rows over the mean), by mesh (dp vs ep) and capacity
    factor / mode (the model's variant name)."""
    rows = [r for r in ok(run["sweep"]) if (num(r, "moe_load_max_mean") or 0) > 0]
    if not rows:
        raise Skip("no sweep rows with a mixture-of-experts model")
    plan = _plan_of(run["plan"])
    pts = bar_points(rows, lambda r: (r.get("model", ""), _axis(r, "ep"), _axis(r, "dp"), r.get("strategy", ""),
                                      r.get("mesh", "")),
                     ["tokens_per_s", "comm_ep_bytes", "moe_dropped", "moe_load_max_mean"], "mixture of experts")
    labels = [_moe_label(r) for _k, r, _m, _n in pts]
    x = list(range(len(pts)))
    colors = ["#C44E52" if _axis(r, "ep") > 1 else "#4C72B0" for _k, r, _m, _n in pts]
    if len(pts) <= 12:
        fig, axes = plt.subplots(1, 3, figsize=(max(12, 1.2 * len(pts) + 4), 4.8))
    else:  # many points: the three panels stacked, each as wide as its labels need
        fig, axes = plt.subplots(3, 1, figsize=(max(10, 0.42 * len(pts) + 3), 13))
    axes[0].bar(x, [(m["tokens_per_s"] or 0) / 1e3 for _k, _r, m, _n in pts], color=colors)
    axes[0].set_ylabel("k tokens/s (red: expert parallel)")
    unit = _measured_vs_plan(axes[1], pts, plan, "comm_ep_bytes", "#C44E52")
    axes[1].set_ylabel("ep all-to-all bytes per step (%s)" % unit)
    axes[1].legend(handles=[Patch(color="#C44E52", label="measured (max over ranks)"),
                            Patch(facecolor="white", edgecolor="black", hatch="//", label="plan (balanced router)")],
                   loc="upper right", fontsize=7)
    drop = [100 * (m["moe_dropped"] or 0) for _k, _r, m, _n in pts]
    axes[2].bar(x, drop, color=colors)
    for i, (_k, _r, m, _n) in enumerate(pts if len(pts) <= 20 else []):
        axes[2].annotate("%.2f" % (m["moe_load_max_mean"] or 0), (i, drop[i]), ha="center", va="bottom", fontsize=7)
    axes[2].set_ylabel("choices dropped at capacity, %%%s" % (" (label: max/mean expert load)" if len(pts) <= 20
                                                             else ""))
    for i, ax in enumerate(axes):
        ax.set_xticks(x)
        if len(pts) <= 12 or i == 2:  # stacked panels: the labels under the last one only
            ax.set_xticklabels(labels, fontsize=7, rotation=40, ha="right")
        else:
            ax.set_xticklabels([])
    fig.suptitle("Mixture of experts: data vs expert parallel, capacity factor and mode")
    if len(pts) > 12:
        fig.tight_layout()
    return [(save(fig, out, "moe_ep.png"), "Mixture of experts: data and expert parallel",
             "Per sweep point of an MoE model (tiny-moe variants: -cf<F> capacity factor, -local capacity): "
             "throughput; the bytes of the expert-parallel all-to-alls per step (counts, dispatch and combine "
             "forward and backward) beside the planner's balanced-router figure; and the routing measured over "
             "the sweep's steps on every rank: the share of (token, choice) pairs dropped at capacity and, "
             "labelled, the busiest expert's rows over the mean rows per expert (1 = balanced).")]


def collectives(run, out):
    rows = [r for r in ok(run["collective"]) if num(r, "busbw_gbps") is not None]
    if not rows:
        raise Skip("no collective rows")
    fig, ax = plt.subplots(figsize=(8.5, 5))
    series = groups(rows, ["op", "backend", "world", "dtype"])
    ops = sorted({k[0] for k in series})
    worlds = sorted({k[2] for k in series}, key=lambda w: int(w or 0))
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D"]
    cmap = plt.get_cmap("tab10")
    for (op, backend, world, dtype), rs in series.items():
        pts = sorted(mean_by(rs, lambda r: int(num(r, "bytes")), "busbw_gbps").items())
        wi = worlds.index(world) % 4
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=styles[wi], marker=markers[wi], ms=4,
                color=cmap(ops.index(op) % 10), label="%s, %s ranks (%s, %s)" % (op, world, backend, dtype))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=40))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, p: human_bytes(x) if int(math.log2(x)) % 2 == 0 else ""))
    log_ticks(ax.yaxis)
    ax.set_xlabel("message size S (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s, 1 GB = 1e9 B)")
    ax.set_title("Collective bus bandwidth vs message size")
    if len(series) > 8:
        legend_outside(ax, fontsize=7)
    else:
        ax.legend(loc="best")
    fig.tight_layout()
    return [(save(fig, out, "collective_busbw.png"), "Collective bus bandwidth",
             "busbw = algbw x bus factor (all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n).")]


def _series_key(r):
    return (r.get("model", ""), r.get("precision", ""), series(r))


def extrapolation(run, out):
    """The vendor's lead figure: measured scaling and the planner's estimate side
    by side per series, the plan continued to the extrapolated world sizes
    (plan rows at worlds the sweep did not measure: `sweep.extrapolate`)."""
    sweep = [r for r in ok(run["sweep"]) if num(r, "tokens_per_s") and num(r, "world")]
    measured_at = {(_series_key(r), int(num(r, "world"))) for r in sweep}
    plans = [r for r in ok(run["plan"]) if num(r, "est_tokens_per_s") and num(r, "world")]
    extra = [p for p in plans if (_series_key(p), int(num(p, "world"))) not in measured_at]
    if not extra or not sweep:
        raise Skip("no plan row beyond the measured worlds (set sweep.extrapolate)")
    keys = sorted({_series_key(p) for p in extra} & {_series_key(r) for r in sweep})
    if not keys:
        raise Skip("no extrapolated series was measured")
    models = sorted({(k[0], k[1]) for k in keys})
    if len(models) > MAX_PANELS:
        note("%d of %d model and precision panels drawn" % (MAX_PANELS, len(models)))
        models = models[:MAX_PANELS]
    colors = strategy_colors({k[2] for k in keys})
    fig, axes, ncol = panel_grid(len(models))
    target = max(int(num(p, "world")) for p in extra)
    measured = defaultdict(list)  # series key -> [(world, medians)]
    for (k, w), _r, m, _n in medians(sweep, lambda r: (_series_key(r), int(num(r, "world"))),
                                     ["tokens_per_s", "step_time_s", "step_time_min_s", "step_time_max_s"]):
        measured[k].append((w, m))
    planned = defaultdict(dict)
    for p in plans:
        planned[_series_key(p)][int(num(p, "world"))] = num(p, "est_tokens_per_s")
    for ax, (model, prec) in zip(axes, models):
        worlds = set()
        for k in keys:
            if (k[0], k[1]) != (model, prec):
                continue
            m = sorted(measured[k], key=lambda p: p[0])
            xs = [w for w, _m in m]
            ys = [q["tokens_per_s"] for _w, q in m]
            lo = [q["tokens_per_s"] * q["step_time_s"] / q["step_time_max_s"]
                  if q["step_time_max_s"] and q["step_time_s"] else q["tokens_per_s"] for _w, q in m]
            hi = [q["tokens_per_s"] * q["step_time_s"] / q["step_time_min_s"]
                  if q["step_time_min_s"] and q["step_time_s"] else q["tokens_per_s"] for _w, q in m]
            ax.errorbar(xs, ys, yerr=[[max(0.0, y - l) for y, l in zip(ys, lo)],
                                      [max(0.0, h - y) for y, h in zip(ys, hi)]], ls="-",
                        marker="o", ms=4, capsize=2, color=colors[k[2]])
            pl = sorted(planned[k].items())
            ax.plot([w for w, _y in pl], [y for _w, y in pl], ls="--", marker="x", ms=5, color=colors[k[2]])
            worlds.update(xs)
            worlds.update(w for w, _y in pl)
        ranks_axis(ax, worlds)
        ax.set_yscale("log")
        log_ticks(ax.yaxis)
        ax.set_ylabel("tokens/s")
        ax.set_title("%s, %s: measured and planned, to %d ranks" % (model, prec, target))
    handles = [Line2D([], [], color=colors[s], label=s) for s in sorted(colors)]
    handles += [Line2D([], [], color="#555555", marker="o", label="measured (bars: fastest to slowest step)"),
                Line2D([], [], color="#555555", ls="--", marker="x", label="planner (calibrated), extrapolated")]
    axes[ncol - 1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7,
                          ncol=max(1, math.ceil(len(handles) / 30)))
    fig.tight_layout()
    basis = sorted({p.get("reason", "") for p in extra})[0]
    return [(save(fig, out, "scaling_extrapolated.png"), "Measured scaling and the plan, extrapolated to %d ranks"
             % target, "Solid: measured on this machine; dashed: the planner with the hardware it was given, at "
                       "the measured worlds and beyond. Basis of the extrapolated rows: %s." % basis)]

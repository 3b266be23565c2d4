#!/usr/bin/env python3
"""Relabels the `strategy` column of a committed conformance baseline.

    relabel_baseline.py OLD_RUN.csv NEW_RUN.csv BASELINE.csv [--write]

OLD_RUN.csv and NEW_RUN.csv are conformance.csv files of the same
`parabench check` matrix run by the code before and after a change of labels
(the matrix's order is fixed, so row i of one run is row i of the other).
The map old label -> new label is derived per (backend, mesh) from them: the
runs must agree row by row on every column that is not measured (backend,
world, mesh, precision, quantity, item, step, bitwise; config_hash too, as
the label change does not change what runs), every old label must map to one
new label and no two old labels to the same one.

The map is then applied to BASELINE.csv (only its `strategy` column changes)
and the result is proven: the same number of rows, every row's old label
mapped, the gate's key (suites/report/gate.cc: backend, mesh, strategy,
precision, quantity, item, step, bitwise) one-to-one between old and new rows
(no two old keys collapse into one new key), and every other column, `pass`
included, unchanged. With --write the baseline is rewritten in place (its
line endings and column order kept); without, only the proof is printed.
Exit 1 on any violation.
"""
import csv
import io
import sys

SAME = ["backend", "world", "mesh", "config_hash", "precision", "quantity", "item", "step", "bitwise"]
GATE_KEY = ["backend", "mesh", "strategy", "precision", "quantity", "item", "step", "bitwise"]


def fail(msg):
    print("relabel_baseline: " + msg, file=sys.stderr)
    sys.exit(1)


def write_text(header, rows, eol):
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=header, lineterminator=eol)
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def read(path):
    with open(path, newline="") as fh:
        text = fh.read()
    rows = list(csv.DictReader(io.StringIO(text)))
    header = next(csv.reader(io.StringIO(text)))
    eol = "\r\n" if "\r\n" in text else "\n"
    # This writer must write the file back byte for byte (quoting included:
    # the new labels hold commas), or rewriting would change more than labels.
    if write_text(header, rows, eol) != text:
        fail("%s: not written back byte for byte by this script's CSV writer" % path)
    return header, rows, eol


def label_map(old_rows, new_rows):
    if len(old_rows) != len(new_rows):
        fail("the runs have %d and %d rows: not the same matrix" % (len(old_rows), len(new_rows)))
    fwd, back = {}, {}
    for i, (o, n) in enumerate(zip(old_rows, new_rows)):
        for c in SAME:
            if o[c] != n[c]:
                fail("row %d: column %s differs (%r vs %r): not the same matrix" % (i + 2, c, o[c], n[c]))
        a = (o["backend"], o["mesh"], o["strategy"])
        b = (n["backend"], n["mesh"], n["strategy"])
        if fwd.setdefault(a, b) != b:
            fail("old label %r maps to both %r and %r" % (a, fwd[a], b))
        if back.setdefault(b, a) != a:
            fail("new label %r comes from both %r and %r" % (b, back[b], a))
    return fwd


def main(argv):
    args = [a for a in argv if a != "--write"]
    if len(args) != 3:
        fail("usage: relabel_baseline.py OLD_RUN.csv NEW_RUN.csv BASELINE.csv [--write]")
    _, old_run, _ = read(args[0])
    _, new_run, _ = read(args[1])
    fwd = label_map(old_run, new_run)
    header, base, eol = read(args[2])
    relabelled = []
    for i, r in enumerate(base):
        k = (r["backend"], r["mesh"], r["strategy"])
        if k not in fwd:
            fail("baseline row %d: label %r of mesh %s is not in the runs' map" % (i + 2, r["strategy"], r["mesh"]))
        n = dict(r)
        n["strategy"] = fwd[k][2]
        relabelled.append(n)
    # The proof.
    if len(relabelled) != len(base):
        fail("row count changed")
    old_keys = [tuple(r[c] for c in GATE_KEY) for r in base]
    new_keys = [tuple(r[c] for c in GATE_KEY) for r in relabelled]
    pairs = set(zip(old_keys, new_keys))
    if len({o for o, _ in pairs}) != len(pairs) or len({n for _, n in pairs}) != len(pairs):
        fail("the gate keys are not one-to-one between old and new rows")
    if len(set(old_keys)) != len(set(new_keys)):
        fail("%d old gate keys became %d new ones" % (len(set(old_keys)), len(set(new_keys))))
    changed = [c for c in header if c != "strategy" and any(o[c] != n[c] for o, n in zip(base, relabelled))]
    if changed:
        fail("columns other than strategy changed: %s" % changed)
    used = sorted({(r["backend"], r["mesh"], r["strategy"]) for r in base})
    print("map (%d labels in the runs, %d used by the baseline):" % (len(fwd), len(used)))
    for k in used:
        print("  %s %s: %r -> %r" % (k[0], k[1], k[2], fwd[k][2]))
    print("rows: %d before, %d after" % (len(base), len(relabelled)))
    print("gate keys: %d before, %d after, one-to-one" % (len(set(old_keys)), len(set(new_keys))))
    print("passes: %d of 1, %d of 0, unchanged (every column but strategy unchanged)" %
          (sum(r["pass"] == "1" for r in base), sum(r["pass"] == "0" for r in base)))
    if "--write" in argv:
        with open(args[2], "w", newline="") as fh:
            fh.write(write_text(header, relabelled, eol))
        print("written: " + args[2])


if __name__ == "__main__":
    main(sys.argv[1:])

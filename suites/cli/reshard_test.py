#!/usr/bin/env python3
"""check --reshard and parabench reshard through the binary (docs/checkpoint.md).

    reshard_test.py PARABENCH WORKDIR

A pair passes (exit 0) and a checkpoint fault fails it (exit 1); a checkpoint
kept by check --reshard-keep is resharded to dp4 ZeRO-1 and back to dp2
ZeRO-3, giving the same shard files; every bad input exits 2 with a message
naming what is wrong and leaves the output as it was (nothing created,
nothing overwritten).
"""
import json
import os
import shutil
import subprocess
import sys

EXE, WORK = sys.argv[1], sys.argv[2]
failures = []


def w(*parts):
    return os.path.join(WORK, *parts)


def run(args, rc, expect=None, timeout=300):
    p = subprocess.run([EXE] + args, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    ok = p.returncode == rc and (expect is None or expect in out)
    if not ok:
        failures.append(f"{' '.join(args)}: rc {p.returncode} (want {rc}), expected {expect!r} in:\n{out}")
    return out


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

# A pair passes; its fault is caught. Both write conformance rows (the
# strategy column: the pair's label) and JUnit cases, as check's matrix does.
run(["check", "--reshard", "dp2,shard=zero3:dp4,shard=zero1", "--precision", "fp32", "bf16-mixed",
     "--run-dir", w("rows_ok"), "--junit", w("ok.xml")], 0, "2 resharded runs, 0 failed")
run(["check", "--reshard", "dp2,shard=zero3:dp4,shard=zero1,faults=ckpt_drop_moments", "--precision", "fp32",
     "--run-dir", w("rows_bad"), "--junit", w("bad.xml")], 1, "1 resharded runs, 1 failed")


def rows(d):
    import csv
    with open(w(d, "conformance.csv")) as f:
        return list(csv.DictReader(f))


ok_rows, bad_rows = rows("rows_ok"), rows("rows_bad")
if not ok_rows or not all(r["pass"] == "1" and r["mesh"] == "dp4" and " -> " in r["strategy"] for r in ok_rows):
    failures.append(f"check --reshard rows of a passing pair: {ok_rows[:2]}")
if {r["precision"] for r in ok_rows} != {"fp32", "bf16-mixed"} or not any(r["bitwise"] == "1" for r in ok_rows):
    failures.append("check --reshard rows: want both precisions and the bitwise rows")
if not any(r["pass"] == "0" and r["quantity"] == "params" for r in bad_rows):
    failures.append(f"check --reshard rows of a dropped-moments load: no failing params row in {len(bad_rows)} rows")
run(["validate", w("rows_ok", "conformance.csv"), w("rows_bad", "conformance.csv")], 0, "2 files checked, 0 with")
for xml, failed in (("ok.xml", False), ("bad.xml", True)):
    text = open(w(xml)).read()
    if text.count("<testcase") < 3 or ("<failure" in text) != failed:
        failures.append(f"check --reshard --junit {xml}: {text.count('<testcase')} cases, failure {'<failure' in text}")

# A kept checkpoint, resharded there and back: the same files.
ck = w("ck")
run(["check", "--reshard", "dp2,shard=zero3:dp4", "--precision", "fp32", "--reshard-keep", ck, "--out", w("runs")], 0)
run(["reshard", ck, "--mesh", "dp4", "--strategy", "shard=zero1", "--out", w("ck4")], 0, "resharded")
run(["reshard", w("ck4"), "--mesh", "dp2", "--strategy", "shard=zero3", "--out", w("ck2")], 0)
for f in ("rank-00000.safetensors", "rank-00001.safetensors", "index.json"):
    a, b = open(os.path.join(ck, f), "rb").read(), open(os.path.join(w("ck2"), f), "rb").read()
    if a != b:
        failures.append(f"{f} differs after dp2 -> dp4 -> dp2")
if json.load(open(os.path.join(w("ck4"), "index.json")))["run"]["world"] != 4:
    failures.append("ck4's index does not say world 4")
if any(n.startswith(".") for n in os.listdir(WORK)):
    failures.append(f"a temporary left behind in {WORK}: {os.listdir(WORK)}")

# Pipeline ranks (docs/checkpoint.md#pipelines): the pair passes; a
# pipeline's checkpoint is resharded to plain data parallel and back to the
# same files.
run(["check", "--reshard", "dp2.pp2,shard=zero1:pp4,schedule=interleaved,virtual_stages=2", "--precision", "fp32",
     "--reshard-keep", w("ckpp"), "--out", w("runs")], 0, "1 resharded runs, 0 failed")
run(["reshard", w("ckpp"), "--mesh", "dp4", "--strategy", "shard=zero3", "--microbatches", "1", "--out", w("ckpp4")], 0,
    "resharded")
run(["reshard", w("ckpp4"), "--mesh", "dp2.pp2", "--strategy", "shard=zero1", "--microbatches", "4", "--out",
     w("ckpp2")], 0)
for f in ("rank-00000.safetensors", "rank-00001.safetensors", "rank-00002.safetensors", "rank-00003.safetensors"):
    if not os.path.exists(os.path.join(w("ckpp"), f)):
        failures.append(f"the dp2.pp2 checkpoint has no {f}")
    elif open(os.path.join(w("ckpp"), f), "rb").read() != open(os.path.join(w("ckpp2"), f), "rb").read():
        failures.append(f"{f} differs after dp2.pp2 -> dp4 -> dp2.pp2")

# Bad input: exit 2, nothing written or overwritten.
os.makedirs(w("exists"))
open(w("exists", "keep.txt"), "w").write("mine")
run(["reshard", ck, "--mesh", "dp4", "--out", w("exists")], 2, "exists; nothing is overwritten")
if os.listdir(w("exists")) != ["keep.txt"] or open(w("exists", "keep.txt")).read() != "mine":
    failures.append("reshard touched an existing --out")
run(["reshard", ck, "--mesh", "pp4", "--microbatches", "4", "--out", w("o_pp")], 2, "layers")  # tiny: 2 layers
run(["reshard", ck, "--mesh", "dp2.pp2", "--strategy", "schedule=2bw", "--microbatches", "2", "--out", w("o_2bw")], 2,
    "cannot be resharded")
run(["reshard", ck, "--mesh", "dp5", "--out", w("o_dp5")], 2, "dp5")
run(["reshard", w("nope"), "--mesh", "dp4", "--out", w("o_nope")], 2, "not a directory")
run(["check", "--reshard", "dp2:tp2", "--precision", "fp32", "--model", "tiny-tp", "--reshard-keep", ck], 2, "exists")
run(["check", "--reshard", "dp2", "--precision", "fp32", "--out", w("refused")], 2, "is not A:B")
run(["check", "--reshard", "dp2,faults=ckpt_step_reset:dp4", "--precision", "fp32", "--out", w("refused")], 2, "checkpoint fault")
run(["check", "--reshard", "dp2:dp4,faults=ckpt_uneven_offset", "--precision", "fp32", "--out", w("refused")], 2, "does not apply")
run(["check", "--reshard", "dp2:dp4", "--precision", "fp32", "--steps", "4", "--reshard-at", "4", "--out", w("refused")], 2,
    "--reshard-at")
if os.path.exists(w("refused")):
    failures.append("check --reshard: a refused pair left a results directory behind")
# A truncated shard.
shutil.copytree(ck, w("trunc"))
f = w("trunc", "rank-00001.safetensors")
os.truncate(f, os.path.getsize(f) - 8)
run(["reshard", w("trunc"), "--mesh", "dp4", "--out", w("o_trunc")], 2, "rank-00001.safetensors")
# An index whose shards do not tile a tensor.
shutil.copytree(ck, w("tile"))
ix = json.load(open(w("tile", "index.json")))
t = next(t for t in ix["tensors"] if len(t["shards"]) > 1)
t["shards"] = t["shards"][:1]
json.dump(ix, open(w("tile", "index.json"), "w"))
run(["reshard", w("tile"), "--mesh", "dp4", "--out", w("o_tile")], 2, "do not tile")
# Edited run spec: its hash no longer matches.
shutil.copytree(ck, w("edit"))
ix = json.load(open(w("edit", "index.json")))
ix["run"]["spec_toml"] = ix["run"]["spec_toml"].replace("seed = 1234", "seed = 99")
json.dump(ix, open(w("edit", "index.json"), "w"))
run(["reshard", w("edit"), "--mesh", "dp4", "--out", w("o_edit")], 2, "hash")
for o in ("o_pp", "o_2bw", "o_dp5", "o_nope", "o_trunc", "o_tile", "o_edit"):
    if os.path.exists(w(o)):
        failures.append(f"{o} was created by a refused reshard")
if any(n.startswith(".") for n in os.listdir(WORK)):
    failures.append(f"a temporary left behind in {WORK}: {os.listdir(WORK)}")

for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)

#!/usr/bin/python3
"""Synthetic but realistic results for testing `parabench report` and `gate`.

Writes one CSV per kind (headers from results/schema.json: the common columns
then the kind's) plus a pipeline timeline CSV into --out. The figures follow
the formulas a real run would obey (ZeRO model-state bytes for the "small"
canonical model, alpha-beta collective times, a 1F1B schedule) with seeded
noise, so plots look like real ones. Not measurements: fixtures only.

--doctor-throughput X scales every sweep tokens_per_s by (1 + X);
--fail-conformance marks one conformance row failed; --drop-point removes
one sweep point: the inputs the gate tests must catch.
"""
import argparse
import csv
import json
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "..", "results", "schema.json")

# The "small" canonical model: V256 T64 C128 L4 NH4 -> V*C + T*C + L*(12C^2 + 13C) + 2C.
V, T, C, L = 256, 64, 128, 4
PSI = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "tp2", "pp2.1f1b"]
WORLDS = [1, 2, 4, 8]
RUN_ID = "20250101T000000Z-f1x7e5"
STAMP = "2025-01-01T00:00:00.000Z"


def header(schema, kind):
    return [c["name"] for c in schema["common"]] + [c["name"] for c in schema["kinds"][kind]["columns"]]


def common(kind, world, mesh, status="ok", reason=""):
    return {"run_id": RUN_ID, "kind": kind, "timestamp": STAMP, "git_rev": "fixture", "host": "fixture",
            "backend": "local", "world": world, "mesh": mesh, "status": status, "reason": reason}


def mesh_of(strategy, world):
    tp = 2 if strategy.startswith("tp") else 1
    pp = 2 if strategy.startswith("pp") else 1
    return tp, pp, world // (tp * pp), "dp%d.tp%d.cp1.pp%d" % (world // (tp * pp), tp, pp)


def model_states(strategy, dp, tp, pp):
    """fp32 (4/4/8 bytes per parameter) ZeRO formulas with ceil padding."""
    psi = math.ceil(PSI / (tp * pp))
    sh = math.ceil(psi / dp)
    full = sh * dp
    if strategy == "zero1":
        return 4 * full, 4 * full, 8 * sh
    if strategy == "zero2":
        return 4 * full, 4 * sh, 8 * sh
    if strategy == "zero3":
        return 4 * sh, 4 * sh, 8 * sh
    return 4 * psi, 4 * psi, 8 * psi


def sweep_rows(rng, doctor):
    rows, plans = [], []
    batch, seq = 16, 64
    base_tps = 8000.0  # one rank, fp32, small model (~27% of a 150 GFLOP/s core pair)
    for s in STRATEGIES:
        for w in WORLDS:
            tp, pp, dp, mesh = mesh_of(s, w)
            if dp < 1:
                continue
            eff = {"ddp": 0.92, "zero1": 0.9, "zero2": 0.88, "zero3": 0.8, "tp2": 0.75, "pp2.1f1b": 0.7}[s]
            tps = base_tps * w * eff ** math.log2(w) * rng.uniform(0.97, 1.03)
            p, g, o = model_states(s, dp, tp, pp)
            act = int(batch // dp * seq * C * 4 * 20 * (L // pp) / tp * rng.uniform(0.98, 1.02))
            comm = 0 if s in ("ddp", "tp2", "pp2.1f1b") else int(4 * math.ceil(PSI / dp) * 2)
            mem = {"mem_params": p, "mem_grads": g, "mem_optimizer": o, "mem_activations": act, "mem_comm": comm,
                   "mem_workspace": 65536}
            dpb = 0 if dp == 1 else (3 if s == "zero3" else 2) * 4 * math.ceil(PSI / (tp * pp))
            r = common("sweep", w, mesh)
            r.update(strategy=s, model="small", precision="fp32", microbatches=1, global_batch=batch, seq_len=seq,
                     scaling="strong", step_time_s=batch * seq / tps, tokens_per_s=tps * (1 + doctor),
                     model_flops_per_s=tps * 6 * PSI, mfu=tps * 6 * PSI / (w * 150e9), peak_flops=w * 150e9,
                     comm_dp_bytes=dpb, comm_tp_bytes=(8 * batch * seq * C * 4 * L if tp > 1 else 0),
                     comm_pp_bytes=(2 * batch * seq * C * 4 if pp > 1 else 0), comm_cp_bytes=0, comm_ep_bytes=0,
                     comm_inter_node_bytes=0, exposed_comm_s=0.1 * batch * seq / tps if w > 1 else 0,
                     bubble=(pp - 1) / (pp - 1 + batch // dp) if pp > 1 else 0,
                     mem_total=sum(mem.values()), mem_host_total=0, **mem)
            rows.append(r)
            pl = common("plan", w, mesh)
            pl["backend"] = "analytic"
            est = tps * rng.uniform(1.05, 1.3)
            pl.update(strategy=s, model="small", precision="fp32", params=PSI, microbatches=1, global_batch=batch,
                      seq_len=seq, mem_params=p, mem_grads=g, mem_optimizer=o,
                      mem_activations=int(act * rng.uniform(0.9, 1.1)), mem_comm=comm, mem_workspace=0,
                      activation_bytes=act, comm_dp_bytes=dpb, comm_tp_bytes=r["comm_tp_bytes"],
                      comm_pp_bytes=r["comm_pp_bytes"], comm_cp_bytes=0, comm_ep_bytes=0, comm_inter_node_bytes=0,
                      est_step_time_s=batch * seq / est,
                      est_tokens_per_s=est, est_mfu=est * 6 * PSI / (w * 150e9), peak_flops=w * 150e9,
                      est_bubble=r["bubble"])
            pl["mem_total"] = sum(pl[k] for k in mem if k in pl)
            plans.append(pl)
            if w == WORLDS[-1]:  # sweep.extrapolate: the series planned at 1024 ranks (no rng: same draws)
                tp2, pp2, dp2, mesh2 = mesh_of(s, 1024)
                x = dict(pl)
                x.update(world=1024, mesh=mesh2, est_tokens_per_s=est * (1024 / w) * eff ** math.log2(1024 / w),
                         reason="extrapolated from %d measured ranks with machine profile fixture" % w)
                x["global_batch"] = batch * 1024 // w  # weak beyond the measured worlds: every replica keeps work
                x["est_step_time_s"] = x["global_batch"] * seq / x["est_tokens_per_s"]
                plans.append(x)
    # Context parallel at cp2: ring (K/V blocks forward, K/V + dK/dV backward)
    # and Ulysses (4 + 4 all-to-alls per layer), activations halved.
    for algo, sent in (("ring", 6), ("ulysses", 8)):
        p, g, o = model_states("ddp", 1, 1, 1)
        act = int(batch * seq // 2 * C * 4 * 20 * L * rng.uniform(0.98, 1.02))
        cpb = sent * batch * seq // 2 * C * 4 * L // (2 if algo == "ulysses" else 1)
        mem = {"mem_params": p, "mem_grads": g, "mem_optimizer": o, "mem_activations": act, "mem_comm": 0,
               "mem_workspace": 65536}
        tps = base_tps * 2 * 0.7 * rng.uniform(0.97, 1.03)
        r = common("sweep", 2, "dp1.tp1.cp2.pp1")
        r.update(strategy="cp_algo=" + algo, model="small", precision="fp32", microbatches=1, global_batch=batch,
                 seq_len=seq, scaling="strong", step_time_s=batch * seq / tps, tokens_per_s=tps * (1 + doctor),
                 model_flops_per_s=tps * 6 * PSI, mfu=tps * 6 * PSI / (2 * 150e9), peak_flops=2 * 150e9,
                 comm_dp_bytes=2 * 4 * PSI, comm_tp_bytes=0, comm_pp_bytes=0, comm_cp_bytes=cpb, comm_ep_bytes=0,
                 comm_inter_node_bytes=0, exposed_comm_s=0.1 * batch * seq / tps, bubble=0,
                 mem_total=sum(mem.values()), mem_host_total=0, **mem)
        rows.append(r)
        pl = common("plan", 2, "dp1.tp1.cp2.pp1")
        pl["backend"] = "analytic"
        est = tps * rng.uniform(1.05, 1.3)
        pl.update(strategy="cp_algo=" + algo, model="small", precision="fp32", params=PSI, microbatches=1,
                  global_batch=batch, seq_len=seq, mem_params=p, mem_grads=g, mem_optimizer=o, mem_activations=act,
                  mem_comm=0, mem_workspace=65536, activation_bytes=act, comm_dp_bytes=2 * 4 * PSI, comm_tp_bytes=0,
                  comm_pp_bytes=0, comm_cp_bytes=cpb, comm_ep_bytes=0, comm_inter_node_bytes=0,
                  est_step_time_s=batch * seq / est, est_tokens_per_s=est, est_mfu=est * 6 * PSI / (2 * 150e9),
                  peak_flops=2 * 150e9, est_bubble=0)
        pl["mem_total"] = sum(pl[k] for k in mem if k in pl)
        plans.append(pl)
    # A mixture-of-experts model at dp2 and dp2.ep2: the expert axis's
    # all-to-all bytes and the routing's load statistics.
    for mesh, epb in (("dp2", 0), ("dp2.ep2", 66848)):
        p, g, o = model_states("ddp", 2, 1, 1)
        mem = {"mem_params": p, "mem_grads": g, "mem_optimizer": o, "mem_activations": 400000, "mem_comm": 0,
               "mem_workspace": 65536}
        tps = base_tps * 2 * 0.8 * rng.uniform(0.97, 1.03)
        r = common("sweep", 2, mesh)
        r.update(strategy="shard=none", model="tiny-moe", precision="fp32", microbatches=1, global_batch=batch,
                 seq_len=seq, scaling="weak", step_time_s=batch * seq / tps, tokens_per_s=tps * (1 + doctor),
                 model_flops_per_s=tps * 6 * PSI, mfu=tps * 6 * PSI / (2 * 150e9), peak_flops=2 * 150e9,
                 comm_dp_bytes=79240, comm_tp_bytes=0, comm_pp_bytes=0, comm_cp_bytes=0, comm_ep_bytes=epb,
                 comm_inter_node_bytes=0, exposed_comm_s=0.1 * batch * seq / tps, bubble=0,
                 moe_dropped=0.074 * rng.uniform(0.9, 1.1), moe_load_max_mean=1.4 * rng.uniform(0.9, 1.1),
                 mem_total=sum(mem.values()), mem_host_total=0, **mem)
        rows.append(r)
        pl = common("plan", 2, mesh)
        pl["backend"] = "analytic"
        est = tps * rng.uniform(1.05, 1.3)
        pl.update(strategy="shard=none", model="tiny-moe", precision="fp32", params=PSI, microbatches=1,
                  global_batch=batch, seq_len=seq, mem_activations=400000, mem_comm=0, mem_workspace=65536,
                  activation_bytes=400000, comm_dp_bytes=79232, comm_tp_bytes=0, comm_pp_bytes=0, comm_cp_bytes=0,
                  comm_ep_bytes=int(epb * 0.98), comm_inter_node_bytes=0, est_step_time_s=batch * seq / est,
                  est_tokens_per_s=est, est_mfu=est * 6 * PSI / (2 * 150e9), peak_flops=2 * 150e9, est_bubble=0,
                  mem_params=p, mem_grads=g, mem_optimizer=o)
        pl["mem_total"] = sum(pl[k] for k in mem if k in pl)
        plans.append(pl)
    return rows, plans


def conformance_rows(rng, fail):
    rows = []
    for s in STRATEGIES:
        for prec in ("fp32", "bf16-mixed"):
            bitwise = s in ("ddp", "zero1", "zero2") and prec == "fp32"
            for q in ("loss", "grads", "params"):
                steps = range(1, 6) if q == "loss" else [1 if q == "grads" else 5]
                for st in steps:
                    floor = {"fp32": 3e-7, "bf16-mixed": 4e-3}[prec] * rng.uniform(0.5, 2)
                    ratio = 0.0 if bitwise else math.exp(rng.uniform(math.log(0.2), math.log(4)))
                    r = common("conformance", 4, "dp4")
                    r.update(strategy=s, precision=prec, quantity=q, step=st, error=ratio * floor, floor=floor,
                             ratio=ratio, threshold=0 if bitwise else 8, bitwise=int(bitwise), **{"pass": 1})
                    rows.append(r)
    if fail:
        rows[-1].update(ratio=23.5, error=23.5 * rows[-1]["floor"], **{"pass": 0})
    return rows


def collective_rows(rng):
    rows = []
    factor = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n}
    for op, f in factor.items():
        for world in (2, 4):
            for k in range(10, 27, 2):
                size = 1 << k
                t = 12e-6 * (world - 1) + f(world) * size / 6e9 * rng.uniform(0.95, 1.05)
                r = common("collective", world, "dp%d" % world)
                r.update(op=op, bytes=size, count=size // 4, dtype="fp32", redop="sum" if op != "all_gather" else "none",
                         inplace=0, iters=20, time_us=t * 1e6, algbw_gbps=size / t / 1e9,
                         busbw_gbps=size / t / 1e9 * f(world), wrong=0)
                rows.append(r)
    return rows


def train_rows(rng):
    rows = []
    for h, (mesh, w) in {"a1b2c3d4e5f60718": ("dp1", 1), "0f1e2d3c4b5a6978": ("dp4", 4)}.items():
        for step in range(1, 31):
            r = common("train_step", w, mesh)
            r["config_hash"] = h
            r.update(step=step, loss=1.1 + 4.4 * math.exp(-step / 7) + rng.uniform(-0.02, 0.02), grad_norm=2.0 / step,
                     lr=1e-3, tokens_per_s=21000 * w * 0.9, step_time_s=1024 / (21000 * w * 0.9),
                     mem_total=8 * PSI * 4 // w, mem_host_total=0)
            rows.append(r)
    return rows


def timeline_1f1b(p=4, m=8, f=1.0, b=2.0):
    """Event times of 1F1B (Narayanan et al. 2021): rank r warms up with min(p-r-1, m) forwards."""
    order = []
    for r in range(p):
        warm = min(p - r - 1, m)
        acts = [("F", j) for j in range(warm)]
        nf, nb = warm, 0
        while nb < m:
            if nf < m:
                acts.append(("F", nf))
                nf += 1
            acts.append(("BW", nb))
            nb += 1
        order.append(acts)
    end, free, idx, out = {}, [0.0] * p, [0] * p, []
    while any(idx[r] < len(order[r]) for r in range(p)):
        for r in range(p):
            while idx[r] < len(order[r]):
                a, j = order[r][idx[r]]
                dep = (r - 1, "F", j) if a == "F" and r > 0 else (r + 1, "BW", j) if a == "BW" and r < p - 1 else None
                if dep and dep not in end:
                    break
                start = max(free[r], end[dep] if dep else 0.0)
                free[r] = end[(r, a, j)] = start + (f if a == "F" else b)
                out.append({"rank": r, "action": a, "microbatch": j, "chunk": 0, "start": start, "end": free[r]})
                idx[r] += 1
    return out


def write(path, cols, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if r.get(c) is None else r.get(c) for c in cols])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--doctor-throughput", type=float, default=0.0)
    ap.add_argument("--fail-conformance", action="store_true")
    ap.add_argument("--drop-point", action="store_true")
    ap.add_argument("--schema", default=SCHEMA)
    ap.add_argument("--host", default="fixture", help="the host the rows record (a machine's name)")
    ap.add_argument("--device", default="cpu", help="the device the sweep rows record (a GPU's name)")
    ap.add_argument("--speed", type=float, default=1.0,
                    help="scales throughputs and bandwidths (a faster or slower fixture machine)")
    a = ap.parse_args()
    with open(a.schema) as fh:
        schema = json.load(fh)
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(7)
    sweep, plans = sweep_rows(rng, a.doctor_throughput)
    if a.drop_point:
        sweep.pop()
    conf, coll, train = conformance_rows(rng, a.fail_conformance), collective_rows(rng), train_rows(rng)
    for r in sweep + plans + conf + coll + train:
        r["host"] = a.host
    for r in sweep:
        r["device"] = a.device
    for r in sweep + train:
        r["tokens_per_s"] *= a.speed
        for c in ("step_time_s", "step_time_min_s", "step_time_max_s"):
            if r.get(c) is not None:
                r[c] /= a.speed
    for r in plans:
        r["est_tokens_per_s"] *= a.speed
    for r in coll:
        for c in ("algbw_gbps", "busbw_gbps"):
            r[c] *= a.speed
        r["time_us"] /= a.speed
    for kind, rows in (("sweep", sweep), ("plan", plans), ("conformance", conf), ("collective", coll),
                       ("train_step", train)):
        write(os.path.join(a.out, kind + ".csv"), header(schema, kind), rows)
    write(os.path.join(a.out, "timeline_1f1b_p4_m8.csv"), ["rank", "action", "microbatch", "chunk", "start", "end"],
          timeline_1f1b())


if __name__ == "__main__":
    main()
